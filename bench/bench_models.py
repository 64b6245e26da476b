"""Model throughput against river, measured in the same run on the same streams.

    python -m bench.bench_models [--repeats N] [--quick]

1. MultinomialNB, prequential (predict each message, then learn it) on pre-tokenized
   SpamAssassin (shuffled once with a fixed seed), against river's MultinomialNB: the
   textbook model one message at a time, and the tuned mail options (``MAIL_OPTIONS``) one
   message at a time (the per-message path) and with the batch step, ``prequential_many``
   over each 100-message turn, in C (where it is built) and in numpy.
2. BernoulliNB prediction time at a 10,000- and a 1,000,000-word vocabulary (target: within
   1.5x), warm (predict only) and cold (a learn between predictions), against river's
   BernoulliNB, whose prediction loops over the vocabulary.
3. GDA (pooled covariance) prequential on Spambase's 57 features, against river's GaussianNB.
4. State size of MultinomialNB on the whole corpus: exact vocabulary versus feature hashing.
5. The CPU cost of an explanation (``explain_log_odds``) next to a prediction.

Figures are medians over ``--repeats`` runs (streamnb and river alternate within each run).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import tarfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
from river import naive_bayes as river_nb

from streamnb.models import (
    GDA,
    TEXTBOOK_OPTIONS,
    BernoulliNB,
    MultinomialNB,
    _prequential,
    make_model,
)
from streamnb.models.presets import MAIL

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
WORD = re.compile(r"\w+")


def load_spamassassin(data: Path) -> tuple[list[dict[str, int]], list[str]]:
    folder = data / "spamassassin"
    index = [line.split() for line in (folder / "index").read_text().splitlines()]
    X, y = [], []
    with tarfile.open(folder / "messages.tar.gz") as archive:
        for label, member in index:
            text = archive.extractfile(member).read().decode("utf-8", "replace")
            X.append(dict(Counter(WORD.findall(text.lower()))))
            y.append(label)
    order = list(range(len(X)))
    random.Random(0).shuffle(order)
    return [X[i] for i in order], [y[i] for i in order]


#: The tuned options for mail: the "mail" preset, on top of the textbook options in full,
#: so every figure keeps meaning the same model whatever the constructor's defaults are.
MAIL_OPTIONS = {**TEXTBOOK_OPTIONS, **MAIL}


def one_at_a_time(model, block) -> int:
    """Predict then learn each (x, label) of ``block``; the number predicted right."""
    hits = 0
    for x, label in block:
        hits += model.predict_one(x) == label
        model.learn_one(x, label)
    return hits


def batch_step(model, block) -> int:
    """:func:`one_at_a_time` as one ``prequential_many`` call (the daemon's step for a poll)."""
    xs = [x for x, _ in block]
    labels = [label for _, label in block]
    probas = model.prequential_many(xs, labels)
    # predict_one's decision: the most probable class, ties to the first in sorted order
    return sum(bool(p) and max(sorted(p), key=p.__getitem__) == label
               for p, label in zip(probas, labels, strict=True))


def numpy_batch_step(model, block) -> int:
    """:func:`batch_step` with the numpy step (``STREAMNB_PURE_PYTHON=1``), not the C one."""
    previous = os.environ.get(_prequential.PURE_PYTHON_ENV)
    os.environ[_prequential.PURE_PYTHON_ENV] = "1"
    try:
        return batch_step(model, block)
    finally:
        if previous is None:
            del os.environ[_prequential.PURE_PYTHON_ENV]
        else:
            os.environ[_prequential.PURE_PYTHON_ENV] = previous


def interleaved_prequential(models, streams, y, chunk: int = 100, steps=None):
    """Predict-then-learn for several models over the same stream (``streams[i]`` is model i's
    view of it, ``steps[i]`` how it steps through a chunk: :func:`one_at_a_time` by default),
    taking turns every ``chunk`` messages, the first turn rotating, so a busy machine slows
    every model alike. Returns messages per second and accuracy, per model."""
    steps = steps or [one_at_a_time] * len(models)
    elapsed = [0.0] * len(models)
    correct = [0] * len(models)
    for turn, begin in enumerate(range(0, len(y), chunk)):
        labels = y[begin:begin + chunk]
        for offset in range(len(models)):
            i = (turn + offset) % len(models)
            block = list(zip(streams[i][begin:begin + chunk], labels, strict=True))
            start = time.perf_counter()
            hits = steps[i](models[i], block)
            elapsed[i] += time.perf_counter() - start
            correct[i] += hits
    return [len(y) / t for t in elapsed], [c / len(y) for c in correct]


def bench_multinomial(X, y, repeats, chunk: int = 100):
    """Five contenders taking turns: the textbook model one message at a time, the tuned mail
    options one message at a time (``predict_one`` then ``learn_one``: the per-message path)
    and with the batch step (``prequential_many`` over each chunk; the C step, and the numpy
    one), and river's MultinomialNB (the textbook model, one message at a time)."""
    names = ("textbook", "tuned mail, one at a time", "tuned mail, batch step",
             "tuned mail, numpy batch step", "river")
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for _ in range(repeats):
        rates, accuracy = interleaved_prequential(
            # river's MultinomialNB is the textbook model: pin it here whatever our defaults are
            [MultinomialNB(**TEXTBOOK_OPTIONS), MultinomialNB(**MAIL_OPTIONS),
             MultinomialNB(**MAIL_OPTIONS), MultinomialNB(**MAIL_OPTIONS),
             river_nb.MultinomialNB(alpha=1.0)], [X] * 5, y, chunk,
            [one_at_a_time, one_at_a_time, batch_step, numpy_batch_step, one_at_a_time])
        for name, rate, acc in zip(names, rates, accuracy, strict=True):
            runs[name].append((rate, acc))
    rate = {name: statistics.median(r for r, _ in runs[name]) for name in names}

    def ratios(name, peer="river"):
        return [o / r for (o, _), (r, _) in zip(runs[name], runs[peer], strict=True)]

    tokens = statistics.mean(sum(x.values()) for x in X)
    distinct = statistics.mean(len(x) for x in X)
    step = "C" if _prequential.native() else "numpy"
    print(f"\n[1] MultinomialNB prequential, SpamAssassin: {len(X)} messages, "
          f"{tokens:.0f} tokens ({distinct:.0f} distinct) per message; median of {repeats}")
    print(f"    streamnb textbook, one at a time     {rate['textbook']:9.0f} msg/s   "
          f"accuracy {runs['textbook'][0][1]:.4f}")
    print(f"    streamnb tuned mail, one at a time   {rate['tuned mail, one at a time']:9.0f} "
          f"msg/s   accuracy {runs['tuned mail, one at a time'][0][1]:.4f}")
    print(f"    streamnb tuned mail, batch step ({chunk}) {rate['tuned mail, batch step']:7.0f} "
          f"msg/s   accuracy {runs['tuned mail, batch step'][0][1]:.4f}   (the {step} step)")
    print(f"    streamnb tuned mail, numpy step ({chunk}) "
          f"{rate['tuned mail, numpy batch step']:7.0f} msg/s   accuracy "
          f"{runs['tuned mail, numpy batch step'][0][1]:.4f}   (STREAMNB_PURE_PYTHON=1)")
    print(f"    river MultinomialNB, one at a time   {rate['river']:9.0f} msg/s   "
          f"accuracy {runs['river'][0][1]:.4f}")
    for name, peer in (("textbook", "river"), ("tuned mail, one at a time", "river"),
                       ("tuned mail, batch step", "river"),
                       ("tuned mail, batch step", "tuned mail, one at a time"),
                       ("tuned mail, numpy batch step", "tuned mail, one at a time")):
        per_run = ratios(name, peer)
        print(f"    ratio {name} / {peer} {statistics.median(per_run):6.2f}x   (per run: "
              + ", ".join(f"{r:.2f}" for r in per_run) + ")")
    print("    (targets: the tuned mail batch step >= 5x river, and >= 3x the tuned mail "
          "preset one at a time)")
    return statistics.median(ratios("tuned mail, batch step"))


def filler_messages(n_words: int, per_message: int, start: int = 0):
    """Messages of never-repeated filler words: inflate the vocabulary by ``n_words``."""
    words = [f"filler{i}" for i in range(start, start + n_words)]
    return [{w: 1 for w in words[i:i + per_message]} for i in range(0, n_words, per_message)]


def vocabulary_model(cls, X_train, y_train, size: int):
    """A model trained on the real messages, its vocabulary cut or padded to ``size`` words."""
    frequency = Counter(token for x in X_train for token in x)
    real = len(frequency)
    if size <= real:
        keep = {token for token, _ in frequency.most_common(size)}
        X_used = [{t: c for t, c in x.items() if t in keep} for x in X_train]
        extra = []
    else:
        X_used = X_train
        extra = filler_messages(size - real, 5000)
    model = cls()
    for x, label in zip(X_used, y_train, strict=True):
        model.learn_one(x, label)
    for i, message in enumerate(extra):
        model.learn_one(message, y_train[i % len(y_train)])
    return model


def time_predictions(models, X, *, cold: bool) -> list[float]:
    """Median seconds per prediction of each model, the models taking turns on each message;
    ``cold`` learns a message before each prediction (the class's cached sum is stale)."""
    times: list[list[float]] = [[] for _ in models]
    for x in X:
        for i, model in enumerate(models):
            if cold:
                model.learn_one({"cold-cache": 1}, "ham")
            start = time.perf_counter()
            model.predict_proba_one(x)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def bench_bernoulli(X, y, repeats, quick):
    """Same probes for every vocabulary size: held-out messages cut to the 10,000 most frequent
    training words, which both vocabularies contain, so every model does the same lookups and
    sums and only |V| differs."""
    X_train, y_train = X[:4000], y[:4000]
    small, large = 10_000, 1_000_000
    common = {t for t, _ in Counter(t for x in X_train for t in x).most_common(small)}
    probes = [{t: c for t, c in x.items() if t in common} for x in X[4000:4500]]
    models = [vocabulary_model(BernoulliNB, X_train, y_train, size) for size in (small, large)]
    for model, size in zip(models, (small, large), strict=True):
        assert abs(model.vocabulary_size - size) <= 1, model.vocabulary_size
    warm = [time_predictions(models, probes, cold=False) for _ in range(repeats)]
    cold = [time_predictions(models, probes[:200], cold=True) for _ in range(repeats)]
    river_train = 600 if quick else 1500
    river_models = [vocabulary_model(river_nb.BernoulliNB, X_train[:river_train],
                                     y_train[:river_train], size) for size in (small, large)]
    river_small = time_predictions(river_models[:1], probes[:50], cold=False)[0]
    river_large = time_predictions(river_models[1:], probes[:3 if quick else 5], cold=False)[0]
    tokens = statistics.mean(len(x) for x in probes)
    print(f"\n[2] BernoulliNB prediction time vs vocabulary size: {len(probes)} held-out "
          f"SpamAssassin messages ({tokens:.0f} distinct words each); median of {repeats}")
    print("    vocabulary   streamnb warm   streamnb cold   state        river")
    for j, (size, model) in enumerate(zip((small, large), models, strict=True)):
        w = statistics.median(run[j] for run in warm)
        c = statistics.median(run[j] for run in cold)
        r = (river_small, river_large)[j]
        print(f"    {size:>10,}   {w * 1e6:10.1f} us   {c * 1e6:10.1f} us   "
              f"{model.state_nbytes() / 2**20:6.1f} MiB   {r * 1e3:9.1f} ms")
    ratio_warm = statistics.median(run[1] / run[0] for run in warm)
    ratio_cold = statistics.median(run[1] / run[0] for run in cold)
    print(f"    1M / 10k time: streamnb warm {ratio_warm:.2f}x, cold {ratio_cold:.2f}x "
          f"(target <= 1.5x); river {river_large / river_small:.0f}x")
    return ratio_warm, ratio_cold


class RiverVector:
    """Spambase rows as river's dict inputs, converted outside the timed loop."""

    def __init__(self, X):
        self.rows = [dict(enumerate(row.tolist())) for row in X]


def bench_gda(data: Path, repeats):
    table = np.loadtxt(data / "spambase" / "spambase.data", delimiter=",")
    order = np.random.default_rng(0).permutation(len(table))
    X, y = table[order, :-1], table[order, -1].astype(int).astype(str).tolist()
    X_list = [row.tolist() for row in X]
    X_river = RiverVector(X).rows
    results: dict[str, list] = {"pooled": [], "per_class": [], "diagonal": [], "river": []}
    for _ in range(repeats):
        names = ("pooled", "per_class", "diagonal", "river")
        models = [GDA(covariance=c) for c in names[:3]] + [river_nb.GaussianNB()]
        rates, accuracy = interleaved_prequential(models, [X_list] * 3 + [X_river], y)
        for name, r, a in zip(names, rates, accuracy, strict=True):
            results[name].append((r, a))
    rate = {k: statistics.median(r for r, _ in v) for k, v in results.items()}
    print(f"\n[3] GDA prequential, Spambase: {len(X)} vectors x {X.shape[1]} features")
    for name, label in (("pooled", "GDA pooled (LDA)"), ("per_class", "GDA per_class (QDA)"),
                        ("diagonal", "GDA diagonal"), ("river", "river GaussianNB")):
        print(f"    {label:22s} {rate[name]:8.0f} msg/s   accuracy {results[name][0][1]:.4f}")
    print(f"    ratio pooled / river GaussianNB: {rate['pooled'] / rate['river']:.2f}x")
    return rate["pooled"] / rate["river"]


def bench_state_size(X, y):
    print(f"\n[4] MultinomialNB state after all {len(X)} SpamAssassin messages")
    for n_buckets in (None, 2**18, 2**14):
        model = MultinomialNB(n_buckets=n_buckets)
        model.learn_many(X, y)
        label = "exact vocabulary" if n_buckets is None else f"hashing, {n_buckets} buckets"
        print(f"    {label:26s} |V| = {model.vocabulary_size:>7,}   "
              f"state_nbytes = {model.state_nbytes() / 2**20:6.2f} MiB")


def bench_explain(X, y, repeats):
    """What an explanation (output.explain, streamnb explain) costs next to a prediction."""
    model = make_model("multinomial", preset="mail")
    model.learn_many(X[:4000], y[:4000])
    held_out = X[4000:5000]
    times: dict[str, list[float]] = {"predict_proba_one": [], "explain_log_odds(x, 10)": []}
    for _ in range(repeats):
        for name, call in (("predict_proba_one", model.predict_proba_one),
                           ("explain_log_odds(x, 10)", partial(model.explain_log_odds, k=10))):
            start = time.process_time()
            for x in held_out:
                call(x)
            times[name].append((time.process_time() - start) / len(held_out) * 1e6)
    print(f"\n[5] explanation cost, mail preset, {len(held_out)} held-out SpamAssassin messages "
          f"after 4000 learned; CPU per message, median of {repeats}")
    for name, values in times.items():
        print(f"    {name:24s} {statistics.median(values):8.1f} us")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a 2,000-message stream, 1 run")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    X, y = load_spamassassin(args.data)
    stream = (X[:2000], y[:2000]) if args.quick else (X, y)
    bench_multinomial(*stream, repeats)
    bench_bernoulli(X, y, repeats, args.quick)
    bench_gda(args.data, repeats)
    bench_state_size(X, y)
    bench_explain(X, y, repeats)


if __name__ == "__main__":
    main()
