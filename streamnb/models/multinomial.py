"""Multinomial Naive Bayes: the multinomial event model, with three treatments of repeated words.

θ_k|c = (N_kc + α) / (N_c + α|V|), prior π_c = n_c / N, where N_kc counts token k in the
messages of class c, N_c = Σ_k N_kc, n_c counts messages and |V| is the vocabulary size.
A message scores log π_c + Σ_k x_k log θ_k|c.

``repeated_words`` chooses what x_k and N_kc count:

- ``"count"`` (the multinomial model): every occurrence, when training and when scoring;
- ``"mixed"``: every occurrence when training, once when scoring (x_k ∈ {0, 1});
- ``"binary"`` (boolean multinomial): once per message in both (N_kc counts messages).

Predict cost is O(tokens in the message × classes); it does not grow with the vocabulary.
"""

from __future__ import annotations

import math
from functools import reduce
from operator import add, mul
from typing import ClassVar

import numpy as np

from streamnb.models._text import TextModel

__all__ = ["MultinomialNB"]

REPEATED_WORDS = ("count", "mixed", "binary")


class MultinomialNB(TextModel):
    """Multinomial Naive Bayes over token counts, learned and unlearned one message at a time.

    >>> model = MultinomialNB(alpha=1.0)
    >>> model.learn_one({"cheap": 2, "pills": 1}, "spam")
    >>> model.learn_one({"meeting": 1, "notes": 1}, "ham")
    >>> model.predict_one({"cheap": 1})
    'spam'
    >>> model.predict_proba_one({"cheap": 1})["spam"]   # (3/7) / (3/7 + 1/6), |V| = 4
    0.72
    >>> model.unlearn_one({"meeting": 1, "notes": 1}, "ham")
    >>> model.classes
    ['spam']
    """

    kind: ClassVar[str] = "multinomial"
    _OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "repeated_words", "top_k", "n_buckets")
    _COUNTING_OPTIONS: ClassVar[tuple[str, ...]] = ("n_buckets", "counts_occurrences")

    def __init__(self, alpha: float = 1.0, *, repeated_words: str = "count",
                 top_k: int | None = None, n_buckets: int | None = None):
        if repeated_words not in REPEATED_WORDS:
            raise ValueError(
                f"option 'repeated_words' must be one of {REPEATED_WORDS}, got {repeated_words!r}"
            )
        self.repeated_words = repeated_words
        super().__init__(alpha, top_k=top_k, n_buckets=n_buckets)

    @property
    def counts_occurrences(self) -> bool:
        """Whether training counts every occurrence (``count``, ``mixed``) or presence only."""
        return self.repeated_words != "binary"

    def _training_values(self, values: np.ndarray) -> np.ndarray:
        return values if self.counts_occurrences else np.ones_like(values)

    def _scoring_values(self, values: np.ndarray) -> np.ndarray:
        return values if self.repeated_words == "count" else np.ones_like(values)

    def _log_denominators(self, columns: np.ndarray) -> np.ndarray:
        return np.log(self._totals[columns] + self.alpha * self._vocab)

    def _token_scores(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        if not rows.size:
            return np.zeros((0, columns.size))
        counts = self._gather(rows, columns)
        return np.log(counts + self.alpha) - self._log_denominators(columns)

    def _base_scores(self, columns: np.ndarray) -> np.ndarray:
        return self._log_prior(columns)

    def _joint_scores(self, rows: np.ndarray, values: np.ndarray, columns: np.ndarray
                      ) -> np.ndarray:
        # Σ_k x_k log θ_kc = Σ_k x_k log(N_kc + α) − (Σ_k x_k) log(N_c + α|V|): the
        # denominator is applied once per class instead of once per token.
        if not rows.size:
            return self._log_prior(columns).copy()
        scores = self._log_prior(columns) - values.sum() * self._log_denominators(columns)
        counts = self._gather(rows, columns)
        counts += self.alpha  # a fresh array: fancy indexing copies
        np.log(counts, out=counts)
        scores += np.einsum("i,ij->j", values, counts)
        return scores

    def _trains_on_counts(self) -> bool:
        return self.counts_occurrences

    def _short_scores(self, rows: list, values: list, columns: np.ndarray
                      ) -> dict[str, float] | None:
        # The operations of _joint_scores in the same order: the same elementwise log, then
        # each class's sum left to right from 0.0 (as einsum sums these shapes).
        active = columns.tolist()
        log_prior = self._short_log_prior(active)
        if log_prior is None:
            return None
        labels = self._labels
        if not rows:
            return {labels[c]: lp for c, lp in zip(active, log_prior, strict=True)}
        if self.repeated_words != "count":
            values = [1] * len(rows)
        n_tokens = float(sum(values))
        alpha = self.alpha
        smoothing = alpha * self._vocab
        totals = self._totals.tolist()
        log_counts = np.log(self._counts.take(rows, axis=0) + alpha).T.tolist()
        scores = {}
        for c, lp in zip(active, log_prior, strict=True):
            terms = reduce(add, map(mul, values, log_counts[c]), 0.0)
            scores[labels[c]] = (lp - n_tokens * math.log(totals[c] + smoothing)) + terms
        return scores

    def _log_theta(self, label: str) -> tuple[list, np.ndarray]:
        column = self._column[label]
        rows = self._vocabulary_rows()
        log_theta = np.log(self._counts[rows, column] + self.alpha) - math.log(
            self._totals[column] + self.alpha * self._vocab)
        return [self._keys[r] for r in rows.tolist()], log_theta

    def feature_log_prob(self, label: str) -> dict:
        """token -> log θ_token|label over the vocabulary."""
        if label not in self._column:
            raise ValueError(f"unknown class {label!r}; known classes: {self.classes}")
        keys, log_theta = self._log_theta(label)
        return dict(zip(keys, log_theta.tolist(), strict=True))
