"""The accuracy token expiry costs: prequential accuracy on each shared corpus, in file order,
with vocabulary budgets against no expiry.

    python -m bench.bench_expiry [--budgets 150000,20000,5000,2000] [--every 100] [--shuffle SEED]
                                 [--corpora spamassassin,sms-spam-collection,...]

Each corpus is featurized once with the default featurizer; the daemon's default model (the
multinomial with its default preset, "mail"), with last-seen stamps, predicts each message and
then learns it; every ``--every`` messages (a commit, as the daemon's
``checkpoint.every_messages``) it expires down to the budget with the daemon's rule (keep
max(75 %, min(100,000, budget))). Printed per corpus and budget: accuracy, the largest
vocabulary held after a commit, and the tokens expired in all. File order is the corpus' own
(SpamAssassin's index runs folder by folder: blocks of one class, which favours a model that
forgets; 20 Newsgroups' runs newsgroup by newsgroup); ``--shuffle SEED`` replays a seeded
permutation instead. The corpora are every shared text corpus (Spambase is numeric: GDA,
which has no vocabulary to bound).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

from streamnb.config import ModelSettings  # noqa: E402
from streamnb.evaluation.corpora import read_corpus  # noqa: E402
from streamnb.pipeline import build_pipeline  # noqa: E402

CORPORA = ("spamassassin", "sms-spam-collection", "chinese-spam", "20newsgroups", "webkb")


def featurized(name: str) -> list[tuple[dict, str]]:
    pipeline = build_pipeline({"kind": "multinomial"}, {})
    return [(dict(pipeline.prepare(m).x), m.label) for m in read_corpus(DATA / name).messages]


def prequential(stream, budget: int | None, every: int) -> tuple[float, int, int]:
    model = build_pipeline({"kind": "multinomial"}, {}).model  # the daemon's: the mail preset
    model.track_last_seen()
    keep = ModelSettings(max_tokens=budget or 0).expiry_keep()
    right = 0
    peak = 0
    expired = 0
    for i, (x, y) in enumerate(stream, 1):
        right += model.predict_one(x) == y
        model.learn_one(x, y)
        if i % every == 0:
            if budget:
                expired += max(len(model.expire(budget, keep)) - 1, 0)
            peak = max(peak, model.vocabulary_size)
    return right / len(stream), peak, expired


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="150000,20000,5000,2000")
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--shuffle", type=int, help="replay a permutation with this seed")
    parser.add_argument("--corpora", default=",".join(CORPORA))
    args = parser.parse_args(argv)
    budgets = [None, *(int(b) for b in args.budgets.split(","))]
    for name in args.corpora.split(","):
        started = time.perf_counter()
        stream = featurized(name)
        if args.shuffle is not None:
            random.Random(args.shuffle).shuffle(stream)
        vocabulary = len({token for x, _ in stream for token in x})
        print(f"{name}: {len(stream):,} messages, {vocabulary:,} tokens (featurized in "
              f"{time.perf_counter() - started:.0f} s)")
        base = None
        for budget in budgets:
            accuracy, peak, expired = prequential(stream, budget, args.every)
            base = accuracy if base is None else base
            print(f"  budget {budget or 'none':>7}: accuracy {accuracy:.4f} "
                  f"({accuracy - base:+.4f}), largest vocabulary after a commit {peak:,}, "
                  f"{expired:,} tokens expired")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
