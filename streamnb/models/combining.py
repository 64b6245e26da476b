"""Robinson–Fisher combining: per-token spam probabilities f(w) joined by Fisher's χ² method.

Gary Robinson's scheme (as in bogofilter and SpamBayes), computed from a Naive Bayes model's
exact per-class document counts. For a class c (one against the rest) and a token w held by
b of the n_c messages of c and g of the n_¬c others:

    p(w) = (b / n_c) / (b / n_c + g / n_¬c)
    f(w) = (s·x + N·p(w)) / (s + N),   N = b + g   (a prior x of strength s)

Tokens with |f(w) − ½| ≤ min_dev are left out. With k tokens left,

    H = Q(−2 Σ ln f, 2k),  S = Q(−2 Σ ln(1 − f), 2k),  I = (1 + H − S) / 2

where Q is the χ² survival function. Both tails are computed in log space, so scores close to
0 or 1 still rank (a float I would round thousands of messages to exactly 1.0).

>>> round(math.exp(log_chi2_sf_even(2.0, 1)), 6)   # Q(2; 2 dof) = e^-1
0.367879
>>> f = np.array([0.99, 0.95, 0.2])
>>> log_i, log_not_i = log_robinson_indicator(f)
>>> round(math.exp(log_i), 4), round(math.exp(log_i) + math.exp(log_not_i), 12)
(0.8746, 1.0)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["log_chi2_cdf_even", "log_chi2_sf_even", "log_robinson_indicator", "robinson_f"]

_LOG_HALF = math.log(0.5)


def _log_factorials(n: int) -> np.ndarray:
    """log(i!) for i = 0 .. n - 1."""
    out = np.zeros(max(n, 1))
    if n > 1:
        out[1:] = np.cumsum(np.log(np.arange(1, n, dtype=float)))
    return out[:n]


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    return top + math.log(float(np.exp(values - top).sum()))


def log_chi2_sf_even(chi2: float, dof_half: int) -> float:
    """log Q(χ²; 2k): log P(X > chi2) for X ~ χ² with 2k degrees of freedom (k ≥ 1).

    For even degrees of freedom Q = e^{−m} Σ_{i<k} m^i / i! with m = χ²/2.
    """
    m = chi2 / 2.0
    if m <= 0.0:
        return 0.0
    i = np.arange(dof_half, dtype=float)
    return -m + _logsumexp(i * math.log(m) - _log_factorials(dof_half))


def log_chi2_cdf_even(chi2: float, dof_half: int) -> float:
    """log P(X ≤ chi2) for X ~ χ² with 2k degrees of freedom, accurate in both tails."""
    m = chi2 / 2.0
    if m <= 0.0:
        return -math.inf
    log_q = log_chi2_sf_even(chi2, dof_half)
    if log_q < _LOG_HALF:
        return math.log1p(-math.exp(log_q))
    # P ≤ ½, so m is not far above k: the terms of e^{−m} Σ_{i≥k} m^i / i! fall off quickly.
    n_terms = 60 + int(10 * math.sqrt(dof_half + m)) + int(m)
    i = np.arange(dof_half, dof_half + n_terms, dtype=float)
    log_fact = _log_factorials(dof_half + n_terms)[dof_half:]
    return -m + _logsumexp(i * math.log(m) - log_fact)


def robinson_f(b: np.ndarray, g: np.ndarray, n_class: float, n_rest: float, s: float,
               x: float) -> np.ndarray:
    """f(w) for tokens held by ``b`` messages of the class and ``g`` of the others."""
    rate_b = b / max(n_class, 1.0)
    rate_g = g / max(n_rest, 1.0)
    total = rate_b + rate_g
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(total > 0, rate_b / total, x)
    n = b + g
    return (s * x + n * p) / (s + n)


def log_robinson_indicator(f: np.ndarray) -> tuple[float, float]:
    """(log I, log(1 − I)) of Fisher-combined token probabilities ``f`` (all in (0, 1))."""
    k = int(f.size)
    if k == 0:
        return _LOG_HALF, _LOG_HALF
    f = np.clip(f, 1e-300, 1.0 - 1e-16)
    ham_chi2 = -2.0 * float(np.log(f).sum())  # large when the tokens look like the rest
    spam_chi2 = -2.0 * float(np.log1p(-f).sum())  # large when they look like the class
    log_h, log_not_h = log_chi2_sf_even(ham_chi2, k), log_chi2_cdf_even(ham_chi2, k)
    log_s, log_not_s = log_chi2_sf_even(spam_chi2, k), log_chi2_cdf_even(spam_chi2, k)
    # I = (H + (1 − S)) / 2 and 1 − I = (S + (1 − H)) / 2, each a sum of two logs.
    return (float(np.logaddexp(log_h, log_not_s)) + _LOG_HALF,
            float(np.logaddexp(log_s, log_not_h)) + _LOG_HALF)
