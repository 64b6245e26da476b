"""Prequential accuracy read from the registry equals scikit-learn's on the same arrays."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as sk

from streamnb.metrics import Metrics, _logit_bin

SCOPES = ("lifetime", "recent")


def feed(m: Metrics, y_true, y_pred, probas) -> None:
    for t, p, proba in zip(y_true, y_pred, probas, strict=True):
        m.observe_labelled(t, p, proba)


def value(m: Metrics, name: str, **labels) -> float:
    v = m.sample(name, **labels)
    assert v is not None, f"{name}{labels} missing from the registry"
    return v


def binary_stream(n: int, seed: int):
    rng = random.Random(seed)
    y_true, y_pred, probas = [], [], []
    for _ in range(n):
        t = rng.choice(["spam", "ham"])
        p = min(max(rng.gauss(0.65 if t == "spam" else 0.35, 0.25), 0.0), 1.0)
        pred = "spam" if p > 0.5 else "ham"
        if rng.random() < 0.05:  # predictions need not be the argmax of the scores
            pred = "ham" if pred == "spam" else "spam"
        y_true.append(t)
        y_pred.append(pred)
        probas.append({"spam": p, "ham": 1.0 - p})
    return y_true, y_pred, probas


def auc_bin_tolerance(y_true, scores, positive) -> float:
    """Worst-case error of a binned AUC: half the share of (pos, neg) pairs sharing a bin."""
    pos = [_logit_bin(s) for t, s in zip(y_true, scores, strict=True) if t == positive]
    neg = [_logit_bin(s) for t, s in zip(y_true, scores, strict=True) if t != positive]
    neg_per_bin: dict[int, int] = {}
    for b in neg:
        neg_per_bin[b] = neg_per_bin.get(b, 0) + 1
    same = sum(neg_per_bin.get(b, 0) for b in pos)
    return 0.5 * same / (len(pos) * len(neg)) + 1e-12


def check_binary(m: Metrics, scope: str, y_true, y_pred, probas, exact_auc: bool) -> None:
    classes = ["ham", "spam"]
    scores = [p["spam"] for p in probas]
    assert value(m, "streamnb_prequential_messages", window=scope) == len(y_true)
    assert value(m, "streamnb_prequential_accuracy", window=scope) == pytest.approx(
        sk.accuracy_score(y_true, y_pred), abs=1e-12
    )
    precision, recall, f1, _ = sk.precision_recall_fscore_support(
        y_true, y_pred, labels=classes, zero_division=0
    )
    for i, c in enumerate(classes):
        assert value(m, "streamnb_prequential_precision", window=scope, **{"class": c}) == (
            pytest.approx(precision[i], abs=1e-12)
        )
        assert value(m, "streamnb_prequential_recall", window=scope, **{"class": c}) == (
            pytest.approx(recall[i], abs=1e-12)
        )
        assert value(m, "streamnb_prequential_f1", window=scope, **{"class": c}) == (
            pytest.approx(f1[i], abs=1e-12)
        )
    assert value(m, "streamnb_prequential_mcc", window=scope) == pytest.approx(
        sk.matthews_corrcoef(y_true, y_pred), abs=1e-12
    )
    expected_auc = sk.roc_auc_score([t == "spam" for t in y_true], scores)
    tolerance = 1e-12 if exact_auc else auc_bin_tolerance(y_true, scores, "spam")
    assert abs(value(m, "streamnb_prequential_roc_auc", window=scope) - expected_auc) <= tolerance
    # probabilities are clamped to [1e-15, 1 - 1e-15] (river's convention; sklearn uses 2.2e-16)
    clamped = np.clip([[p["ham"], p["spam"]] for p in probas], 1e-15, 1 - 1e-15)
    assert value(m, "streamnb_prequential_log_loss", window=scope) == pytest.approx(
        sk.log_loss(y_true, clamped, labels=classes), rel=1e-9
    )
    matrix = sk.confusion_matrix(y_true, y_pred, labels=classes)
    confusion = (
        "streamnb_prequential_confusion_total"
        if scope == "lifetime"
        else "streamnb_prequential_window_confusion"
    )
    for (i, a), (j, p) in itertools.product(enumerate(classes), repeat=2):
        assert value(m, confusion, actual=a, predicted=p) == matrix[i, j]


def test_binary_stream_matches_sklearn_lifetime_and_window():
    y_true, y_pred, probas = binary_stream(1500, seed=7)
    m = Metrics(window=400)
    feed(m, y_true, y_pred, probas)
    check_binary(m, "lifetime", y_true, y_pred, probas, exact_auc=False)
    check_binary(m, "recent", y_true[-400:], y_pred[-400:], probas[-400:], exact_auc=True)


def test_scraping_midway_does_not_change_the_figures():
    """Observations are folded in batches; when the folding happens must not matter."""
    y_true, y_pred, probas = binary_stream(900, seed=3)
    scraped_often = Metrics(window=250)
    for i, item in enumerate(zip(y_true, y_pred, probas, strict=True)):
        scraped_often.observe_labelled(*item)
        if i % 37 == 0:
            list(scraped_often.registry.collect())
    check_binary(scraped_often, "lifetime", y_true, y_pred, probas, exact_auc=False)
    check_binary(scraped_often, "recent", y_true[-250:], y_pred[-250:], probas[-250:], True)


@pytest.mark.filterwarnings("ignore:A single label was found")
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.booleans(),
            st.floats(0.0, 1.0, allow_nan=False) | st.sampled_from([0.0, 0.5, 1.0, 1e-300]),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 25),
)
def test_any_binary_stream_matches_sklearn(rows, window):
    y_true = ["spam" if t else "ham" for t, _, _ in rows]
    y_pred = ["spam" if p else "ham" for _, p, _ in rows]
    probas = [{"spam": s, "ham": 1.0 - s} for _, _, s in rows]
    m = Metrics(window=window)
    feed(m, y_true, y_pred, probas)
    for scope, sl in (("lifetime", slice(None)), ("recent", slice(-window, None))):
        yt, yp, pr = y_true[sl], y_pred[sl], probas[sl]
        assert value(m, "streamnb_prequential_accuracy", window=scope) == pytest.approx(
            sk.accuracy_score(yt, yp)
        )
        assert value(m, "streamnb_prequential_mcc", window=scope) == pytest.approx(
            sk.matthews_corrcoef(yt, yp), abs=1e-12
        )
        auc = value(m, "streamnb_prequential_roc_auc", window=scope)
        if len(set(yt)) < 2:
            assert math.isnan(auc)  # undefined with one class; sklearn raises
        else:
            expected = sk.roc_auc_score([t == "spam" for t in yt], [p["spam"] for p in pr])
            tolerance = 1e-9 if scope == "recent" else auc_bin_tolerance(
                yt, [p["spam"] for p in pr], "spam"
            )
            assert abs(auc - expected) <= tolerance


def multiclass_stream(n: int, seed: int, classes=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    y_true, y_pred, probas = [], [], []
    for _ in range(n):
        t = int(rng.integers(len(classes)))
        logits = rng.normal(size=len(classes))
        logits[t] += 1.0
        p = np.exp(logits) / np.exp(logits).sum()
        pred = int(np.argmax(p)) if rng.random() > 0.1 else int(rng.integers(len(classes)))
        y_true.append(classes[t])
        y_pred.append(classes[pred])
        probas.append(dict(zip(classes, map(float, p), strict=True)))
    return y_true, y_pred, probas


def test_three_classes_match_sklearn():
    classes = ["a", "b", "c"]
    y_true, y_pred, probas = multiclass_stream(1200, seed=11)
    m = Metrics(window=300)
    feed(m, y_true, y_pred, probas)
    for scope, sl in (("lifetime", slice(None)), ("recent", slice(-300, None))):
        yt, yp, pr = y_true[sl], y_pred[sl], probas[sl]
        matrix = np.array([[p[c] for c in classes] for p in pr])
        assert value(m, "streamnb_prequential_accuracy", window=scope) == pytest.approx(
            sk.accuracy_score(yt, yp)
        )
        assert value(m, "streamnb_prequential_mcc", window=scope) == pytest.approx(
            sk.matthews_corrcoef(yt, yp), abs=1e-12
        )
        precision, recall, f1, _ = sk.precision_recall_fscore_support(
            yt, yp, labels=classes, zero_division=0
        )
        for i, c in enumerate(classes):
            labels = {"window": scope, "class": c}
            assert value(m, "streamnb_prequential_precision", **labels) == pytest.approx(
                precision[i]
            )
            assert value(m, "streamnb_prequential_recall", **labels) == pytest.approx(recall[i])
            assert value(m, "streamnb_prequential_f1", **labels) == pytest.approx(f1[i])
        assert value(m, "streamnb_prequential_log_loss", window=scope) == pytest.approx(
            sk.log_loss(yt, matrix, labels=classes), rel=1e-9
        )
        expected_auc = sk.roc_auc_score(yt, matrix, multi_class="ovr", average="macro",
                                        labels=classes)
        tolerance = 1e-9 if scope == "recent" else max(
            auc_bin_tolerance([t == c for t in yt], matrix[:, i], True)
            for i, c in enumerate(classes)
        )
        assert abs(value(m, "streamnb_prequential_roc_auc", window=scope) - expected_auc) <= (
            tolerance
        )
    counts = sk.confusion_matrix(y_true, y_pred, labels=classes)
    for (i, a), (j, p) in itertools.product(enumerate(classes), repeat=2):
        assert value(m, "streamnb_prequential_confusion_total", actual=a, predicted=p) == (
            counts[i, j]
        )


def test_class_appearing_late_counts_earlier_messages_as_scored_zero():
    """A class the model had not seen gave no probability: its AUC sees those messages as 0."""
    y_true, y_pred, probas = multiclass_stream(300, seed=5, classes=("a", "b"))
    later_true, later_pred, later_probas = multiclass_stream(300, seed=6, classes=("a", "b", "c"))
    m = Metrics(window=10_000)
    feed(m, y_true + later_true, y_pred + later_pred, probas + later_probas)
    classes = ["a", "b", "c"]
    matrix = np.array([[p.get(c, 0.0) for c in classes] for p in probas + later_probas])
    expected = np.mean([
        sk.roc_auc_score([t == c for t in y_true + later_true], matrix[:, i])
        for i, c in enumerate(classes)
    ])
    assert value(m, "streamnb_prequential_roc_auc", window="recent") == pytest.approx(expected)
    assert value(m, "streamnb_prequential_roc_auc", window="lifetime") == pytest.approx(
        expected, abs=2e-3
    )


def test_recent_window_forgets_old_messages():
    m = Metrics(window=20)
    for _ in range(50):
        m.observe_labelled("spam", "ham", {"spam": 0.2, "ham": 0.8})
    for _ in range(20):
        m.observe_labelled("spam", "spam", {"spam": 0.9, "ham": 0.1})
        m.observe_labelled("ham", "ham", {"spam": 0.1, "ham": 0.9})
    assert value(m, "streamnb_prequential_accuracy", window="recent") == 1.0
    assert value(m, "streamnb_prequential_accuracy", window="lifetime") == pytest.approx(40 / 90)
    assert value(m, "streamnb_prequential_messages", window="recent") == 20
    assert value(m, "streamnb_prequential_roc_auc", window="recent") == 1.0
    assert value(m, "streamnb_prequential_window_confusion", actual="spam", predicted="ham") == 0
    assert value(m, "streamnb_prequential_confusion_total", actual="spam", predicted="ham") == 50
    assert value(m, "streamnb_prequential_recall", window="recent", **{"class": "spam"}) == 1.0
    assert value(m, "streamnb_prequential_log_loss", window="recent") == pytest.approx(
        -math.log(0.9)
    )


def test_messages_without_a_prediction_are_counted_apart():
    m = Metrics()
    m.observe_labelled("spam", None, {})
    m.observe_labelled("spam", "spam", {"spam": 0.7, "ham": 0.3})
    assert value(m, "streamnb_prequential_unscored_total") == 1
    assert value(m, "streamnb_prequential_observed_total") == 1
    assert value(m, "streamnb_prequential_accuracy", window="lifetime") == 1.0


def test_no_figures_before_any_labelled_message():
    m = Metrics()
    assert m.sample("streamnb_prequential_accuracy", window="lifetime") is None
    assert value(m, "streamnb_prequential_messages", window="lifetime") == 0


def test_invalid_probabilities_do_not_poison_the_figures():
    m = Metrics()
    m.observe_labelled("spam", "spam", {"spam": float("nan"), "ham": 1.5})
    m.observe_labelled("ham", "spam", {"spam": 0.6, "ham": 0.4})
    for scope in SCOPES:
        assert math.isfinite(value(m, "streamnb_prequential_log_loss", window=scope))
        assert math.isfinite(value(m, "streamnb_prequential_roc_auc", window=scope))


def all_prequential_samples(m: Metrics) -> dict:
    out = {}
    for family in m.registry.collect():
        if family.name.startswith("streamnb_prequential"):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def assert_same_samples(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if math.isnan(a[key]):
            assert math.isnan(b[key]), key
        else:
            assert b[key] == pytest.approx(a[key], rel=1e-9, abs=1e-12), key


def test_state_round_trips_through_json_and_keeps_counting_the_same():
    y_true, y_pred, probas = multiclass_stream(700, seed=2)
    original = Metrics(window=150)
    feed(original, y_true[:500], y_pred[:500], probas[:500])
    original.observe_labelled("a", None, {})
    state = json.loads(json.dumps(original.to_state()))  # JSON-compatible, no pickle

    restored = Metrics(window=150)
    restored.load_state(state)
    assert_same_samples(all_prequential_samples(original), all_prequential_samples(restored))

    for m in (original, restored):
        feed(m, y_true[500:], y_pred[500:], probas[500:])
    assert_same_samples(all_prequential_samples(original), all_prequential_samples(restored))
    assert value(restored, "streamnb_prequential_observed_total") == 700


def test_state_loaded_into_a_smaller_window_keeps_the_newest_messages():
    y_true, y_pred, probas = binary_stream(300, seed=9)
    m = Metrics(window=200)
    feed(m, y_true, y_pred, probas)
    smaller = Metrics(window=50)
    smaller.load_state(m.to_state())
    check_binary(smaller, "recent", y_true[-50:], y_pred[-50:], probas[-50:], exact_auc=True)
    check_binary(smaller, "lifetime", y_true, y_pred, probas, exact_auc=False)


@pytest.mark.parametrize(
    "state",
    [{}, {"version": 99}, {"version": 1}, {"version": 1, "classes": 5}, "not a dict", None],
)
def test_bad_state_is_a_value_error_and_changes_nothing(state):
    m = Metrics()
    m.observe_labelled("spam", "ham", {"spam": 0.4, "ham": 0.6})
    before = all_prequential_samples(m)
    with pytest.raises(ValueError):
        m.load_state(state)
    assert_same_samples(before, all_prequential_samples(m))
