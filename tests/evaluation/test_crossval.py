"""k-fold splits are disjoint and cover the corpus; the accuracy loop is right."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.evaluation.crossval import fold_accuracies, kfold_indices, parse_folds, top_vocabulary

from .fakes import CountingNB


@settings(max_examples=150, deadline=None)
@given(
    labels=st.lists(st.sampled_from("abc"), min_size=2, max_size=80),
    data=st.data(),
    seed=st.integers(0, 10_000),
    stratified=st.booleans(),
)
def test_folds_are_disjoint_and_cover(labels, data, seed, stratified):
    k = data.draw(st.integers(2, len(labels)))
    folds = kfold_indices(labels, k, seed=seed, stratified=stratified)
    assert len(folds) == k
    everything = np.concatenate(folds)
    assert sorted(everything.tolist()) == list(range(len(labels)))  # covering, no repeats
    sizes = [len(f) for f in folds]
    assert max(sizes) - min(sizes) <= 1
    if stratified:
        for c in set(labels):
            per_fold = [sum(labels[i] == c for i in fold) for fold in folds]
            assert max(per_fold) - min(per_fold) <= 1


def test_folds_are_seeded():
    labels = ["a"] * 10 + ["b"] * 10
    first = kfold_indices(labels, 4, seed=3)
    assert all((x == y).all() for x, y in zip(first, kfold_indices(labels, 4, seed=3), strict=True))
    assert any((x != y).any() for x, y in zip(first, kfold_indices(labels, 4, seed=4), strict=True))


def test_k_out_of_range():
    with pytest.raises(ValueError):
        kfold_indices(["a", "b"], 3, seed=0)


def test_parse_folds():
    assert parse_folds("2,3,...,10") == list(range(2, 11))
    assert parse_folds("2-4, 8") == [2, 3, 4, 8]
    for bad in ("1", "x", "...,3", ""):
        with pytest.raises(ValueError):
            parse_folds(bad)


def test_fold_accuracy_trains_on_the_other_folds_only():
    # Two classes that share no words: any fold is classified perfectly from the others...
    inputs = [{"spam": 1}, {"ham": 1}] * 6
    labels = ["s", "h"] * 6
    folds = kfold_indices(labels, 3, seed=0)
    assert fold_accuracies(CountingNB(), inputs, labels, folds) == [1.0, 1.0, 1.0]
    # ...but a word seen only in the test fold teaches nothing: the test message is never
    # learned before it is predicted, so the priors (equal here) and Laplace terms decide.
    unique_inputs = [{f"w{i}": 1} for i in range(12)]
    accuracies = fold_accuracies(CountingNB(), unique_inputs, labels, folds)
    assert all(a <= 0.75 for a in accuracies)


def test_vocabulary_is_chosen_from_training_documents():
    inputs = [{"a": 1, "b": 1}, {"a": 2}, {"c": 5}]
    assert top_vocabulary(inputs, 1) == {"a"}
    assert top_vocabulary(inputs, 2) == {"a", "b"}  # b and c tie at 1 document; b sorts first
    counts = Counter()
    for x in inputs:
        counts.update(x)
    assert top_vocabulary(inputs, 10) == set(counts)


def test_merging_fold_models_equals_learning_each_training_split():
    # streamnb's models merge; the fast path must give the sequential path's accuracies.
    from streamnb.models import make_model

    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(30)]
    inputs = [
        {w: int(rng.integers(1, 3)) for w in rng.choice(words, size=5, replace=False)}
        for _ in range(90)
    ]
    labels = [["a", "b", "c"][i % 3] for i in range(90)]
    folds = kfold_indices(labels, 5, seed=2)
    for kind in ("multinomial", "bernoulli"):
        merged = fold_accuracies(make_model(kind), inputs, labels, folds)
        sequential = fold_accuracies(
            make_model(kind), inputs, labels, folds, vocabulary=len(words)
        )  # vocabulary covering every word forces the learn-from-scratch path
        assert merged == sequential
