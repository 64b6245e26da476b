"""TREC-style figures of a classifier's replay, in pure numpy.

Everything here takes arrays and returns numbers, so the evaluator, the cross-validation and the
peer benchmarks measure every filter the same way.

Ranking figures (ROC area, spam recall at a false-positive budget) use a real-valued *score*
per message, higher meaning "more likely the positive class"; streamnb uses the log-odds
log P(spam) − log P(not spam) computed from the model's log-probabilities, which still orders
messages whose probabilities would round to exactly 0 or 1.

>>> y = np.array([0, 0, 1, 1])
>>> scores = np.array([0.1, 0.4, 0.35, 0.8])
>>> round(roc_auc(y, scores), 4)
0.75
>>> recall_at_fpr(y, scores, max_fpr=0.0)
0.5
>>> round(lam(ham_misclassification=0.02, spam_misclassification=0.08), 6)
0.040423
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "binary_report",
    "confusion_matrix",
    "lam",
    "log_loss",
    "logit",
    "recall_at_fpr",
    "roc_auc",
    "roc_curve",
    "smoothed_rate",
]


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _inverse_logit(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def smoothed_rate(errors: int, total: int) -> float:
    """``errors / total``, moved off 0 and 1 so its logit is finite (TREC-style smoothing).

    A rate of exactly 0 or 1 becomes ``(errors + 0.5) / (total + 1)`` (half an error or half a
    success added, out of one more message); any other rate is returned unchanged.

    >>> smoothed_rate(0, 99), smoothed_rate(3, 100), smoothed_rate(4, 4)
    (0.005, 0.03, 0.9)
    """
    if total <= 0:
        raise ValueError("a misclassification rate needs at least one message of the class")
    if errors in (0, total):
        return (errors + 0.5) / (total + 1)
    return errors / total


def lam(ham_misclassification: float, spam_misclassification: float) -> float:
    """TREC's logistic average misclassification (as a fraction; ×100 for lam%).

    lam = logit⁻¹((logit(hm) + logit(sm)) / 2): the misclassification rate whose odds are the
    geometric mean of the two classes' odds of misclassification. Pass rates in (0, 1)
    (see :func:`smoothed_rate`).
    """
    for name, rate in (("ham", ham_misclassification), ("spam", spam_misclassification)):
        if not 0.0 < rate < 1.0:
            raise ValueError(f"{name} misclassification rate must be in (0, 1), got {rate}")
    return _inverse_logit((logit(ham_misclassification) + logit(spam_misclassification)) / 2)


def _binary_inputs(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true, dtype=bool)
    s = np.asarray(scores, dtype=float)
    if y.shape != s.shape or y.ndim != 1:
        raise ValueError(f"y_true and scores must be 1-d of one length, got {y.shape}, {s.shape}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    return y, s


def roc_curve(y_true, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """False- and true-positive rates at every distinct score threshold, best score first.

    Messages with equal scores move together (one vertex per distinct score), as in
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``; the first point is (0, 0)
    with threshold +inf.
    """
    y, s = _binary_inputs(y_true, scores)
    positives = int(y.sum())
    negatives = y.size - positives
    if positives == 0 or negatives == 0:
        raise ValueError("a ROC curve needs both classes among the messages")
    order = np.argsort(-s, kind="mergesort")
    s_sorted = s[order]
    y_sorted = y[order]
    # The last index of each run of equal scores is where a threshold can sit.
    last_of_run = np.flatnonzero(np.r_[s_sorted[1:] != s_sorted[:-1], True])
    true_pos = np.cumsum(y_sorted)[last_of_run]
    false_pos = (last_of_run + 1) - true_pos
    tpr = np.r_[0.0, true_pos / positives]
    fpr = np.r_[0.0, false_pos / negatives]
    thresholds = np.r_[np.inf, s_sorted[last_of_run]]
    return fpr, tpr, thresholds


def roc_auc(y_true, scores) -> float:
    """Area under the ROC curve; tied scores count one half, as sklearn's ``roc_auc_score``."""
    fpr, tpr, _ = roc_curve(y_true, scores)
    return float(np.trapezoid(tpr, fpr)) if hasattr(np, "trapezoid") else float(np.trapz(tpr, fpr))


def recall_at_fpr(y_true, scores, max_fpr: float = 0.001) -> float:
    """The largest true-positive rate of a threshold whose false-positive rate is ≤ ``max_fpr``.

    For spam: the share of spam caught when the threshold lets at most ``max_fpr`` of the ham
    be filtered. Only real thresholds count (tied scores are all above or all below).
    """
    fpr, tpr, _ = roc_curve(y_true, scores)
    return float(tpr[fpr <= max_fpr + 1e-12].max())


def log_loss(log_proba_of_truth) -> float:
    """Mean negative log-likelihood (natural log) of the true labels.

    Takes the model's log-probabilities directly, so nothing is clipped: a confident mistake
    costs what the model said it would.
    """
    values = np.asarray(log_proba_of_truth, dtype=float)
    if values.size == 0:
        return float("nan")
    return float(-values.mean())


def confusion_matrix(y_true: Sequence[str], y_pred: Sequence, labels: Sequence[str]) -> np.ndarray:
    """Counts by (true label, predicted label) in ``labels`` order, like sklearn's.

    Predictions outside ``labels`` (``None`` before the model has seen any label) fall in no
    column, so a row may sum to less than its class size.
    """
    index = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for truth, predicted in zip(y_true, y_pred, strict=True):
        column = index.get(predicted)
        if column is not None:
            matrix[index[truth], column] += 1
    return matrix


def binary_report(y_true, scores, predicted_positive, *, max_fpr: float = 0.001) -> dict:
    """The two-class spam figures for one replay.

    ``y_true`` and ``predicted_positive`` are booleans (True = spam), ``scores`` the ranking
    scores. Returns ``one_minus_auc_pct``, ``lam_pct``, ``hm_pct``, ``sm_pct`` and
    ``spam_recall_at_fpr_0.1pct`` (named for ``max_fpr`` = 0.001).
    """
    y, s = _binary_inputs(y_true, scores)
    predicted = np.asarray(predicted_positive, dtype=bool)
    ham_total = int((~y).sum())
    spam_total = int(y.sum())
    ham_errors = int((~y & predicted).sum())
    spam_errors = int((y & ~predicted).sum())
    report = {
        "hm_pct": 100.0 * ham_errors / ham_total if ham_total else float("nan"),
        "sm_pct": 100.0 * spam_errors / spam_total if spam_total else float("nan"),
    }
    if ham_total and spam_total:
        report["lam_pct"] = 100.0 * lam(
            smoothed_rate(ham_errors, ham_total), smoothed_rate(spam_errors, spam_total)
        )
        report["one_minus_auc_pct"] = 100.0 * (1.0 - roc_auc(y, s))
        key = f"spam_recall_at_fpr_{100 * max_fpr:g}pct"
        report[key] = recall_at_fpr(y, s, max_fpr)
    return report
