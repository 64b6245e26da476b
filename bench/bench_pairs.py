"""``python -m bench.bench_pairs``: how much weight OSB word pairs should get beside the words.

Two exact Naive Bayes models, both with the default scoring options, replay a stream under
immediate feedback side by side: one on the default tokens (words, headers, URLs, MIME), one on
the OSB pairs alone (``osb_window``). A message's score is ``words + λ · pairs``, the sum of the
two models' log-odds, for each λ given; λ = 0 is the default filter. Within one model, length
normalisation would otherwise let the pairs (four to fifteen times as many tokens as words)
weigh the word evidence down; the two models keep them apart, so λ alone sets their weight.

    python -m bench.bench_pairs --streams sms,spamassassin,chinese --window 5 --lambdas 0,0.1,0.5

Prints (1-ROCA)% and spam recall at 0.1% FPR per λ, the two vocabularies and the time spent.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from bench.peers.streams import DEFAULT_DATA, STREAMS, load
from streamnb.evaluation import scoring
from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.models import make_model

SPAM = "spam"


def _log_odds(model, x) -> float:
    if len(model.classes) < 2:
        return 0.0  # nothing to say yet
    p = model.predict_log_proba_one(x)
    odds = p.get(SPAM, -math.inf) - p.get("ham", -math.inf)
    return float(np.clip(odds, -1e9, 1e9))


def replay_pairs(stream: str, window: int, limit: int | None = None) -> dict:
    """Per-message log-odds of the words model and of the pairs model, and the costs."""
    messages = load(STREAMS[stream], DEFAULT_DATA, limit)
    featurizer = Featurizer(FeaturizerOptions(osb_window=window))
    default = Featurizer(FeaturizerOptions())
    words_model = make_model("multinomial", preset="mail")  # the default filter
    pairs_model = make_model("multinomial", preset="mail")
    words, pairs, spam = [], [], []
    featurize_s = model_s = 0.0
    for message in messages:
        started = time.perf_counter()
        if message.raw is not None:
            tokens, x_words = featurizer.from_raw(message.raw).tokens, default.from_raw(
                message.raw).tokens
        else:
            tokens, x_words = featurizer.from_text(message.text).tokens, default.from_text(
                message.text).tokens
        # The pairs: what osb_window adds to the default tokens (a few default tokens, such as
        # a charset name, have a space too, so the split is by difference, not by the space).
        x_pairs = dict(tokens - x_words)
        featurize_s += time.perf_counter() - started
        started = time.perf_counter()
        words.append(_log_odds(words_model, x_words))
        pairs.append(_log_odds(pairs_model, x_pairs) if x_pairs else 0.0)  # no pair: no say
        words_model.learn_one(x_words, message.label)
        if x_pairs:
            pairs_model.learn_one(x_pairs, message.label)
        model_s += time.perf_counter() - started
        spam.append(message.label == SPAM)
    return {
        "words": np.array(words), "pairs": np.array(pairs), "spam": np.array(spam),
        "vocabulary_words": words_model.vocabulary_size,
        "vocabulary_pairs": pairs_model.vocabulary_size,
        "featurize_s": featurize_s, "model_s": model_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_pairs",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="sms,spamassassin,chinese")
    parser.add_argument("--window", type=int, default=5, help="osb_window (default 5)")
    parser.add_argument("--lambdas", default="0,0.1,0.25,0.5,1", help="weights of the pairs")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    lambdas = [float(v) for v in args.lambdas.split(",")]
    for stream in args.streams.split(","):
        run = replay_pairs(stream, args.window, args.limit)
        print(
            f"{stream}, osb_window {args.window}: vocabulary {run['vocabulary_words']:,} words "
            f"+ {run['vocabulary_pairs']:,} pairs; featurize {run['featurize_s']:.1f} s, "
            f"models {run['model_s']:.1f} s"
        )
        for lam in lambdas:
            score = run["words"] + lam * run["pairs"]
            report = scoring.binary_report(run["spam"], score, score > 0)
            print(
                f"  λ {lam:<5g} (1-ROCA)% {report['one_minus_auc_pct']:.4f}  "
                f"recall @ 0.1% FPR {report['spam_recall_at_fpr_0.1pct']:.4f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
