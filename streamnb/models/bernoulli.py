"""Bernoulli Naive Bayes: the multi-variate Bernoulli event model, absent words included.

φ_j|c = (D_jc + α) / (D_c + 2α), where D_jc counts the messages of class c containing word j
and D_c the messages of class c. A message x (the set of its words) scores

    log π_c + Σ_{j ∈ x} log φ_j|c + Σ_{j ∈ V \\ x} log(1 − φ_j|c)
  = log π_c + Σ_{j ∈ x} log(φ_j|c / (1 − φ_j|c)) + Σ_{j ∈ V} log(1 − φ_j|c).

The last sum runs over the whole vocabulary, and every term changes whenever D_c does, so it
cannot be kept as a running float. With m_ck = the number of vocabulary words with D_jc = k:

    Σ_{j ∈ V} log(1 − φ_j|c) = Σ_k m_ck log(D_c − k + α) − |V| log(D_c + 2α).

The model keeps the histogram m_c· (exact integers, updated in O(words of the message) per
learned message; m_c0 = |V| − Σ_{k≠0} m_ck is implicit) and caches the sum per class until the
class changes. Predict cost: O(words in the message × classes), plus, for a class updated since
the last prediction, O(distinct values of D_jc) ≤ O(D_c) — never O(|V|).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import reduce
from itertools import repeat
from operator import add, mul
from typing import ClassVar

import numpy as np

from streamnb.models._base import StateError
from streamnb.models._text import TextModel

__all__ = ["BernoulliNB"]


class BernoulliNB(TextModel):
    """Multi-variate Bernoulli Naive Bayes; a token counts once per message whatever its count.

    >>> model = BernoulliNB(alpha=1.0)
    >>> model.learn_one({"cheap": 3, "pills": 1}, "spam")
    >>> model.learn_one({"meeting": 1, "notes": 1}, "ham")
    >>> model.predict_one({"pills": 1})
    'spam'
    >>> model.vocabulary_size
    4
    """

    kind: ClassVar[str] = "bernoulli"

    def __init__(self, alpha: float = 1.0, *, top_k: int | None = None,
                 temperature: float = 1.0, n_buckets: int | None = None,
                 half_life: int | None = None,
                 class_offsets: Mapping[str, float] | None = None):
        super().__init__(alpha, top_k=top_k, temperature=temperature, n_buckets=n_buckets,
                         half_life=half_life, class_offsets=class_offsets)
        self._hist: list[np.ndarray] = []  # per class: m_k for k >= 1 at index k
        self._hist_negative: list[dict[int, int]] = []  # m_k for k < 0 (slices only)
        self._hist_nonzero = np.zeros(0, dtype=np.int64)  # per class: Σ_{k≠0} m_k
        self._absent_sum = np.zeros(0)  # per class: Σ_{k≠0} m_k log(D_c − k + α), NaN = stale

    def _training_values(self, values: np.ndarray) -> np.ndarray:
        return np.ones_like(values)

    _scoring_values = _training_values

    def _add_class_column(self) -> None:
        self._hist.append(np.zeros(16, dtype=np.int64))
        self._hist_negative.append({})
        self._hist_nonzero = np.append(self._hist_nonzero, 0)
        self._absent_sum = np.append(self._absent_sum, math.nan)

    def _invalidate(self, column: int | None) -> None:
        if column is None:
            self._absent_sum[:] = math.nan
        else:
            self._absent_sum[column] = math.nan

    def _after_update(self, column: int, old: np.ndarray, new: np.ndarray) -> None:
        if self.half_life is not None:
            return  # decayed counts are not integers: no histogram (see _absent_sums)
        hist = self._hist[column]
        top = int(new.max())
        if top >= hist.shape[0]:
            hist = np.concatenate([hist, np.zeros(max(top + 1, 2 * hist.shape[0]) - hist.shape[0],
                                                  dtype=np.int64)])
            self._hist[column] = hist
        old_k = old.astype(np.int64)
        new_k = new.astype(np.int64)
        np.subtract.at(hist, old_k[old_k > 0], 1)
        np.add.at(hist, new_k[new_k > 0], 1)
        if (old_k < 0).any() or (new_k < 0).any():
            negative = self._hist_negative[column]
            for k in old_k[old_k < 0].tolist():
                negative[k] -= 1
                if not negative[k]:
                    del negative[k]
            for k in new_k[new_k < 0].tolist():
                negative[k] = negative.get(k, 0) + 1
        self._hist_nonzero[column] += int(np.count_nonzero(new_k)) - int(np.count_nonzero(old_k))

    def _rebuild(self) -> None:
        used = len(self._keys)
        if self.half_life is not None:
            self._invalidate(None)
            return
        for column in range(len(self._labels)):
            counts = self._counts[:used, column].astype(np.int64)
            positive = counts[counts > 0]
            self._hist[column] = np.bincount(positive, minlength=16).astype(np.int64)
            values, freq = np.unique(counts[counts < 0], return_counts=True)
            self._hist_negative[column] = dict(zip(values.tolist(), freq.tolist(), strict=True))
            self._hist_nonzero[column] = int(np.count_nonzero(counts))
        self._invalidate(None)

    def _check_loaded(self) -> None:
        used = len(self._keys)
        if self.half_life is None and not np.array_equal(self._counts[:used],
                                                         np.rint(self._counts[:used])):
            raise StateError("corrupt state: Bernoulli document counts must be integers")

    def _absent_sums(self, columns: np.ndarray) -> np.ndarray:
        """Σ_{j∈V} log(D_c − D_jc + α) per class, from the histogram (cached per class)."""
        stale = columns[np.isnan(self._absent_sum[columns])]
        if self.half_life is not None:
            # Decayed counts: the sum over the vocabulary itself, O(|V|) once per class
            # and clock (every step changes the scale, so every term).
            rows = self._vocabulary_rows()
            for column in stale.tolist():
                d_c = self._n_docs[column]
                self._absent_sum[column] = math.fsum(
                    np.log(d_c - self._counts[rows, column] + self._alpha).tolist())
            return self._absent_sum[columns]
        for column in stale.tolist():
            d_c = self._n_docs[column]
            hist = self._hist[column]
            ks = np.flatnonzero(hist)
            # fsum: exact, so the same histogram always gives the same bits
            total = math.fsum((hist[ks] * np.log(d_c - ks + self.alpha)).tolist())
            for k, m in self._hist_negative[column].items():
                total += m * math.log(d_c - k + self.alpha)
            self._absent_sum[column] = total
        d_c = self._n_docs[columns]
        zero_k = self._vocab - self._hist_nonzero[columns]
        return self._absent_sum[columns] + zero_k * np.log(d_c + self.alpha)

    def absent_log_prob(self, label: str) -> float:
        """Σ_{j ∈ V} log(1 − φ_j|label): the score of the empty message, minus the prior."""
        column = np.array([self._column[label]])
        d_c = self._n_docs[column]
        return float(self._absent_sums(column)[0]
                     - self._vocab * np.log(d_c + 2 * self._alpha)[0])

    def _token_scores(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        if not rows.size:
            return np.zeros((0, columns.size))
        counts = self._gather(rows, columns)
        return np.log(counts + self._alpha) - np.log(self._n_docs[columns] - counts
                                                     + self._alpha)

    def _base_scores(self, columns: np.ndarray) -> np.ndarray:
        d_c = self._n_docs[columns]
        absent = self._absent_sums(columns) - self._vocab * np.log(d_c + 2 * self._alpha)
        return self._log_prior(columns) + absent

    def _trains_on_counts(self) -> bool:
        return False

    def _short_scores(self, rows: list, values: list, columns: list, top_k: int | None
                      ) -> dict[str, float] | None:
        # The operations of _token_scores and _joint_scores in the same order: the same
        # elementwise logs, then each class's sum left to right from 0.0 (as einsum does).
        if top_k is not None and len(rows) > top_k:
            return None
        active = columns
        columns = np.array(active, dtype=np.intp)
        base = self._base_scores(columns).tolist()
        labels = self._labels
        if not rows:
            return {labels[c]: b + 0.0 for c, b in zip(active, base, strict=True)}
        row_counts = self._row_counts
        counts = np.array([[row_counts[row][c] for c in active] for row in rows],
                          dtype=np.float64)
        present = counts + self.alpha
        absent = self._n_docs[columns] - counts + self.alpha
        if not ((present > 0).all() and (absent > 0).all()):
            return None  # an inconsistent state: the array path says what is wrong with it
        terms = (np.log(present) - np.log(absent)).T.tolist()
        return {labels[c]: b + reduce(add, map(mul, repeat(1.0), t), 0.0)
                for c, b, t in zip(active, base, terms, strict=True)}

    def _log_theta(self, label: str) -> tuple[list, np.ndarray]:
        column = self._column[label]
        rows = self._vocabulary_rows()
        log_phi = np.log(self._counts[rows, column] + self._alpha) - math.log(
            self._n_docs[column] + 2 * self._alpha)
        return [self._keys[r] for r in rows.tolist()], log_phi

    def feature_log_prob(self, label: str) -> dict:
        """token -> log φ_token|label over the vocabulary."""
        if label not in self._column:
            raise ValueError(f"unknown class {label!r}; known classes: {self.classes}")
        keys, log_phi = self._log_theta(label)
        return dict(zip(keys, log_phi.tolist(), strict=True))

    def _extra_nbytes(self) -> int:
        return sum(h.nbytes for h in self._hist)
