"""Multinomial Naive Bayes: the multinomial event model, with three treatments of repeated words.

θ_k|c = (N_kc + α) / (N_c + α|V|), prior π_c = n_c / N, where N_kc counts token k in the
messages of class c, N_c = Σ_k N_kc, n_c counts messages and |V| is the vocabulary size.
A message scores log π_c + Σ_k x_k log θ_k|c.

``repeated_words`` chooses what x_k and N_kc count:

- ``"count"`` (the multinomial model): every occurrence, when training and when scoring;
- ``"mixed"``: every occurrence when training, once when scoring (x_k ∈ {0, 1});
- ``"binary"`` (boolean multinomial): once per message in both (N_kc counts messages).

Scoring options (they change how the counts become a score, never what is counted, so models
that differ only in them hold the same statistics and can be merged):

- ``top_k``: score only the message's k tokens whose terms differ most between classes (seed 003);
- ``complement``: estimate θ_k|c from the messages *not* in c and score −Σ_k x_k log θ_k|¬c
  (complement NB, Rennie et al. 2003);
- ``tf = "log"``: weigh each term by log(1 + x_k) instead of x_k;
- ``idf``: weigh each term by ln((1 + N) / (1 + df_k)) + 1, where N counts the learned messages
  and df_k the messages holding k (exact under ``repeated_words = "binary"``; with occurrence
  counts, the occurrences stand in for df_k);
- ``length_norm``: divide the weights of the scored terms by their Euclidean norm;
- ``min_spread``: leave out tokens whose terms differ by less than this between classes
  (like bogofilter's ``min_dev``, so weak evidence does not dilute the normalised score);
- ``spread_weight``: weigh each scored term by its spread (max − min over the classes of
  log θ_k|c, |log θ_k|spam − log θ_k|ham| for two classes) to this power, before length
  normalisation, so a token's share of the normalised weight grows with how strongly it
  separates the classes (0: off);
- ``combining = "robinson"``: instead of the NB sum, Robinson's f(w) (prior ``robinson_x`` of
  strength ``robinson_s``, tokens with |f − ½| ≤ ``min_dev`` left out) joined by Fisher's χ²
  method (:mod:`streamnb.models.combining`), from the same per-class document counts; the
  weighting options above do not apply to it;
- ``temperature``: divide the log joint scores by T before normalising (calibration).

Predict cost is O(tokens in the message × classes); it does not grow with the vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from operator import mul
from typing import ClassVar

import numpy as np

from streamnb.models import _prequential
from streamnb.models._base import check_positive
from streamnb.models._text import TextModel, term_spreads
from streamnb.models.combining import log_robinson_indicator, robinson_f

__all__ = ["TEXTBOOK_OPTIONS", "MultinomialNB"]

REPEATED_WORDS = ("count", "mixed", "binary")
TF_TRANSFORMS = ("raw", "log")
COMBINING = ("nb", "robinson")

#: The textbook multinomial NB of seed 003 (occurrence counts, Laplace smoothing, every token
#: scored, no transform, temperature 1): what scikit-learn's MultinomialNB computes, and the
#: constructor's defaults.
TEXTBOOK_OPTIONS = {"alpha": 1.0, "repeated_words": "count", "top_k": None, "temperature": 1.0,
                    "complement": False, "tf": "raw", "idf": False, "length_norm": False,
                    "min_spread": 0.0, "spread_weight": 0.0, "combining": "nb"}


def _spread(log_counts: list, log_denominators: list) -> float:
    """max − min over the classes of a token's terms log(N_kc + α) − log(N_c + α|V|)."""
    terms = [lc - ld for lc, ld in zip(log_counts, log_denominators, strict=True)]
    return max(terms) - min(terms)


class MultinomialNB(TextModel):
    """Multinomial Naive Bayes over token counts, learned and unlearned one message at a time.

    >>> model = MultinomialNB()   # the textbook model: alpha=1, repeated_words="count"
    >>> model.learn_one({"cheap": 2, "pills": 1}, "spam")
    >>> model.learn_one({"meeting": 1, "notes": 1}, "ham")
    >>> model.predict_one({"cheap": 1})
    'spam'
    >>> model.predict_proba_one({"cheap": 1})["spam"]   # (3/7) / (3/7 + 1/6), |V| = 4
    0.72
    >>> from streamnb.models.presets import MAIL
    >>> tuned = MultinomialNB(**MAIL)   # the "mail" preset: boolean counts, α = 0.12, idf, ...
    >>> tuned.learn_many([{"cheap": 2, "pills": 1}, {"meeting": 1, "notes": 1}], ["spam", "ham"])
    >>> round(tuned.predict_proba_one({"cheap": 1})["spam"], 3)   # odds 1.12 / 0.12
    0.903
    >>> model.unlearn_one({"meeting": 1, "notes": 1}, "ham")
    >>> model.classes
    ['spam']
    """

    kind: ClassVar[str] = "multinomial"
    _OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "repeated_words", "top_k", "temperature",
                                           "complement", "tf", "idf", "length_norm",
                                           "min_spread", "spread_weight", "combining",
                                           "robinson_s",
                                           "robinson_x", "min_dev", "n_buckets", "half_life",
                                           "class_offsets")
    _COUNTING_OPTIONS: ClassVar[tuple[str, ...]] = ("n_buckets", "counts_occurrences",
                                                    "half_life")

    # The defaults are the plain model of seed 003 (TEXTBOOK_OPTIONS), what scikit-learn and
    # river compute; the tuned mail scoring is the "mail" preset (streamnb.models.presets).
    def __init__(self, alpha: float = 1.0, *, repeated_words: str = "count",
                 top_k: int | None = None, temperature: float = 1.0, complement: bool = False,
                 tf: str = "raw", idf: bool = False, length_norm: bool = False,
                 min_spread: float = 0.0, spread_weight: float = 0.0, combining: str = "nb",
                 robinson_s: float = 0.0178,
                 robinson_x: float = 0.52, min_dev: float = 0.375,
                 n_buckets: int | None = None, half_life: int | None = None,
                 class_offsets: Mapping[str, float] | None = None):
        if repeated_words not in REPEATED_WORDS:
            raise ValueError(
                f"option 'repeated_words' must be one of {REPEATED_WORDS}, got {repeated_words!r}"
            )
        if tf not in TF_TRANSFORMS:
            raise ValueError(f"option 'tf' must be one of {TF_TRANSFORMS}, got {tf!r}")
        for name, flag in (("complement", complement), ("idf", idf), ("length_norm", length_norm)):
            if not isinstance(flag, bool):
                raise ValueError(f"option {name!r} must be true or false, got {flag!r}")
        self.repeated_words = repeated_words
        self.complement = complement
        self.tf = tf
        self.idf = idf
        self.length_norm = length_norm
        self.min_spread = check_positive("min_spread", min_spread, allow_zero=True)
        self.spread_weight = check_positive("spread_weight", spread_weight, allow_zero=True)
        if combining not in COMBINING:
            raise ValueError(f"option 'combining' must be one of {COMBINING}, got {combining!r}")
        self.combining = combining
        # bogofilter's defaults for s, x and min_dev.
        self.robinson_s = check_positive("robinson_s", robinson_s)
        self.robinson_x = check_positive("robinson_x", robinson_x)
        self.min_dev = check_positive("min_dev", min_dev, allow_zero=True)
        if not 0 < self.robinson_x < 1 or self.min_dev >= 0.5:
            raise ValueError("options need 0 < robinson_x < 1 and min_dev < 0.5")
        super().__init__(alpha, top_k=top_k, temperature=temperature, n_buckets=n_buckets,
                         half_life=half_life, class_offsets=class_offsets)

    @property
    def counts_occurrences(self) -> bool:
        """Whether training counts every occurrence (``count``, ``mixed``) or presence only."""
        return self.repeated_words != "binary"

    def _training_values(self, values: np.ndarray) -> np.ndarray:
        return values if self.counts_occurrences else np.ones_like(values)

    def _scoring_values(self, values: np.ndarray) -> np.ndarray:
        return values if self.repeated_words == "count" else np.ones_like(values)

    def _log_denominators(self, columns: np.ndarray) -> np.ndarray:
        return np.log(self._totals[columns] + self._alpha * self._vocab)

    def _token_scores(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        if not rows.size:
            return np.zeros((0, columns.size))
        counts = self._gather(rows, columns)
        if self.complement:
            others = counts.sum(axis=1, keepdims=True) - counts
            totals = self._totals[columns]
            return np.log(totals.sum() - totals + self._alpha * self._vocab) - np.log(
                others + self._alpha)
        return np.log(counts + self._alpha) - self._log_denominators(columns)

    def _score_rows(self, columns, known, values, rows, top_k, want_terms):
        if self.combining != "nb":
            return self._robinson_rows(columns, known, rows)
        if self.complement:  # one denominator per token and class: the general sum
            return super()._score_rows(columns, known, values, rows, top_k, want_terms)
        # The message's counts are gathered and their logs taken once, for the selection
        # (min_spread, top-k), the idf weights and the sum alike: the same numbers as
        # _token_scores, _weigh and TextModel._joint_scores compute, to the bit.
        if not rows.size:
            terms = np.zeros((0, columns.size)) if want_terms else None
            return (columns, (known, None), self._weigh(values, rows, columns), terms,
                    self._log_prior(columns).copy())
        counts = self._gather(rows, columns)
        log_counts = np.log(counts + self._alpha)
        log_denominators = self._log_denominators(columns)
        df = None
        if self.idf:  # messages holding each token (counts are integers: any order is exact)
            df = counts[:, 0] + counts[:, 1] if columns.size == 2 else counts.sum(axis=1)
        terms = chosen = None
        if want_terms or self._may_leave_tokens_out(rows.size, top_k):
            terms = log_counts - log_denominators
            chosen = self._select_top_k(terms, top_k)
            if chosen is not None:
                values, rows, log_counts = values[chosen], rows[chosen], log_counts[chosen]
                terms = terms[chosen] if want_terms else None
                if df is not None:
                    df = df[chosen]
        spreads = term_spreads(log_counts - log_denominators) if self.spread_weight else None
        values = self._weigh(values, rows, columns, df, spreads)
        if not rows.size:  # min_spread left every token out
            return columns, (known, chosen), values, terms, self._log_prior(columns).copy()
        # Σ_k x_k log θ_kc = Σ_k x_k log(N_kc + α) − (Σ_k x_k) log(N_c + α|V|)
        scores = self._log_prior(columns) - values.sum() * log_denominators
        scores += np.einsum("i,ij->j", values, log_counts)
        return columns, (known, chosen), values, terms, scores

    def _robinson_rows(self, columns, known, rows):
        """Scores log I_c (one class against the rest); terms are log f_c(w) of kept tokens,
        each weighted 1 (``_score_rows``'s results, top_k not applied)."""
        counts = self._gather(rows, columns)
        n_docs = self._n_docs[columns]
        if self.half_life is not None:  # Robinson's strength s weighs against true counts
            counts, n_docs = counts / self._unit, n_docs / self._unit
        if (counts < 0).any() or (n_docs < 0).any():
            raise ValueError(
                "this state has negative counts (a partial slice?): only a sum of slices "
                "can be scored"
            )
        holding = counts.sum(axis=1)
        f = np.empty_like(counts)
        for j in range(columns.size):
            f[:, j] = robinson_f(counts[:, j], holding - counts[:, j], float(n_docs[j]),
                                 float(n_docs.sum() - n_docs[j]), self.robinson_s,
                                 self.robinson_x)
        if columns.size == 2:
            # Two classes: one indicator I for the class whose label sorts last ("spam" of
            # ham/spam, "1" of 0/1) and 1 - I for the other, whatever order they were learned.
            pos = int(self._labels[columns[1]] > self._labels[columns[0]])
            keep = np.abs(f[:, pos] - 0.5) > self.min_dev
            log_i, log_not_i = log_robinson_indicator(f[keep, pos])
            scores = np.array([log_not_i, log_i] if pos else [log_i, log_not_i])
            fk = f[keep, pos]
            terms = np.column_stack([np.log1p(-fk), np.log(fk)] if pos else
                                    [np.log(fk), np.log1p(-fk)])
        else:
            keep = (np.abs(f - 0.5) > self.min_dev).any(axis=1)
            scores = np.array([log_robinson_indicator(f[np.abs(f[:, j] - 0.5) > self.min_dev,
                                                        j])[0] for j in range(columns.size)])
            terms = np.log(f[keep])
        chosen = None if keep.all() else np.flatnonzero(keep)
        ones = np.ones(terms.shape[0])
        return columns, (known, chosen), ones, terms, scores

    def explanation_unavailable(self) -> str | None:
        if self.combining != "nb":
            return (f"combining = {self.combining!r} joins the tokens with a chi-square test, "
                    "not a sum: its scores have no exact per-token split")
        return None

    def _may_leave_tokens_out(self, n_tokens: int, top_k: int | None) -> bool:
        return (self.min_spread > 0 and n_tokens > 0) or super()._may_leave_tokens_out(
            n_tokens, top_k)

    def _select_top_k(self, terms: np.ndarray, top_k: int | None) -> np.ndarray | None:
        if not self.min_spread or not terms.shape[0]:
            return super()._select_top_k(terms, top_k)
        strong = np.flatnonzero(term_spreads(terms) >= self.min_spread)
        if strong.size == terms.shape[0]:
            return super()._select_top_k(terms, top_k)
        if top_k is None or strong.size <= top_k:
            return strong
        chosen = super()._select_top_k(terms[strong], top_k)
        return strong if chosen is None else strong[chosen]

    def _weigh(self, values: np.ndarray, rows: np.ndarray, columns: np.ndarray,
               df: np.ndarray | None = None, spreads: np.ndarray | None = None) -> np.ndarray:
        """``df``, ``spreads``: the document frequency and the spread of each of ``rows``
        (``term_spreads`` of their terms), when the caller has them."""
        owned = False  # whether ``values`` is an array made here (then changed in place)
        if self.tf == "log":
            values, owned = np.log1p(values), True
        if self.idf and values.size:
            if df is None:
                df = self._gather(rows, columns).sum(axis=1)
            n = self._n_docs[columns].sum()
            # max(log((1 + n) / (1 + df)) + 1, 0), computed in place
            # 1 is self._unit: with decay the counts are stored times the scale g
            idf = np.add(df, self._unit)
            np.divide(self._unit + n, idf, out=idf)
            np.log(idf, out=idf)
            idf += 1.0
            np.maximum(idf, 0.0, out=idf)
            if self.repeated_words == "count" or self.tf == "log":
                idf *= values
            # else every scoring value is 1 (a token counts once): 1 * idf is idf
            values, owned = idf, True
        if self.spread_weight and values.size:
            if spreads is None:
                spreads = term_spreads(self._token_scores(rows, columns))
            values = values * spreads ** self.spread_weight
            owned = True
        if self.length_norm and values.size:
            # einsum, not a BLAS dot, for the same bits whatever the memory alignment
            norm = math.sqrt(float(np.einsum("i,i->", values, values)))
            if norm > 0:
                if owned:
                    values /= norm
                else:
                    values = values / norm
        return values

    def _base_scores(self, columns: np.ndarray) -> np.ndarray:
        if self.combining == "robinson":  # no prior: the indicator is the whole score
            return np.zeros(columns.size)
        return self._log_prior(columns)

    def _trains_on_counts(self) -> bool:
        return self.counts_occurrences

    def _short_scores(self, rows: list, values: list, columns: list, top_k: int | None
                      ) -> dict[str, float] | None:
        # The arithmetic of _score_rows, _weigh and _joint_scores in plain Python, with no
        # numpy call at all: numpy releases the GIL inside its loops, and with the Kafka
        # client's threads waiting for it, getting it back costs more than the whole step.
        # Sums are math.fsum (correctly rounded, so independent of the tokens' order); the
        # array path sums pairwise, so the two paths agree to the last few bits, not all.
        if self.complement or self.combining != "nb":
            return None
        log_prior = self._short_log_prior(columns)
        if log_prior is None:
            return None
        labels = self._labels
        if not rows:
            return {labels[c]: lp for c, lp in zip(columns, log_prior, strict=True)}
        if self.repeated_words != "count":
            values = [1] * len(rows)
        log = math.log
        alpha = self.alpha
        smoothing = alpha * self._vocab
        total = self._totals.item
        log_denominators = [log(total(c) + smoothing) for c in columns]
        row_counts = self._row_counts
        if len(columns) == len(self._labels):  # columns are sorted: all of them, in order
            # Every class is active: the rows are read whole, and the logs of their smoothed
            # counts and of 1 + their document frequency come from the row cache.
            counts = [row_counts[row] for row in rows]  # read only: the rows themselves
            cache = self._row_cache
            log_counts = []
            log_dfs = []
            for row, cells in zip(rows, counts, strict=True):
                cached = cache.get(row)
                if cached is None:
                    cached = cache[row] = ([log(n + alpha) for n in cells], log(1.0 + sum(cells)))
                log_counts.append(cached[0])
                log_dfs.append(cached[1])
        else:
            counts = [[cells[c] for c in columns] for cells in map(row_counts.__getitem__, rows)]
            log_counts = [[log(n + alpha) for n in row] for row in counts]
            log_dfs = [log(1.0 + sum(row)) for row in counts]
        if self.min_spread:
            min_spread = self.min_spread
            if len(columns) == 2:  # max − min of two terms is |t0 − t1|
                ld0, ld1 = log_denominators
                kept = [i for i, (lc0, lc1) in enumerate(log_counts)
                        if abs((lc0 - ld0) - (lc1 - ld1)) >= min_spread]
            else:
                kept = [i for i, lc in enumerate(log_counts)
                        if _spread(lc, log_denominators) >= min_spread]
            if len(kept) < len(rows):
                rows = [rows[i] for i in kept]
                values = [values[i] for i in kept]
                log_counts = [log_counts[i] for i in kept]
                log_dfs = [log_dfs[i] for i in kept]
        if top_k is not None and len(rows) > top_k:
            return None  # a top-k selection: the array path ranks the tokens
        if not rows:
            return {labels[c]: lp for c, lp in zip(columns, log_prior, strict=True)}
        if self.tf == "log":
            values = [math.log1p(v) for v in values]
        spread_weight = self.spread_weight
        if spread_weight:
            if len(columns) == 2:
                ld0, ld1 = log_denominators
                spreads = [abs((lc0 - ld0) - (lc1 - ld1)) for lc0, lc1 in log_counts]
            else:
                spreads = [_spread(lc, log_denominators) for lc in log_counts]
        if self.idf:
            # log((1 + n) / (1 + df)) + 1, as log(1 + n) − log(1 + df) + 1, clipped at 0
            n_docs = self._n_docs.item
            log_n = log(1.0 + sum(n_docs(c) for c in columns)) + 1.0  # integer sum: exact
            values = [v * max(log_n - log_df, 0.0)
                      for v, log_df in zip(values, log_dfs, strict=True)]
        if spread_weight:
            values = [v * spread ** spread_weight
                      for v, spread in zip(values, spreads, strict=True)]
        if self.length_norm:
            norm = math.sqrt(math.fsum([v * v for v in values]))
            if norm > 0:
                values = [v / norm for v in values]
        weight = math.fsum(values)
        by_class = list(zip(*log_counts, strict=True))
        fsum = math.fsum
        return {
            labels[c]: (lp - weight * ld) + fsum(map(mul, values, by_class[j]))
            for j, (c, lp, ld) in enumerate(zip(columns, log_prior, log_denominators,
                                                strict=True))
        }

    def prequential_log_proba_many(self, xs: Iterable, ys: Iterable[str | None]
                                   ) -> list[dict[str, float]]:
        """:meth:`Model.prequential_log_proba_many`, batch-stepped (in C where it is built,
        else in numpy) over the runs of messages with ``str`` tokens and ``int`` counts, short
        or long (see :mod:`streamnb.models._prequential`): the same state bit for bit, the
        same log-probabilities to rounding. Other options, states and inputs take the loop.

        >>> xs = [{"win": 1, "cash": 1}, {"lunch": 1}, {"win": 1}, {"lunch": 1, "at": 1}]
        >>> ys = ["spam", "ham", None, "ham"]
        >>> batched, looped = MultinomialNB(), MultinomialNB()
        >>> log_probas = batched.prequential_log_proba_many(xs, ys)
        >>> log_probas[:2], batched.n_updates
        ([{}, {'spam': 0.0}], 3)
        >>> round(math.exp(log_probas[2]["spam"]), 3)   # odds (2/5) / (1/4)
        0.615
        >>> looped_log_probas = looped._prequential_loop(xs, ys)   # the loop: equal to rounding
        >>> all(abs(a[c] - b[c]) < 1e-12 for a, b in zip(looped_log_probas, log_probas)
        ...     for c in a)
        True
        >>> looped.to_state() == batched.to_state()   # and the very same state
        True
        """
        xs, ys = list(xs), list(ys)
        # decay: the loop (each step moves the clock, and the scale of every count)
        if len(xs) != len(ys) or self.half_life is not None or not _prequential.takes(self):
            return super().prequential_log_proba_many(xs, ys)
        return _prequential.prequential_log_proba_many(self, xs, ys)

    def _log_theta(self, label: str) -> tuple[list, np.ndarray]:
        column = self._column[label]
        rows = self._vocabulary_rows()
        if not rows.size:  # an empty vocabulary: no θ (and N_c + α|V| = 0)
            return [], np.zeros(0)
        log_theta = np.log(self._counts[rows, column] + self._alpha) - math.log(
            self._totals[column] + self._alpha * self._vocab)
        return [self._keys[r] for r in rows.tolist()], log_theta

    def feature_log_prob(self, label: str) -> dict:
        """token -> log θ_token|label over the vocabulary."""
        if label not in self._column:
            raise ValueError(f"unknown class {label!r}; known classes: {self.classes}")
        keys, log_theta = self._log_theta(label)
        return dict(zip(keys, log_theta.tolist(), strict=True))
