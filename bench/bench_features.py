"""Featurizer throughput against the plain standard-library reader, measured in the same run.

The peer ("stdlib") is what a few lines of Python would do: ``email.message_from_bytes`` with
``policy.compat32``, every ``text/*`` part decoded with its declared charset, tokens by a
``\\w+`` regex on the lower-cased text, counted in a dict. The featurizer does much more (charset
fallbacks, HTML to visible text, Chinese segmentation, header, URL and MIME tokens, limits).
``streamnb`` runs the C extension (``streamnb.features._tokens``) where it is built;
``streamnb/python`` is the same featurizer on its pure-Python path, in the same run.

Each round runs every contender over the whole corpus (held in memory, so no disk I/O is
measured), a slice of ``--slice`` messages at a time: every contender reads a slice before the
next slice is read, in an order that alternates from slice to slice. The speed of a shared
machine drifts by tens of percent over seconds; interleaving this finely makes every
contender see the same drift, so their ratio holds still where whole passes one after the
other scatter by ±15%. The figures printed are medians over rounds, and the ratio is the
median of the per-round ratios to the peer. Throughput is given twice: by CPU time of this
process (steady on a shared machine, where other jobs steal the cores) and by wall-clock time.

    python -m bench.bench_features                    # SpamAssassin and the Chinese set
    python -m bench.bench_features --rounds 5 --corpus spamassassin
"""

from __future__ import annotations

import argparse
import email
import email.policy
import os
import re
import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a file as well as with -m
    sys.path.insert(0, str(REPO))

from streamnb.features import Featurizer, FeaturizerOptions, native  # noqa: E402

DATA = Path(os.environ.get("STREAMNB_DATA", REPO.parent / "shared" / "data"))
_WORD_RE = re.compile(r"\w+")


def load_corpus(name: str, limit: int | None = None) -> list[bytes]:
    """The raw messages of ``<data>/<name>/messages.tar.gz``, in archive order."""
    messages = []
    with tarfile.open(DATA / name / "messages.tar.gz") as archive:
        for member in archive:
            if member.isfile():
                messages.append(archive.extractfile(member).read())
                if limit and len(messages) >= limit:
                    break
    return messages


def stdlib_tokens(raw: bytes) -> dict[str, int]:
    """The peer: compat32 parse, text parts with their declared charset, ``\\w+`` tokens."""
    message = email.message_from_bytes(raw, policy=email.policy.compat32)
    counts: dict[str, int] = {}
    for part in message.walk():
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        charset = part.get_content_charset() or "latin-1"
        try:
            text = payload.decode(charset, "replace")
        except LookupError:
            text = payload.decode("latin-1")
        for word in _WORD_RE.findall(text.lower()):
            counts[word] = counts.get(word, 0) + 1
    return counts


def contenders(corpus: str) -> dict[str, Callable[[bytes], object]]:
    everything = FeaturizerOptions(meta_features=True, bigrams=True, stop_lists=["english"])
    runs = {
        "stdlib": stdlib_tokens,
        "streamnb": Featurizer().from_raw,  # the defaults
        "streamnb+all": Featurizer(everything).from_raw,  # meta-features, bigrams, stop words
    }
    if native.enabled():  # the same tokens without the C extension (STREAMNB_PURE_PYTHON=1)
        runs["streamnb/python"] = Featurizer(native=False).from_raw
    if corpus == "chinese-spam":  # what word segmentation costs: single characters instead
        runs["streamnb/chars"] = Featurizer(FeaturizerOptions(cjk_segmenter="chars")).from_raw
    return runs


def measure(
    corpus: str, messages: list[bytes], rounds: int, slice_size: int = 100
) -> dict[str, list[tuple[float, float]]]:
    """(CPU seconds, wall seconds) per full pass over ``messages``, per contender and round."""
    runs = contenders(corpus)
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for fn in runs.values():  # warm-up: imports, regex caches, the segmenter's dictionary
        for raw in messages[:50]:
            fn(raw)
    for r in range(rounds):
        spent = {name: [0.0, 0.0] for name in runs}
        for k, start in enumerate(range(0, len(messages), slice_size)):
            piece = messages[start : start + slice_size]
            order = list(runs.items())
            if (k + r) % 2:
                order.reverse()
            for name, fn in order:
                cpu, wall = time.process_time(), time.perf_counter()
                for raw in piece:
                    fn(raw)
                spent[name][0] += time.process_time() - cpu
                spent[name][1] += time.perf_counter() - wall
        for name, (cpu, wall) in spent.items():
            seconds[name].append((cpu, wall))
    return seconds


def report(corpus: str, messages: list[bytes], seconds: dict[str, list[tuple[float, float]]]):
    n, megabytes = len(messages), sum(map(len, messages)) / 1e6
    peer = seconds["stdlib"]
    print(f"\n{corpus}: {n} messages, {megabytes:.1f} MB, {len(peer)} rounds (medians)")
    print(
        f"  {'reader':<16}{'mails/s':>9}{'MB/s':>7}{'vs stdlib':>11}"
        f"   {'wall mails/s':>12}{'MB/s':>7}{'vs stdlib':>11}"
    )
    for name, runs in seconds.items():
        line = f"  {name:<16}"
        for i, gap in ((0, ""), (1, "   ")):
            median = statistics.median(run[i] for run in runs)
            ratio = statistics.median(p[i] / s[i] for p, s in zip(peer, runs, strict=True))
            width = 12 if i else 9
            line += f"{gap}{n / median:>{width}.0f}{megabytes / median:>7.2f}{ratio:>10.2f}x"
        print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=["spamassassin", "chinese-spam"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="first N messages only")
    parser.add_argument(
        "--slice", type=int, default=100, help="messages each contender reads in turn"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load:.1f}, data {DATA}")
    for corpus in args.corpus:
        messages = load_corpus(corpus, args.limit)
        report(corpus, messages, measure(corpus, messages, args.rounds, args.slice))
    print("\nmails/s and MB/s by CPU time, then by wall time; vs stdlib > 1 means faster.")


if __name__ == "__main__":
    main()
