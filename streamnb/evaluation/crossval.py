"""``streamnb crossval PATH --folds K``: k-fold cross-validated accuracy, for each k in a list.

The corpus is split into k disjoint folds that together cover every message; each fold in turn
is the test set of a model trained on the other k − 1 (``learn_one`` in corpus order), and the
k test accuracies give a mean ± standard deviation (sample SD, ddof = 1). Folds are seeded and,
by default, **stratified**: each class's messages are shuffled and dealt round-robin, so every
fold has the class mix of the whole corpus (sizes differ by at most one); ``--plain`` deals a
shuffle of all messages instead.

Messages are featurized once by the configured pipeline and the same inputs are used for every
k. ``--vocabulary N`` keeps only the N words with the highest document frequency in each
*training* split (the test fold never chooses the vocabulary), as the WebKB experiment's
2,500-word vocabulary did.

    streamnb crossval ../shared/data/webkb --folds 2-10 --model bernoulli \\
        --variant "model.kind=multinomial" --plot webkb-kfold.png

>>> folds = kfold_indices(["a", "a", "a", "b", "b", "b"], k=3, seed=0)
>>> sorted(int(i) for fold in folds for i in fold)
[0, 1, 2, 3, 4, 5]
>>> [sorted(labels[i] for i in fold) for labels in [["a"] * 3 + ["b"] * 3] for fold in folds]
[['a', 'b'], ['a', 'b'], ['a', 'b']]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streamnb.evaluation import options as options_module
from streamnb.evaluation.corpora import FORMATS, CorpusError, read_corpus
from streamnb.evaluation.options import OptionsError, Tables
from streamnb.evaluation.replay import decision_of
from streamnb.pipeline import PipelineError

__all__ = [
    "add_arguments",
    "cross_validate",
    "kfold_indices",
    "main",
    "parse_folds",
    "top_vocabulary",
]


def parse_folds(text: str) -> list[int]:
    """``"2-10"``, ``"2,5,10"`` or ``"2,3,...,10"`` → a sorted list of k ≥ 2.

    >>> parse_folds("2-4,10"), parse_folds("2,3,...,5"), parse_folds("5")
    ([2, 3, 4, 10], [2, 3, 4, 5], [5])
    """
    values: set[int] = set()
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        for i, part in enumerate(parts):
            if part in ("...", "…"):
                if i == 0 or i == len(parts) - 1:
                    raise ValueError
                values.update(range(int(parts[i - 1]), int(parts[i + 1]) + 1))
            elif "-" in part:
                low, high = part.split("-", 1)
                values.update(range(int(low), int(high) + 1))
            else:
                values.add(int(part))
    except ValueError:
        raise ValueError(f"--folds {text!r}: expected e.g. 10, 2-10 or 2,5,10") from None
    if not values or min(values) < 2:
        raise ValueError(f"--folds {text!r}: every k must be at least 2")
    return sorted(values)


def kfold_indices(
    labels: Sequence[str], k: int, *, seed: int, stratified: bool = True
) -> list[np.ndarray]:
    """k disjoint folds of ``range(len(labels))`` that together cover it, each sorted.

    Stratified: each class's indices are shuffled and the classes' lists, one after the other,
    are dealt round-robin to the folds, so class counts per fold differ by at most one and fold
    sizes too. Plain: a shuffle of all indices is dealt round-robin.
    """
    n = len(labels)
    if k < 2 or k > n:
        raise ValueError(f"k must be between 2 and the number of messages ({n}), got {k}")
    rng = np.random.default_rng(seed)
    if stratified:
        by_class: dict[str, list[int]] = {}
        for index, label in enumerate(labels):
            by_class.setdefault(label, []).append(index)
        order = np.concatenate(
            [rng.permutation(np.array(by_class[c])) for c in sorted(by_class)]
        )
    else:
        order = rng.permutation(n)
    return [np.sort(order[fold::k]) for fold in range(k)]


def top_vocabulary(inputs: Sequence[dict], size: int) -> set:
    """The ``size`` tokens present in the most inputs (ties broken by the token's text)."""
    document_frequency: Counter = Counter()
    for x in inputs:
        document_frequency.update(x.keys())
    ranked = sorted(document_frequency.items(), key=lambda item: (-item[1], str(item[0])))
    return {token for token, _ in ranked[:size]}


def _restrict(x: dict, vocabulary: set) -> dict:
    return {token: count for token, count in x.items() if token in vocabulary}


def _predict(model, x):
    return decision_of(model)(model.predict_log_proba_one(x))


def fold_accuracies(
    untrained_model,
    inputs: Sequence,
    labels: Sequence[str],
    folds: Sequence[np.ndarray],
    *,
    vocabulary: int | None = None,
) -> list[float]:
    """Test accuracy of each fold, for a model trained on all the other folds.

    Models that merge (``+=``, streamnb's all do) learn each fold once; the model for test fold
    i is then the sum of the other folds' models, which equals learning them one after the
    other. Others, and runs with ``vocabulary`` (chosen per training split), learn each
    training split from scratch.
    """
    if vocabulary is None and hasattr(untrained_model, "merge"):
        return _fold_accuracies_by_merging(untrained_model, inputs, labels, folds)
    n = len(labels)
    accuracies = []
    for test in folds:
        is_test = np.zeros(n, dtype=bool)
        is_test[test] = True
        train = np.flatnonzero(~is_test)
        model = copy.deepcopy(untrained_model)
        train_inputs = [inputs[i] for i in train]
        test_inputs = [inputs[i] for i in test]
        if vocabulary is not None:
            kept = top_vocabulary(train_inputs, vocabulary)
            train_inputs = [_restrict(x, kept) for x in train_inputs]
            test_inputs = [_restrict(x, kept) for x in test_inputs]
        for x, i in zip(train_inputs, train, strict=True):
            model.learn_one(x, labels[i])
        correct = sum(
            _predict(model, x) == labels[i] for x, i in zip(test_inputs, test, strict=True)
        )
        accuracies.append(correct / len(test))
    return accuracies


def _fold_accuracies_by_merging(untrained_model, inputs, labels, folds) -> list[float]:
    per_fold = []
    for fold in folds:
        model = copy.deepcopy(untrained_model)
        for i in fold:
            model.learn_one(inputs[i], labels[i])
        per_fold.append(model)
    accuracies = []
    for held_out, test in enumerate(folds):
        model = copy.deepcopy(untrained_model)
        for other, fold_model in enumerate(per_fold):
            if other != held_out:
                model += fold_model
        correct = sum(_predict(model, inputs[i]) == labels[i] for i in test)
        accuracies.append(correct / len(test))
    return accuracies


def cross_validate(
    corpus_messages,
    variants: Sequence[tuple[str, Tables]],
    ks: Sequence[int],
    *,
    seed: int = 0,
    stratified: bool = True,
    repeats: int = 1,
    vocabulary: int | None = None,
    progress: bool = False,
) -> tuple[list[dict], dict]:
    """Rows of ``{name, k, accuracy_mean, accuracy_sd, fold_accuracies, ...}`` per variant and k.

    Also returns ``{"skipped": {...}}`` for messages the featurizer rejected (left out).
    """
    rows = []
    featurized: dict[str, tuple[list, list[str], Counter]] = {}
    total_steps = len(variants) * len(ks) * repeats
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=total_steps, desc="crossval", unit="k", file=sys.stderr)
        except ImportError:
            bar = None
    skipped: Counter = Counter()
    for name, tables in variants:
        pipeline = tables.build_pipeline()
        if vocabulary is not None and pipeline.numeric:
            raise OptionsError("--vocabulary only applies to text models")
        key = json.dumps(tables.features, sort_keys=True, default=str) + str(pipeline.numeric)
        if key not in featurized:
            inputs, labels, rejected = [], [], Counter()
            for message in corpus_messages:
                if message.label is None:
                    rejected["unlabelled"] += 1
                    continue
                try:
                    inputs.append(pipeline.prepare(message).x)
                except (PipelineError, ValueError) as error:
                    rejected[getattr(error, "reason", type(error).__name__)] += 1
                    continue
                labels.append(message.label)
            featurized[key] = (inputs, labels, rejected)
        inputs, labels, rejected = featurized[key]
        skipped.update(rejected)
        for k in ks:
            started = time.perf_counter()
            accuracies: list[float] = []
            for repeat in range(repeats):
                folds = kfold_indices(labels, k, seed=seed + repeat, stratified=stratified)
                accuracies += fold_accuracies(
                    pipeline.model, inputs, labels, folds, vocabulary=vocabulary
                )
                if bar is not None:
                    bar.update(1)
            values = np.array(accuracies)
            rows.append(
                {
                    "name": name,
                    "k": k,
                    "accuracy_mean": float(values.mean()),
                    "accuracy_sd": float(values.std(ddof=1)) if values.size > 1 else 0.0,
                    "fold_accuracies": [float(v) for v in values],
                    "n": len(labels),
                    "seconds": time.perf_counter() - started,
                }
            )
    if bar is not None:
        bar.close()
    return rows, {"skipped": dict(skipped)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split(">>>", 1)[0].split("\n\n", 3)[3]
    parser.add_argument("path", metavar="PATH", help="a corpus (see streamnb evaluate --help)")
    parser.add_argument("--format", choices=FORMATS, help="corpus layout (default: detected)")
    parser.add_argument(
        "--folds",
        default="10",
        metavar="K",
        help="k, or a list: 10, 2-10, 2,5,10 or 2,3,...,10 (default: 10)",
    )
    parser.add_argument("--seed", type=int, default=0, help="fold assignment seed (default: 0)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="R",
        help="repeat with seeds SEED..SEED+R-1 and pool the fold accuracies (default: 1)",
    )
    parser.add_argument(
        "--plain", action="store_true", help="plain shuffled folds instead of stratified ones"
    )
    parser.add_argument(
        "--vocabulary",
        type=int,
        metavar="N",
        help="keep only the N words in most training documents (chosen per training split)",
    )
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N messages")
    options_module.add_arguments(parser)
    options_module.add_variant_argument(parser, "model.kind=multinomial")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", metavar="OUT.png", help="plot mean accuracy against k")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _variants(args: argparse.Namespace, base: Tables) -> list[tuple[str, Tables]]:
    variants = [(base.model.get("kind", "base"), base)]
    for spec in args.variant:
        assignments, name = [], None
        for item in shlex.split(spec.replace(",", " ")):
            if item.startswith("name="):
                name = item[len("name="):]
            else:
                assignments.append(item)
        tables = base.with_overrides(assignments)
        variants.append((name or " ".join(assignments) or "variant", tables))
    return variants


def main(args: argparse.Namespace) -> int:
    try:
        ks = parse_folds(args.folds)
        if args.repeats < 1:
            raise ValueError("--repeats must be at least 1")
        base = options_module.tables_from_args(args)
        variants = _variants(args, base)
        corpus = read_corpus(args.path, args.format, limit=args.limit)
        progress = not args.quiet and sys.stderr.isatty()
        rows, extra = cross_validate(
            corpus.messages,
            variants,
            ks,
            seed=args.seed,
            stratified=not args.plain,
            repeats=args.repeats,
            vocabulary=args.vocabulary,
            progress=progress,
        )
    except (CorpusError, OptionsError, ValueError) as error:
        print(f"streamnb crossval: {error}", file=sys.stderr)
        return 2

    folds_kind = "plain" if args.plain else "stratified"
    vocabulary = f", vocabulary {args.vocabulary:,}" if args.vocabulary else ""
    title = (
        f"{corpus.path.name}: {rows[0]['n']:,} messages, {folds_kind} folds, "
        f"seed {args.seed}, {args.repeats} repeat(s){vocabulary}"
    )
    if args.plot:
        from streamnb.evaluation.plots import plot_crossval

        plot_crossval(args.plot, rows, title)
    if args.json:
        document = {
            "corpus": str(corpus.path),
            "folds": folds_kind,
            "seed": args.seed,
            "repeats": args.repeats,
            "vocabulary": args.vocabulary,
            "variants": {name: {"model": t.model, "features": t.features} for name, t in variants},
            "rows": rows,
            **extra,
        }
        print(json.dumps(document))
        return 0
    print(title)
    for name, tables in variants:
        print(f"  {name}: {tables.describe()}")
    width = max(len(row["name"]) for row in rows)
    print(f"{'model'.ljust(width)}   k  accuracy (mean ± sd)  folds")
    for row in rows:
        print(
            f"{row['name'].ljust(width)}  {row['k']:2d}  "
            f"{row['accuracy_mean']:.4f} ± {row['accuracy_sd']:.4f}"
            f"      {len(row['fold_accuracies'])}"
        )
    if extra["skipped"]:
        print(f"skipped: {extra['skipped']}")
    if args.plot:
        print(f"plot: {Path(args.plot)}")
    if any(math.isnan(row["accuracy_mean"]) for row in rows):
        return 1
    return 0
