"""Native MIME parsers against the featurizer's own reader, on every raw corpus.

For a library to take over part of :func:`streamnb.features.read_mail` it must read every
message, decode charsets as well, stay bounded on hostile input and be faster. This prints,
per corpus: the messages it raised on, CPU microseconds per message (the library, our reader,
the standard-library peer of ``bench.bench_features``), how many messages give the same
plain text and subject as our reader, how many give no text where ours has some, and how
many keep a U+FFFD; then the wall time of each hostile input of
``tests/features/test_features_hostile.py``'s kinds, up to 200 kB of repeated ``=?``.

The library is not a dependency; install it to measure it:

    pip install fast-mail-parser==0.10.0        # or fast-mail-parser-ng
    python -m bench.bench_mail_parsers
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bench_features import load_corpus, stdlib_tokens  # noqa: E402
from streamnb.features import Featurizer  # noqa: E402

CORPORA = ("spamassassin", "chinese-spam", "20newsgroups")


def hostile_inputs() -> dict[str, bytes]:
    return {
        "1000 nested multiparts": b"".join(
            b"Content-Type: multipart/mixed; boundary=b%d\n\n--b%d\n" % (d, d)
            for d in range(1000)
        )
        + b"Content-Type: text/plain\n\ndeep inside\n",
        "1000 sibling parts": b"Content-Type: multipart/mixed; boundary=X\n\n"
        + b"".join(b"--X\nContent-Type: text/plain\n\npart %d\n" % i for i in range(1000))
        + b"--X--\n",
        "20 MB body": b"Subject: big\n\n" + b"word " * (4 * 1024 * 1024),
        "20 MB base64 attachment": b"Content-Type: multipart/mixed; boundary=z\n\n--z\n\nhello"
        b"\n--z\nContent-Type: application/zip\nContent-Transfer-Encoding: base64\n\n"
        + b"QUFBQUFB\n" * (20 * 1024 * 1024 // 9),
        "100 kB subject, 50k headers": b"Subject: " + b"x" * 100_000 + b"\n" + b"X-A: b\n" * 50_000,
        **{
            f"subject of {n // 1000} kB of '=?'": b"Subject: " + b"=?" * (n // 2) + b"\n\nend"
            for n in (50_000, 100_000, 200_000)
        },
        "100 kB of '--B' lines": b"Content-Type: multipart/mixed; boundary=B\n\n"
        + b"--B\n" * 25_000,
    }


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    try:
        import fast_mail_parser
    except ImportError:  # not a dependency: `make bench` goes on without it
        print("fast_mail_parser is not installed: pip install fast-mail-parser to measure it")
        return
    parse = fast_mail_parser.parse_email
    featurizer = Featurizer()
    clock = time.process_time
    print(f"library: {fast_mail_parser.__file__}")
    for corpus in CORPORA:
        messages = load_corpus(corpus)
        raised: dict[str, int] = {}
        spent = {"library": 0.0, "ours": 0.0, "stdlib": 0.0}
        same = no_text = lib_fffd = our_fffd = 0
        for raw in messages:
            start = clock()
            try:
                mail = parse(raw)
            except Exception as error:  # what it raises is what we measure
                raised[type(error).__name__] = raised.get(type(error).__name__, 0) + 1
                mail = None
            spent["library"] += clock() - start
            start = clock()
            ours = featurizer.read(raw)
            spent["ours"] += clock() - start
            start = clock()
            stdlib_tokens(raw)
            spent["stdlib"] += clock() - start
            if mail is None:
                continue
            lib_text = "\n".join(mail.text_plain)
            our_text = "\n".join(p.text for p in ours.parts if p.html is None)
            lib_fffd += "\ufffd" in lib_text + mail.subject
            our_fffd += "\ufffd" in our_text + ours.subject
            no_text += not lib_text.strip() and bool(our_text.strip())
            same += lib_text.split() == our_text.split() and (
                mail.subject.split() == ours.subject.split()
            )
        n = len(messages)
        us = {k: v / n * 1e6 for k, v in spent.items()}
        print(
            f"{corpus}: {n} messages; raised on {sum(raised.values())} {raised or ''}; "
            f"us/message library {us['library']:.0f}, our reader {us['ours']:.0f}, "
            f"stdlib peer {us['stdlib']:.0f}; same plain text and subject {same}; "
            f"no text where ours has some {no_text}; U+FFFD library {lib_fffd}, ours {our_fffd}"
        )
    for name, raw in hostile_inputs().items():
        start = time.perf_counter()
        try:
            mail = parse(raw)
            outcome = f"{sum(map(len, mail.text_plain))} chars of text"
        except Exception as error:  # what it raises is what we measure
            outcome = f"raised {type(error).__name__}"
        library = time.perf_counter() - start
        start = time.perf_counter()
        featurizer.from_raw(raw)
        ours = time.perf_counter() - start
        print(f"  {name:<30} library {library:7.3f} s ({outcome}); featurizer {ours:7.3f} s")


if __name__ == "__main__":
    main()
