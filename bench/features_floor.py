"""Where the featurizer's time goes on mail, and what bounds it: the C-level steps it needs.

First the featurizer's own stages, each timed over the corpus: reading the mail, the body's
words, URL tokens, header tokens, header layout tokens, MIME tokens. Then, over the same
messages (held in memory, already read once), only the calls into C the featurizer makes for
the default tokens, with none of the Python around them: the word counts of the body and the
header fields, the header layout tokens, the URL tokens, the top entity's split and header
fields (``streamnb.features._tokens``), HTML to text (selectolax). Their sum is what the
featurizer would cost if all its Python took no time. Last, the calls a pure-Python tokenizer
of the same tokens must make (``str.split``/``re.findall`` and ``Counter``: one str object per
token occurrence), the bound the C extension was written to get past. The standard-library peer's
time over each sum bounds the ratio ``bench.bench_features`` can show. CPU time, best of
``--rounds`` passes.

    python -m bench.features_floor [--rounds 5] [--corpus spamassassin]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bench_features import load_corpus, stdlib_tokens  # noqa: E402
from streamnb.features import Featurizer  # noqa: E402
from streamnb.features.featurizer import _expected_tokens, _mime_tokens  # noqa: E402
from streamnb.features.html import html_to_text  # noqa: E402
from streamnb.features.mail import (  # noqa: E402
    _MIME_HEADERS,
    SECOND_LEVEL_LABELS,
    Budget,
    _wanted_headers,
)
from streamnb.features.native import _tokens as native_module  # noqa: E402
from streamnb.features.tokenize import _NON_ASCII_SEPARATORS  # noqa: E402


def best_of(rounds: int, fn: Callable[[object], object], items: list) -> float:
    """The least CPU seconds of ``rounds`` passes of ``fn`` over ``items``."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for item in items:
            fn(item)
        best = min(best, time.process_time() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="spamassassin")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    messages = load_corpus(args.corpus)
    featurizer = Featurizer()
    tokenizer, options = featurizer.tokenizer, featurizer.options
    mails = [featurizer.read(raw) for raw in messages]
    ascii_texts, other_texts = [], []  # prepared (lower-cased, separators made spaces)
    raw_ascii, raw_other, raw_han = [], [], []  # as the C calls take them
    for mail in mails:
        raw = mail.text
        text = tokenizer._prepare(raw)
        (ascii_texts if text.isascii() else other_texts).append(text)
        if raw.isascii():
            raw_ascii.append(raw)
        else:
            (raw_han if tokenizer._has_han(raw) else raw_other).append(raw)
    header_texts = [  # per mail: (prefix, lower-case text) of each field tokenized
        [
            (name + ":", "\n".join(values).lower())
            for name, values in mail.headers.items()
            if name in options.header_fields
        ]
        for mail in mails
    ]
    html = [part.html for mail in mails for part in mail.parts if part.html is not None]
    wanted = _wanted_headers(options.header_fields)
    blocks = [raw.partition(b"\n\n")[0] for raw in messages]
    separators, word_re = tokenizer._ascii_separators, tokenizer._word_re
    ascii_word_re = tokenizer._ascii_word_re

    def header_words(fields: list[tuple[str, str]]) -> Counter[str]:
        tokens = []
        for prefix, text in fields:
            words = ascii_word_re.findall(text) if text.isascii() else word_re.findall(text)
            if words:  # prefix + word, by C loops
                tokens += (prefix + (" " + prefix).join(words)).split(" ")
        return Counter(tokens)

    pure_python_steps = {
        "body words, ASCII: translate+split+Counter": (
            lambda t: Counter(t.translate(separators).split()),
            ascii_texts,
        ),
        "body words, other: word regex+Counter": (
            lambda t: Counter(word_re.findall(t)),
            other_texts,
        ),
        "header words: regex+prefix+Counter": (header_words, header_texts),
        "header block: field regex": (wanted.pattern.findall, blocks),
        # the pure-Python featurizer parses every part with selectolax
        "HTML to text (selectolax)": (lambda m: html_to_text(m, scan=False), html),
    }
    native = tokenizer._native
    c_steps = {
        "header block: field regex": (wanted.pattern.findall, blocks),
        "HTML to text (selectolax)": (html_to_text, html),
    }
    if native is not None:
        markup = [[part.html or part.text for part in mail.parts] for mail in mails]

        def native_header_words(mail) -> Counter[str]:
            counts: Counter[str] = Counter()
            native.count_header_fields(  # what it leaves (non-ASCII values) is not counted
                featurizer._header_fields, mail.headers, counts, SECOND_LEVEL_LABELS,
                options.address_words, options.lowercase,
            )
            return counts

        def native_body_words(texts: tuple[str, str, str]) -> None:
            ascii_text, other_text, han_text = texts
            if ascii_text is not None:  # lower-cased as it is read
                native.count(ascii_text, Counter(), None, options.lowercase)
            if other_text is not None:  # prepared and counted in one call
                native.count_prepared(
                    other_text, Counter(), _NON_ASCII_SEPARATORS, options.lowercase
                )
            if han_text is not None:  # its words but the Chinese segmentation
                native.count(tokenizer._prepare(han_text), Counter())

        body_texts = (
            [(t, None, None) for t in raw_ascii] + [(None, t, None) for t in raw_other]
            + [(None, None, t) for t in raw_han]
        )
        c_steps = {
            "body words (WordCounter.count/count_prepared)": (native_body_words, body_texts),
            "header words and addresses (_tokens)": (native_header_words, mails),
            "header layout (_tokens.header_layout)": (
                lambda block: native_module.header_layout(
                    block, options.min_header_order, options.header_order,
                    options.header_shapes, Counter(),
                ),
                [mail.header_block for mail in mails],
            ),
            "URL tokens (_tokens.count_url_tokens)": (
                lambda texts: [
                    native_module.count_url_tokens(t, Counter(), SECOND_LEVEL_LABELS)
                    for t in texts
                ],
                markup,
            ),
            # the header split, the fields read, unfolded, the subject and the addresses
            "top entity (_tokens.read_top)": (
                lambda raw: native_module.read_top(raw, wanted.names, _MIME_HEADERS),
                messages,
            ),
            "HTML to text (scanner, else selectolax)": (html_to_text, html),
        }
    n = len(messages)
    print(f"{args.corpus}: {n} messages, best of {args.rounds} passes, CPU us per message")

    def body_words(mail):
        text = mail.text
        expected = _expected_tokens(text, mail)  # the size the featurizer makes the counts
        return featurizer._count(text, Budget(options), urls=False, expected=expected)

    def header_layout(mail):
        counts: Counter[str] = Counter()
        featurizer._add_header_layout(
            mail.header_block, options.min_header_order, options.header_order,
            options.header_shapes, counts,
        )
        return counts

    def urls(mail):
        counts: Counter[str] = Counter()
        for part in mail.parts:  # as the featurizer does without meta-features
            tokenizer.count_url_tokens(part.html or part.text, counts)
        return counts

    stages = {
        "read the mail (read_mail)": (featurizer.read, messages),
        "body words": (body_words, mails),
        "URL tokens": (urls, mails),
        "header tokens (counted)": (featurizer._header_tokens, mails),
        "header layout tokens (order, shapes)": (header_layout, mails),
        "MIME tokens": (_mime_tokens, mails),
    }
    for name, (fn, items) in stages.items():
        print(f"  stage: {name:<45}{best_of(args.rounds, fn, items) / n * 1e6:7.1f}")
    peer = best_of(args.rounds, stdlib_tokens, messages) / n * 1e6
    whole = best_of(args.rounds, featurizer.from_raw, messages) / n * 1e6
    path = "C extension" if native is not None else "pure Python (STREAMNB_PURE_PYTHON)"
    print(f"  the featurizer's C calls, on its {path} path:")
    floor = 0.0
    for name, (fn, items) in c_steps.items():
        spent = best_of(args.rounds, fn, items) / n * 1e6
        floor += spent
        print(f"  C: {name:<49}{spent:7.1f}")
    print(f"  {'sum of the C calls':<52}{floor:7.1f}")
    pure_floor = 0.0
    for name, (fn, items) in pure_python_steps.items():
        spent = best_of(args.rounds, fn, items) / n * 1e6
        pure_floor += spent
        print(f"  pure-Python floor: {name:<34}{spent:7.1f}")
    print(f"  {'sum of the pure-Python floor':<52}{pure_floor:7.1f}")
    print(f"  {'featurizer (defaults), whole':<52}{whole:7.1f}")
    print(f"  {'stdlib peer':<52}{peer:7.1f}")
    print(
        f"peer / featurizer = {peer / whole:.2f}x; peer / its C calls = {peer / floor:.2f}x "
        f"at most; peer / pure-Python floor = {peer / pure_floor:.2f}x"
    )


if __name__ == "__main__":
    main()
