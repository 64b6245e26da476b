"""The prequential batch step of :class:`MultinomialNB` in a few dozen numpy calls.

Predicting then learning each message of a batch in turn costs a Python step per message. Here
every count a prediction reads is reconstructed instead from prefix sums over the batch: the
count of token k in class c *before* message i is the stored count plus the sum of the
increments of the earlier labelled messages that hold k (an exclusive cumulative sum over k's
occurrences in message order); the per-class message counts and totals and the vocabulary size
before message i are exclusive cumulative sums over the messages. From those the scores are the
arithmetic of ``MultinomialNB._short_scores``, vectorised over all occurrences, segment-summed
per message. The learning is then applied to the counts in one scatter.

Counts are integers below 2**46, so every sum above is exact in any order: the counts, and the
state, are bit for bit those of the loop. The scores agree to rounding (numpy's log and sums
against libm and ``math.fsum``), except at one discontinuity: the ``min_spread`` filter. A
token whose spread falls within rounding of the threshold has it recomputed with the short
path's own expression, so the same tokens are kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import chain, repeat
from typing import TYPE_CHECKING

import numpy as np

from streamnb.models._text import _EXACT_COUNT

if TYPE_CHECKING:
    from streamnb.models.multinomial import MultinomialNB

#: Spreads this close to ``min_spread`` are recomputed exactly (numpy and libm logs differ by
#: an ulp or so; terms are below 100 in magnitude, so their error is below 1e-13).
SPREAD_BAND = 1e-9
#: Counts and message counts stay below this after any batch, so sums of them remain exact.
_EXACT_LIMIT = _EXACT_COUNT / 2


def takes(model: MultinomialNB) -> bool:
    """Whether the vectorised step can compute what the loop computes with this model's
    options and state: not those the short path leaves to the array path (complement,
    Robinson, top-k, hashing, the negative counts of a slice)."""
    return not (model.complement or model.combining != "nb" or model.top_k is not None
                or model.n_buckets is not None or model._n_negative or model._negative_docs
                or model._tracks_updates())


def short_examples(model: MultinomialNB, xs: list, ys: list) -> list[bool]:
    """Per example, whether the short path takes it (``_short_counts``, str or no label):
    the vectorised step does those; the others, long or odd or bad inputs, go to the loop."""
    limit = model._short_limit
    short = [isinstance(x, dict) and len(x) <= limit and (y is None or isinstance(y, str))
             for x, y in zip(xs, ys, strict=True)]
    # Usually every count is an int in range and every token a str: one pass over all of them
    # says so; otherwise each message is checked on its own.
    candidates = [x for x, ok in zip(xs, short, strict=True) if ok]
    values = list(chain.from_iterable(x.values() for x in candidates))
    if (set(map(type, values)) <= {int} and set(map(type, chain.from_iterable(candidates))) <= {str}
            and (not values or (min(values) > 0 and max(values) < _EXACT_COUNT))):
        return short
    short_counts = model._short_counts
    return [ok and short_counts(x, learning=True) is not None
            for x, ok in zip(xs, short, strict=True)]


def _state_is_exact(model: MultinomialNB, rows: np.ndarray) -> bool:
    """Whether the message counts, the totals and the stored counts of ``rows`` are integers
    below the limit, so the batch's sums of them are exact in any order."""
    n_docs, totals = model._n_docs, model._totals
    if n_docs.size and not (
        np.array_equal(n_docs, np.rint(n_docs)) and np.array_equal(totals, np.rint(totals))
        and n_docs.max() < _EXACT_LIMIT and totals.max() < _EXACT_LIMIT
        # a class without messages holds no counts, so the vocabulary ignores its column
        and not np.any((n_docs == 0) & (totals != 0))
    ):
        return False
    if not rows.size:
        return True
    counts = model._counts[rows]
    return bool(np.array_equal(counts, np.rint(counts)) and counts.max() < _EXACT_LIMIT)


class _Occurrences:
    """The batch's tokens flattened: one entry per (message, token), in message order."""

    def __init__(self, model: MultinomialNB, xs: list[Mapping[str, int]]):
        lengths = np.fromiter(map(len, xs), dtype=np.intp, count=len(xs))
        self.keys = list(chain.from_iterable(xs))
        n = len(self.keys)
        self.values = np.fromiter(chain.from_iterable(x.values() for x in xs),
                                  dtype=np.float64, count=n)
        self.message = np.repeat(np.arange(len(xs)), lengths)
        self.rows = np.fromiter(map(model._index.get, self.keys, repeat(-1)), dtype=np.intp,
                                count=n)


def _index_batch(model: MultinomialNB, occurrences: _Occurrences, ys: list) -> np.ndarray:
    """Create the class columns and token rows the batch's labelled messages will need (zero
    counts, in the order the loop would create them); return each message's column (-1:
    unlabelled) and fill in the rows of the occurrences (-1: a token never learned)."""
    column = np.array([-1 if y is None else model._column_of(y) for y in ys], dtype=np.intp)
    missing = np.flatnonzero((occurrences.rows < 0) & (column[occurrences.message] >= 0))
    if missing.size:
        keys = occurrences.keys
        new_keys = list(dict.fromkeys(keys[i] for i in missing.tolist()))
        model._key_bytes += sum(map(len, new_keys))
        model._add_rows(new_keys)
        # Their lists are made on first use: the batch learns them, leaving the rows stale.
        model._row_counts.extend([None] * len(new_keys))
        unknown = np.flatnonzero(occurrences.rows < 0)
        index_get = model._index.get
        occurrences.rows[unknown] = [index_get(keys[i], -1) for i in unknown.tolist()]
    return column


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """Along axis 0: the sum of the entries before each one."""
    return np.cumsum(values, axis=0) - values


def prequential_many(model: MultinomialNB, xs: list, ys: list) -> list[dict[str, float]]:
    """``Model.prequential_many`` for a model :func:`takes` and examples
    :func:`short_examples` accepts (see the module doc)."""
    occurrences = _Occurrences(model, xs)
    if not _state_is_exact(model, occurrences.rows[occurrences.rows >= 0]):
        return model._prequential_loop(xs, ys)
    n_messages = len(xs)
    column = _index_batch(model, occurrences, ys)
    n_columns = len(model._labels)
    labelled = column >= 0
    train_values = occurrences.values if model.counts_occurrences else np.ones_like(
        occurrences.values)

    # Per message: messages, counted tokens and the vocabulary size before it.
    learned_docs = np.zeros((n_messages, n_columns))
    learned_docs[np.flatnonzero(labelled), column[labelled]] = 1.0
    per_message = np.bincount(occurrences.message, weights=train_values, minlength=n_messages)
    learned_totals = learned_docs * per_message[:, None]
    n_docs = model._n_docs + _exclusive_cumsum(learned_docs)
    totals = model._totals + _exclusive_cumsum(learned_totals)

    # Per occurrence of a token learned before or during the batch, in (row, message) order.
    keep = np.flatnonzero(occurrences.rows >= 0)
    rows_unsorted = occurrences.rows[keep]
    order = keep[np.argsort(rows_unsorted, kind="stable")]  # message order within a row
    rows = occurrences.rows[order]
    message = occurrences.message[order]
    increments = np.zeros((rows.size, n_columns))
    learned_here = np.flatnonzero(labelled[message])
    increments[learned_here, column[message[learned_here]]] = train_values[order][learned_here]
    new_row = np.r_[True, rows[1:] != rows[:-1]] if rows.size else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(new_row)
    ends = np.append(starts[1:], rows.size)[: starts.size] - 1
    group = np.cumsum(new_row) - 1  # each occurrence's row group
    running = np.cumsum(increments, axis=0)
    earlier = running - increments
    group_sums = running[ends] - earlier[starts]  # what the batch adds to each row
    earlier -= earlier[starts][group]  # restart the sum at each row
    stored_nnz = model._nnz[rows]
    counts = model._counts[rows] + earlier

    # A token enters V at its first learned occurrence, if it had no count before the batch.
    entering = learned_here[stored_nnz[learned_here] == 0]
    if entering.size:
        entering = entering[np.r_[True, group[entering[1:]] != group[entering[:-1]]]]
    entered = np.bincount(message[entering], minlength=n_messages)
    vocab = model._vocab + _exclusive_cumsum(entered)

    probas = _probabilities(model, occurrences.values[order], rows.size, message, counts,
                            n_docs, totals, vocab)

    # Learn the whole batch: the counts in one scatter, then the bookkeeping beside them.
    if model._seen is not None:
        # The loop's stamps: labelled message i is learn step clock + (labelled up to i).
        step = model._clock + np.cumsum(labelled)
        np.maximum.at(model._seen, rows[learned_here], step[message[learned_here]])
        model._clock += int(labelled.sum())
    if rows.size:
        changed = group_sums.any(axis=1)
        changed_rows = rows[starts[changed]]
        model._counts[changed_rows] += group_sums[changed]
        _after_bulk_learning(model, changed_rows)
        if model._changed_rows is not None:
            model._note_rows(changed_rows)
    model._n_docs += learned_docs.sum(axis=0)
    if model._changed_rows is not None and labelled.any():
        model._totals_changed = True
    model._totals += learned_totals.sum(axis=0)
    model._active = None
    model._log_prior_cache = None
    model._lookup_cache = None
    for c in np.unique(column[labelled]).tolist():
        model._invalidate(c)
    return probas


def _after_bulk_learning(model: MultinomialNB, changed_rows: np.ndarray) -> None:
    """Counts of ``changed_rows`` only grew: update V and the per-row caches (the row lists
    become stale, as after the array path's update)."""
    before = model._nnz[changed_rows]
    after = np.count_nonzero(model._counts[changed_rows], axis=1)
    model._nnz[changed_rows] = after
    model._vocab += int(np.count_nonzero((before == 0) & (after > 0)))
    model._stale[changed_rows] = True
    model._any_stale = True
    cache = model._row_cache
    if cache:
        for row in changed_rows.tolist():
            cache.pop(row, None)


def _probabilities(model: MultinomialNB, values: np.ndarray, n_occurrences: int,
                   message: np.ndarray, counts: np.ndarray, n_docs: np.ndarray,
                   totals: np.ndarray, vocab: np.ndarray) -> list[dict[str, float]]:
    """What ``predict_proba_one`` returns for each message, from the counts before it:
    per occurrence ``counts`` (tokens x classes) and ``message``, per message ``n_docs``,
    ``totals`` and ``vocab`` (the arithmetic of ``MultinomialNB._short_scores``)."""
    n_messages = n_docs.shape[0]
    active = n_docs > 0
    alpha = model.alpha
    with np.errstate(divide="ignore", invalid="ignore"):  # inactive columns, masked below
        log_prior = np.log(n_docs) - np.log(np.where(active, n_docs, 0.0).sum(axis=1))[:, None]
        log_denominators = np.log(totals + alpha * vocab[:, None])
    log_counts = np.log(counts + alpha)
    df = counts.sum(axis=1)
    scored = df > 0  # in V before the message (no count is negative)
    occurrence_active = active[message]
    if model.min_spread and n_occurrences:
        terms = log_counts - log_denominators[message]
        with np.errstate(invalid="ignore"):  # no active class: inf - inf, zeroed next
            spread = (np.where(occurrence_active, terms, -np.inf).max(axis=1)
                      - np.where(occurrence_active, terms, np.inf).min(axis=1))
        spread[~occurrence_active.any(axis=1)] = 0.0
        near = np.flatnonzero(scored & (np.abs(spread - model.min_spread) < SPREAD_BAND))
        for i in near.tolist():
            spread[i] = _exact_spread(model, counts[i], totals[message[i]],
                                      int(vocab[message[i]]), active[message[i]])
        scored &= spread >= model.min_spread
    kept = np.flatnonzero(scored)
    message = message[kept]
    log_counts = log_counts[kept]
    weights = values[kept] if model.repeated_words == "count" else np.ones(kept.size)
    if model.tf == "log":
        weights = np.log1p(weights)
    if model.idf:
        log_n = np.log(1.0 + np.where(active, n_docs, 0.0).sum(axis=1)) + 1.0
        weights = weights * np.maximum(log_n[message] - np.log(1.0 + df[kept]), 0.0)
    if model.length_norm:
        norm = np.sqrt(np.bincount(message, weights=weights * weights, minlength=n_messages))
        divisor = norm[message]
        weights = np.where(divisor > 0, weights / np.where(divisor > 0, divisor, 1.0), weights)
    weight = np.bincount(message, weights=weights, minlength=n_messages)
    sums = np.zeros(n_docs.shape)  # per message and class: Σ_k w_k log(N_kc + α)
    for c in range(n_docs.shape[1]):
        sums[:, c] = np.bincount(message, weights=weights * log_counts[:, c],
                                 minlength=n_messages)
    has_terms = np.bincount(message, minlength=n_messages) > 0
    with np.errstate(divide="ignore", invalid="ignore"):  # messages without a class
        scores = np.where(has_terms[:, None],
                          (log_prior - weight[:, None] * log_denominators) + sums, log_prior)
        scores = np.where(active, scores / model.temperature, -np.inf)
        top = scores.max(axis=1, initial=-np.inf)
        finite_top = np.where(np.isfinite(top), top, 0.0)[:, None]
        log_z = finite_top + np.log(np.exp(scores - finite_top).sum(axis=1, keepdims=True))
        proba = np.exp(scores - log_z)
    return _as_dicts(model, proba, active)


def _exact_spread(model: MultinomialNB, counts: np.ndarray, totals: np.ndarray, vocab: int,
                  active: np.ndarray) -> float:
    """A token's spread exactly as ``_short_scores`` computes it (libm logs, same order)."""
    log = math.log
    alpha = model.alpha
    smoothing = alpha * vocab
    columns = np.flatnonzero(active).tolist()
    log_counts = [log(counts.item(c) + alpha) for c in columns]
    log_denominators = [log(totals.item(c) + smoothing) for c in columns]
    if len(columns) == 2:
        (lc0, lc1), (ld0, ld1) = log_counts, log_denominators
        return abs((lc0 - ld0) - (lc1 - ld1))
    terms = [lc - ld for lc, ld in zip(log_counts, log_denominators, strict=True)]
    return max(terms) - min(terms)


def _as_dicts(model: MultinomialNB, proba: np.ndarray, active: np.ndarray
              ) -> list[dict[str, float]]:
    """One dict per message over its active classes, in column order (as the loop's)."""
    n_columns = active.shape[1]
    if not n_columns:
        return [{} for _ in range(proba.shape[0])]
    out: list = [None] * proba.shape[0]
    patterns, which = np.unique(active, axis=0, return_inverse=True)
    which = which.reshape(-1)
    labels = model._labels
    for k, pattern in enumerate(patterns):
        members = np.flatnonzero(which == k)
        columns = np.flatnonzero(pattern).tolist()
        if not columns:  # before any class was learned
            for i in members.tolist():
                out[i] = {}
            continue
        names = [labels[c] for c in columns]
        for i, row in zip(members.tolist(), proba[np.ix_(members, columns)].tolist(),
                          strict=True):
            out[i] = dict(zip(names, row, strict=True))
    return out
