"""``python -m bench.bench_training``: thick-threshold training for streamnb, measured.

Immediate feedback as everywhere (score each message, then see its gold label), but the model
learns a message only when it misclassified it or its log-odds were within ``T`` of 0 (crm114's
thick-threshold training, here on streamnb's natural-log odds); ``--thresholds inf`` is the
default filter, which learns every message. The model and tokens are the defaults
(``make_model("multinomial", preset="mail")``, ``FeaturizerOptions()``); the statistics stay
exact NB counts, of the messages learnt.

    python -m bench.bench_training --streams spamassassin,sms,chinese --thresholds inf,5,10

Prints (1-ROCA)%, spam recall at 0.1% FPR, how many messages were learnt, the vocabulary and
the seconds the model took (scoring + learning).
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


def replay_thick(tokens: list, spam: np.ndarray, threshold: float) -> dict:
    model = make_model("multinomial", preset="mail")  # the default of config.toml and the daemon
    scores, learnt = [], 0
    started = time.perf_counter()
    for x, is_spam in zip(tokens, spam, strict=True):
        label = SPAM if is_spam else "ham"
        if len(model.classes) < 2:
            score = 0.0  # no odds before both classes are known; such a message is learnt
            must_learn = True
        else:
            p = model.predict_log_proba_one(x)
            score = float(np.clip(p[SPAM] - p["ham"], -1e9, 1e9))
            must_learn = (score > 0) != is_spam or abs(score) < threshold
        scores.append(score)
        if must_learn:
            model.learn_one(x, label)
            learnt += 1
    seconds = time.perf_counter() - started
    scores = np.array(scores)
    report = scoring.binary_report(spam, scores, scores > 0)
    return {**report, "learnt": learnt, "vocabulary": model.vocabulary_size, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_training",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="spamassassin,sms,chinese")
    parser.add_argument("--thresholds", default="inf,5,10",
                        help="|log-odds| below which a correctly scored message is learnt too")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    thresholds = [math.inf if t == "inf" else float(t) for t in args.thresholds.split(",")]
    featurizer = Featurizer(FeaturizerOptions())
    for stream in args.streams.split(","):
        messages = load(STREAMS[stream], DEFAULT_DATA, args.limit)
        tokens = [
            featurizer.from_raw(m.raw).tokens if m.raw is not None
            else featurizer.from_text(m.text).tokens
            for m in messages
        ]
        spam = np.array([m.label == SPAM for m in messages])
        for threshold in thresholds:
            run = replay_thick(tokens, spam, threshold)
            policy = "every message" if math.isinf(threshold) else f"thick T={threshold:g}"
            print(
                f"{stream:13} {policy:14} (1-ROCA)% {run['one_minus_auc_pct']:.4f}  "
                f"recall @ 0.1% FPR {run['spam_recall_at_fpr_0.1pct']:.4f}  "
                f"learnt {run['learnt']:,}/{len(messages):,}  vocabulary {run['vocabulary']:,}  "
                f"model {run['seconds']:.1f} s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
