"""Drift: prequential accuracy and (1 - ROC area) with decaying counts (``half_life``, in
learned messages) against no decay, on chronological streams of the shared corpora.

    python -m bench.bench_drift [--half-lives 250,1000,4000] [--kind multinomial] [--streams ...]

Streams (each featurized once with the default featurizer):

- ``spamassassin-date``: the SpamAssassin corpus in the order of its messages' Date headers
  (a message whose Date does not parse keeps its place after the message before it in the
  index); the corpus spans 2002-2003 in five folders;
- ``sms``, ``chinese``: the SMS and Chinese sets in file order (neither has dates);
- ``sms-then-spamassassin``, ``spamassassin-then-chinese``: one corpus, then another: the
  filter meets a new kind of mail at once (a drift that is sure to be there).

Each message is scored by the model (the default model and preset for the kind, plus
``half_life``), then learned, one at a time. Printed per stream and half-life: accuracy,
(1 - ROCA) % of the spam log-odds, for the two-corpus streams the accuracy on the second
corpus and on its first 1,000 messages, and the seconds the prequential loop took.

``--epoch-cost H`` also prints what a decaying slice writes to its changelog per commit of 100
messages on SpamAssassin by Date with half-life H: the median commit, and the commits in which
a new epoch (every 64·H messages) rescaled every count, beside the whole slice.
"""

from __future__ import annotations

import argparse
import datetime
import email.utils
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

from streamnb.daemon.changelog import all_records, changed_records  # noqa: E402
from streamnb.daemon.feedback import FeedbackStore  # noqa: E402
from streamnb.evaluation.corpora import read_corpus  # noqa: E402
from streamnb.evaluation.scoring import roc_auc  # noqa: E402
from streamnb.models import make_model  # noqa: E402
from streamnb.models._text import DECAY_EPOCH_BITS  # noqa: E402
from streamnb.models.presets import resolve  # noqa: E402
from streamnb.pipeline import build_pipeline  # noqa: E402

STREAMS = ("spamassassin-date", "sms", "chinese", "sms-then-spamassassin",
           "spamassassin-then-chinese")
SWITCH_WINDOW = 1000


def _date(raw: bytes):
    head = raw.split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\n"):
        if line[:5].lower() == b"date:":
            try:
                parsed = email.utils.parsedate_to_datetime(line[5:].decode("latin-1").strip())
            except (TypeError, ValueError, IndexError):
                return None
            # "-0000" (no zone known) parses naive: read as UTC
            return parsed.replace(tzinfo=parsed.tzinfo or datetime.UTC).timestamp()
    return None


def _featurized(name: str, by_date: bool = False) -> tuple[list[tuple[dict, str]], int]:
    pipeline = build_pipeline({"kind": "multinomial"}, {})
    messages = read_corpus(DATA / name).messages
    undated = 0
    if by_date:
        keyed, last = [], -math.inf
        for position, message in enumerate(messages):
            stamp = _date(message.raw)
            if stamp is None:
                undated += 1
                stamp = last
            last = stamp
            keyed.append((stamp, position, message))
        messages = [m for _, _, m in sorted(keyed, key=lambda item: item[:2])]
    return [(dict(pipeline.prepare(m).x), m.label) for m in messages], undated


def streams(names) -> dict[str, tuple[list, int | None]]:
    """name -> (messages, index of the first message of the second corpus or None)."""
    cache: dict[str, list] = {}

    def corpus(key: str) -> list:
        if key not in cache:
            started = time.perf_counter()
            folder, by_date = {"spamassassin-date": ("spamassassin", True),
                               "sms": ("sms-spam-collection", False),
                               "chinese": ("chinese-spam", False)}[key]
            cache[key], undated = _featurized(folder, by_date)
            note = f", {undated} without a parseable Date kept in place" if by_date else ""
            print(f"# {key}: {len(cache[key]):,} messages featurized in "
                  f"{time.perf_counter() - started:.0f} s{note}", flush=True)
        return cache[key]

    out = {}
    for name in names:
        if "-then-" in name:
            first, second = name.split("-then-")
            first = "spamassassin-date" if first == "spamassassin" else first
            second = "spamassassin-date" if second == "spamassassin" else second
            out[name] = (corpus(first) + corpus(second), len(corpus(first)))
        else:
            out[name] = (corpus(name), None)
    return out


def prequential(stream, kind: str, half_life: int | None) -> dict:
    kind, options = resolve({"kind": kind})
    model = make_model(kind, **options, half_life=half_life)
    right, scores, truth = [], [], []
    started = time.perf_counter()
    for x, y in stream:
        log_proba = model.predict_log_proba_one(x)
        predicted = max(sorted(log_proba), key=log_proba.__getitem__) if log_proba else None
        right.append(predicted == y)
        scores.append(log_proba.get("spam", -math.inf) - log_proba.get("ham", -math.inf)
                      if len(log_proba) == 2 else 0.0)
        truth.append(y == "spam")
        model.learn_one(x, y)
    seconds = time.perf_counter() - started
    return {"right": right, "scores": scores, "truth": truth, "seconds": seconds}


def _commits(stream, kind: str, half_life: int | None, every: int):
    """Per commit of ``every`` messages: (records, bytes, whether a new epoch began); and the
    whole slice's (records, bytes) at the end."""
    kind, options = resolve({"kind": kind})
    model = make_model(kind, **options, half_life=half_life)
    no_feedback = FeedbackStore()
    no_feedback.mark_changes()
    model.mark_changes()
    commits = []
    epoch = 0
    for i, (x, y) in enumerate(stream, 1):
        model.learn_one(x, y)
        if i % every == 0 or i == len(stream):
            records = changed_records(model, no_feedback)
            now = model.decay_clock // (DECAY_EPOCH_BITS * half_life) if half_life else 0
            commits.append((len(records), sum(len(k) + len(v or b"") for k, v in records),
                            now != epoch))
            epoch = now
            model.mark_changes()
    whole = all_records(model, no_feedback)
    return commits, (len(whole), sum(len(k) + len(v or b"") for k, v in whole))


def epoch_cost(stream, kind: str, half_life: int, every: int = 100) -> None:
    for h in (None, half_life):
        commits, whole = _commits(stream, kind, h, every)
        plain = sorted((k, b) for k, b, new in commits[:-1] if not new)
        median = plain[len(plain) // 2]
        epochs = [f"{k:,} records, {b:,} bytes" for k, b, new in commits if new]
        print(f"changelog per commit of {every} messages, half-life {h or 'none'}: median "
              f"{median[0]:,} records, {median[1]:,} bytes"
              + (f"; at each new epoch (every {DECAY_EPOCH_BITS * h:,} messages) "
                 + "; ".join(epochs) if h else "")
              + f"; the whole slice at the end {whole[0]:,} records, {whole[1]:,} bytes",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half-lives", default="250,1000,4000")
    parser.add_argument("--kind", default="multinomial")
    parser.add_argument("--streams", default=",".join(STREAMS))
    parser.add_argument("--epoch-cost", type=int, metavar="H",
                        help="also print the changelog bytes per commit with half-life H")
    args = parser.parse_args(argv)
    half_lives = [None, *(int(h) for h in args.half_lives.split(","))]
    for name, (stream, switch) in streams(args.streams.split(",")).items():
        print(f"{name}: {len(stream):,} messages, model {args.kind} (default preset)"
              + (f", second corpus from message {switch + 1:,}" if switch else ""), flush=True)
        base = None
        for half_life in half_lives:
            run = prequential(stream, args.kind, half_life)
            right = run["right"]
            accuracy = sum(right) / len(right)
            auc = roc_auc(run["truth"], run["scores"])
            base = accuracy if base is None else base
            line = (f"  half-life {half_life or 'none':>6}: accuracy {accuracy:.4f} "
                    f"({accuracy - base:+.4f}), (1-ROCA) {100 * (1 - auc):.3f} %")
            if switch:
                after = right[switch:]
                window = right[switch:switch + SWITCH_WINDOW]
                line += (f", second corpus {sum(after) / len(after):.4f}, its first "
                         f"{len(window):,} {sum(window) / len(window):.4f}")
            print(line + f", {run['seconds']:.1f} s", flush=True)
    if args.epoch_cost:
        epoch_cost(streams(["spamassassin-date"])["spamassassin-date"][0], args.kind,
                   args.epoch_cost)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
