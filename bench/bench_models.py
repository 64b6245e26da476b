"""Model throughput against river, measured in the same run on the same streams.

    python -m bench.bench_models [--repeats N] [--quick]

1. MultinomialNB, prequential (predict each message, then learn it) on pre-tokenized
   SpamAssassin (shuffled once with a fixed seed), against river's MultinomialNB.
2. BernoulliNB prediction time at a 10,000- and a 1,000,000-word vocabulary (target: within
   1.5x), warm (predict only) and cold (a learn between predictions), against river's
   BernoulliNB, whose prediction loops over the vocabulary.
3. GDA (pooled covariance) prequential on Spambase's 57 features, against river's GaussianNB.
4. State size of MultinomialNB on the whole corpus: exact vocabulary versus feature hashing.

Figures are medians over ``--repeats`` runs (streamnb and river alternate within each run).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from river import naive_bayes as river_nb

from streamnb.models import GDA, BernoulliNB, MultinomialNB

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


def prequential(model, X, y) -> tuple[float, float]:
    """Messages per second and accuracy of predict-then-learn over the stream."""
    correct = 0
    start = time.perf_counter()
    for x, label in zip(X, y, strict=True):
        correct += model.predict_one(x) == label
        model.learn_one(x, label)
    elapsed = time.perf_counter() - start
    return len(X) / elapsed, correct / len(X)


def bench_multinomial(X, y, repeats):
    ours, river = [], []
    for _ in range(repeats):
        ours.append(prequential(MultinomialNB(alpha=1.0), X, y))
        river.append(prequential(river_nb.MultinomialNB(alpha=1.0), X, y))
    ours_rate = statistics.median(r for r, _ in ours)
    river_rate = statistics.median(r for r, _ in river)
    tokens = statistics.mean(sum(x.values()) for x in X)
    distinct = statistics.mean(len(x) for x in X)
    print(f"\n[1] MultinomialNB prequential, SpamAssassin: {len(X)} messages, "
          f"{tokens:.0f} tokens ({distinct:.0f} distinct) per message")
    print(f"    streamnb  {ours_rate:9.0f} msg/s   accuracy {ours[0][1]:.4f}")
    print(f"    river     {river_rate:9.0f} msg/s   accuracy {river[0][1]:.4f}")
    print(f"    ratio     {ours_rate / river_rate:9.2f}x   (target >= 5x)")
    return ours_rate / river_rate


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


def time_predictions(model, X, *, cold: bool) -> float:
    """Median seconds per prediction; ``cold`` learns a message before each prediction."""
    times = []
    for x in X:
        if cold:
            model.learn_one({"cold-cache": 1}, "ham")
        start = time.perf_counter()
        model.predict_proba_one(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_bernoulli(X, y, repeats, quick):
    X_train, y_train, X_test = X[:4000], y[:4000], X[4000:4500]
    sizes = [10_000, 1_000_000]
    rows = {}
    for size in sizes:
        model = vocabulary_model(BernoulliNB, X_train, y_train, size)
        assert abs(model.vocabulary_size - size) <= 1, model.vocabulary_size
        warm = statistics.median(time_predictions(model, X_test, cold=False)
                                 for _ in range(repeats))
        cold = statistics.median(time_predictions(model, X_test[:200], cold=True)
                                 for _ in range(repeats))
        rows[size] = (warm, cold, model.state_nbytes())
    river_rows = {}
    river_train = 600 if quick else 1500
    for size, n_probe in ((10_000, 50), (1_000_000, 3 if quick else 5)):
        model = vocabulary_model(river_nb.BernoulliNB, X_train[:river_train],
                                 y_train[:river_train], size)
        river_rows[size] = time_predictions(model, X_test[:n_probe], cold=False)
    print(f"\n[2] BernoulliNB prediction time vs vocabulary size "
          f"({len(X_test)} held-out SpamAssassin messages)")
    print("    vocabulary   streamnb warm   streamnb cold   state        river")
    for size in sizes:
        warm, cold, nbytes = rows[size]
        print(f"    {size:>10,}   {warm * 1e6:10.1f} us   {cold * 1e6:10.1f} us   "
              f"{nbytes / 2**20:6.1f} MiB   {river_rows[size] * 1e3:9.1f} ms")
    ratio_warm = rows[sizes[1]][0] / rows[sizes[0]][0]
    ratio_cold = rows[sizes[1]][1] / rows[sizes[0]][1]
    print(f"    1M / 10k time: streamnb warm {ratio_warm:.2f}x, cold {ratio_cold:.2f}x "
          f"(target <= 1.5x); river {river_rows[sizes[1]] / river_rows[sizes[0]]:.0f}x")
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
    results = {"pooled": [], "per_class": [], "diagonal": [], "river": []}
    for _ in range(repeats):
        for covariance in ("pooled", "per_class", "diagonal"):
            results[covariance].append(prequential(GDA(covariance=covariance), X_list, y))
        results["river"].append(prequential(river_nb.GaussianNB(), X_river, y))
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


if __name__ == "__main__":
    main()
