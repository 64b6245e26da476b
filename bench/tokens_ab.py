"""Two builds of the C extension ``streamnb.features._tokens``, timed side by side.

Each build (a compiled ``_tokens*.so``: the installed one, or one built with other flags or
from another commit's ``_tokens.c``) is loaded as its own module in one process; their calls
over SpamAssassin (the body's word count, ASCII and other texts, the header words, the
layout tokens, the URL tokens: ``url_hosts`` in a build without ``count_url_tokens``) are
timed in turns, the order alternating from round to round, so the drift of a shared machine
falls on both. CPU µs per mail, best of ``--rounds``.

    INCLUDE=$(python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
    gcc -shared -fPIC -O2 -I"$INCLUDE" streamnb/features/_tokens.c -o /tmp/new.so
    python -m bench.tokens_ab OLD.so /tmp/new.so [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bench_features import load_corpus  # noqa: E402
from streamnb.features import Featurizer  # noqa: E402
from streamnb.features.mail import SECOND_LEVEL_LABELS  # noqa: E402


def load_build(path: str) -> ModuleType:
    """The compiled extension at ``path``, as a module of its own."""
    spec = importlib.util.spec_from_file_location("streamnb.features._tokens", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    builds = {"old": load_build(args.old), "new": load_build(args.new)}
    featurizer = Featurizer()
    tokenizer, options = featurizer.tokenizer, featurizer.options
    messages = load_corpus("spamassassin")
    mails = [featurizer.read(raw) for raw in messages]
    ascii_texts = [m.text for m in mails if m.text.isascii()]
    other_texts = [tokenizer._prepare(m.text) for m in mails if not m.text.isascii()]
    n = len(mails)

    def steps(build: ModuleType) -> dict[str, tuple[Callable, list]]:
        words = build.WordCounter(*tokenizer._bounds, options.word_joiners, options.join_digits)

        def header_words(mail) -> None:
            words.count_header_fields(
                featurizer._header_fields, mail.headers, Counter(), SECOND_LEVEL_LABELS,
                options.address_words, options.lowercase,
            )

        return {
            "body words, ASCII": (lambda t: words.count(t, Counter(), None, True), ascii_texts),
            "body words, other": (lambda t: words.count(t, Counter()), other_texts),
            "header words": (header_words, mails),
            "header layout": (
                lambda m: build.header_layout(
                    m.header_block, options.min_header_order, options.header_order,
                    options.header_shapes, Counter(),
                ),
                mails,
            ),
            "URL tokens": (
                lambda m: [
                    build.count_url_tokens(p.html or p.text, Counter(), SECOND_LEVEL_LABELS)
                    if hasattr(build, "count_url_tokens") else build.url_hosts(p.html or p.text)
                    for p in m.parts
                ],
                mails,
            ),
        }

    calls = {name: steps(build) for name, build in builds.items()}
    best: dict[str, dict[str, float]] = {name: {} for name in builds}
    for round_ in range(args.rounds):
        for name in ("old", "new") if round_ % 2 else ("new", "old"):
            for step, (fn, items) in calls[name].items():
                start = time.process_time()
                for item in items:
                    fn(item)
                spent = (time.process_time() - start) / n * 1e6
                best[name][step] = min(best[name].get(step, spent), spent)
    print(f"spamassassin: {n} messages, best of {args.rounds} rounds, CPU us per message")
    for step in calls["old"]:
        old, new = best["old"][step], best["new"][step]
        print(f"  {step:<20} old {old:7.2f}  new {new:7.2f}  new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
