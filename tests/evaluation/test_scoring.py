"""The figures against scikit-learn on fixed arrays, and lam% against hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as sk

from streamnb.evaluation import scoring

# Fixed arrays with ties inside and across classes.
Y = np.array([0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1])
S = np.array([0.1, 0.4, 0.35, 0.8, 0.4, 0.4, -2.0, 0.05, 3.0, 0.9, 0.35, 0.2])


def test_auc_matches_sklearn_on_fixed_arrays_with_ties():
    assert scoring.roc_auc(Y, S) == pytest.approx(sk.roc_auc_score(Y, S), abs=1e-15)


def test_roc_curve_matches_sklearn_vertices():
    fpr, tpr, thresholds = scoring.roc_curve(Y, S)
    sk_fpr, sk_tpr, sk_thresholds = sk.roc_curve(Y, S, drop_intermediate=False)
    np.testing.assert_allclose(fpr, sk_fpr)
    np.testing.assert_allclose(tpr, sk_tpr)
    np.testing.assert_allclose(thresholds[1:], sk_thresholds[1:])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(-3, 3)), min_size=2, max_size=60).filter(
        lambda rows: len({y for y, _ in rows}) == 2
    )
)
def test_auc_matches_sklearn_on_any_tied_scores(rows):
    y = np.array([r[0] for r in rows])
    s = np.array([float(r[1]) for r in rows])
    assert scoring.roc_auc(y, s) == pytest.approx(sk.roc_auc_score(y, s), abs=1e-12)


def test_auc_of_perfect_reversed_and_constant_scores():
    y = np.array([0, 0, 1, 1])
    assert scoring.roc_auc(y, np.array([1, 2, 3, 4])) == 1.0
    assert scoring.roc_auc(y, np.array([4, 3, 2, 1])) == 0.0
    assert scoring.roc_auc(y, np.zeros(4)) == 0.5


def test_auc_needs_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        scoring.roc_auc(np.array([1, 1]), np.array([0.2, 0.3]))


def test_confusion_matches_sklearn():
    truth = ["ham", "spam", "ham", "spam", "spam", "ham", "ham"]
    predicted = ["ham", "ham", "spam", "spam", "spam", "ham", "ham"]
    labels = ["ham", "spam"]
    expected = sk.confusion_matrix(truth, predicted, labels=labels)
    np.testing.assert_array_equal(scoring.confusion_matrix(truth, predicted, labels), expected)


def test_confusion_leaves_out_predictions_before_any_label_was_known():
    matrix = scoring.confusion_matrix(["a", "a", "b"], [None, "a", "a"], ["a", "b"])
    assert matrix.tolist() == [[1, 0], [1, 0]]


def test_lam_hand_computation():
    # hm = 2/100, sm = 8/100: logit(0.02) = ln(2/98) = -3.891820, logit(0.08) = ln(8/92) =
    # -2.442347; mean -3.167084; e^3.167084 = 23.738155; lam = 1 / 24.738155 = 0.0404234
    assert scoring.lam(0.02, 0.08) == pytest.approx(0.0404234, abs=1e-7)
    # Equal rates: lam is that rate.
    assert scoring.lam(0.1, 0.1) == pytest.approx(0.1)
    # lam is the rate whose odds are the geometric mean of the two odds.
    odds = math.sqrt((0.3 / 0.7) * (0.01 / 0.99))
    assert scoring.lam(0.3, 0.01) == pytest.approx(odds / (1 + odds))


def test_lam_zero_rate_uses_half_an_error():
    # No ham misclassified out of 99: (0 + 0.5) / (99 + 1) = 0.005. 3 of 100 spam: 0.03.
    report = scoring.binary_report(
        y_true=np.r_[np.zeros(99, bool), np.ones(100, bool)],
        scores=np.r_[np.zeros(99), np.ones(100)],
        predicted_positive=np.r_[np.zeros(99, bool), np.zeros(3, bool), np.ones(97, bool)],
    )
    odds = math.sqrt((0.005 / 0.995) * (0.03 / 0.97))
    assert report["lam_pct"] == pytest.approx(100 * odds / (1 + odds))
    assert report["hm_pct"] == 0.0
    assert report["sm_pct"] == pytest.approx(3.0)
    with pytest.raises(ValueError):
        scoring.lam(0.0, 0.1)


def test_recall_at_fpr_hand_computation():
    # 1,000 ham scored 0..999 and 10 spam: 5 above every ham, 5 just below the top 2 ham.
    ham = np.arange(1000.0)
    spam = np.r_[np.full(5, 2000.0), np.full(5, 997.5)]
    y = np.r_[np.zeros(1000, bool), np.ones(10, bool)]
    s = np.r_[ham, spam]
    # At most 0.1% of 1,000 ham = 1 ham may be above the threshold: thresholds 2000 (0 ham)
    # and 999 (1 ham) are allowed; both catch 5 spam. Catching all 10 costs 2 ham (0.2%).
    assert scoring.recall_at_fpr(y, s, 0.001) == 0.5
    assert scoring.recall_at_fpr(y, s, 0.002) == 1.0


def test_recall_at_fpr_never_splits_tied_scores():
    # One ham tied with all spam: no threshold separates them, so at 0% FPR nothing is caught.
    y = np.array([False, True, True])
    s = np.array([1.0, 1.0, 1.0])
    assert scoring.recall_at_fpr(y, s, 0.0) == 0.0


def test_log_loss_matches_sklearn():
    p_spam = np.array([0.9, 0.2, 0.6, 0.99, 0.01])
    y = np.array([1, 0, 0, 1, 1])
    truth_log_proba = np.log(np.where(y == 1, p_spam, 1 - p_spam))
    assert scoring.log_loss(truth_log_proba) == pytest.approx(sk.log_loss(y, p_spam))


def test_binary_report_keys_and_auc():
    report = scoring.binary_report(Y.astype(bool), S, S > 0.3)
    assert set(report) == {
        "hm_pct", "sm_pct", "lam_pct", "one_minus_auc_pct", "spam_recall_at_fpr_0.1pct"
    }
    assert report["one_minus_auc_pct"] == pytest.approx(100 * (1 - sk.roc_auc_score(Y, S)))
