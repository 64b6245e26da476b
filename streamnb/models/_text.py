"""The shared machinery of the text models: a token index, count arrays, class columns.

Counts live in one float64 array ``_counts[row, column]`` (a row per token or hash bucket, a
column per class), grown by doubling, so scoring a message is one vectorised gather of its rows.
float64 holds every integer below 2**53 exactly, so integer counts learn, unlearn and merge
without rounding: learn then unlearn restores the counts bit for bit, and the order of merges
never changes a number.

The vocabulary V is the set of tokens with a non-zero count in at least one class. A token whose
counts all return to zero (after unlearning) leaves V; tokens outside V are ignored when scoring,
as a vectoriser fitted on the training messages would ignore them.

A model that unlearns a message it never learned (a per-partition slice of the statistics, say)
may hold negative counts. That is allowed: slices are meant to be added up, and the sum is what
gets scored. Scoring a state whose own counts are negative raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import repeat
from typing import Any, ClassVar

import numpy as np

from streamnb.hashing import stable_bucket
from streamnb.models._base import (
    STATE_VERSION,
    Model,
    ModelInputError,
    StateError,
    check_class_offsets,
    check_label,
    check_optional_int,
    check_positive,
    json_numbers,
    log_normalise,
    state_array,
)
from streamnb.models._keyed import KeyedTextStatistics

_EMPTY_F = np.zeros(0)
_EMPTY_I = np.zeros(0, dtype=np.intp)
# Counts below this add up exactly in float64 over a short message, in any order.
_EXACT_COUNT = 2**46

#: Messages with at most this many distinct tokens are scored and learned in plain Python
#: (dictionary lookups and float arithmetic on the same counts), above it with numpy. A numpy
#: call costs about a microsecond whatever its size, and a step makes dozens of them, which
#: dominates an SMS of 15 tokens; on an 800-token mail the vectorised path is the faster one.
#: Both paths do the same float operations in the same order, so they give the same bits
#: (``tests/models/test_models_short_path.py`` checks it on messages of every length).
SHORT_MESSAGE_TOKENS = 64

#: A decaying model (``half_life``) stores its counts in units that grow by 2 every half-life
#: (so a learn writes only the message's keys); every DECAY_EPOCH_BITS half-lives it divides
#: every count by 2**DECAY_EPOCH_BITS, exactly (a power of two), and starts a new *epoch*.
DECAY_EPOCH_BITS = 64
#: An unlearn that leaves less than this fraction of a count sets it to zero: the rest is the
#: rounding of the decayed weights, not a message (see docs/models.md, "Decay").
DECAY_ZERO = 1e-9


def decay_epoch(clock: int, half_life: int) -> int:
    """The epoch of a decaying model at ``clock`` (learned messages)."""
    return clock // (DECAY_EPOCH_BITS * half_life)


def decay_weight(at: int, half_life: int, epoch: int) -> float:
    """The stored weight of a message learned at clock ``at``, in the units of ``epoch``:
    2**(at / half_life) / 2**(epoch * DECAY_EPOCH_BITS), computed as a power of two times
    2**(r / half_life) with 0 <= r < DECAY_EPOCH_BITS * half_life, so that two models (slices)
    in different epochs hold the same message's weight to the bit, up to a power of two.

    >>> decay_weight(0, 10, 0), decay_weight(10, 10, 0), decay_weight(640, 10, 1)
    (1.0, 2.0, 1.0)
    """
    q, r = divmod(at, DECAY_EPOCH_BITS * half_life)
    return math.ldexp(2.0 ** (r / half_life), DECAY_EPOCH_BITS * (q - epoch))


def term_spreads(terms: np.ndarray) -> np.ndarray:
    """Per token (row), max − min of its terms over the classes (columns); for two classes
    computed as |t0 − t1|, the same number (IEEE subtraction rounds symmetrically) in fewer
    numpy calls than two reductions along the short axis."""
    if terms.shape[1] == 2:
        return np.abs(terms[:, 0] - terms[:, 1])
    return terms.max(axis=1) - terms.min(axis=1)


class TextModel(KeyedTextStatistics, Model):
    """Base of :class:`MultinomialNB` and :class:`BernoulliNB` (token-count inputs)."""

    numeric_input: ClassVar[bool] = False
    _OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "top_k", "temperature", "n_buckets",
                                           "half_life", "class_offsets")
    #: Options that change what is counted (models differing in them cannot be merged).
    _COUNTING_OPTIONS: ClassVar[tuple[str, ...]] = ("n_buckets", "half_life")

    def __init__(self, alpha: float = 1.0, *, top_k: int | None = None,
                 temperature: float = 1.0, n_buckets: int | None = None,
                 half_life: int | None = None,
                 class_offsets: Mapping[str, float] | None = None):
        self.alpha = check_positive("alpha", alpha)
        # Decay (see docs/models.md): a message learned at clock t_i weighs 2**-((t - t_i) / h)
        # at clock t (learned messages). 0 or None: no decay, integer counts.
        self.half_life = check_optional_int("half_life", half_life or None)
        self._decay_clock = 0  # messages learned (with decay)
        # The smoothing and the unit scoring uses: alpha and 1 without decay; with decay the
        # counts are stored times the scale g = decay_weight(clock), and so are these two.
        self._alpha = self.alpha
        self._unit = 1.0
        self.top_k = check_optional_int("top_k", top_k)
        # Scores are divided by the temperature before they are normalised: the ranking and
        # the decision stay the same, only the probabilities soften (see docs/accuracy.md).
        self.temperature = check_positive("temperature", temperature)
        # The decision (Model.decide): a constant per class added to its log-posterior before
        # the label is chosen; the probabilities stay the model's.
        self.class_offsets = check_class_offsets(class_offsets)
        self.n_buckets = check_optional_int("n_buckets", n_buckets)
        self._keys: list = []
        self._index = {}  # rows of _keys before _indexed, see the _index property
        # The C batch step's look-up table of the keys (streamnb.models._prequential), made
        # on its first batch; it follows _keys (appended to) and is made again when _keys is
        # replaced.
        self._token_table = None
        self._key_bytes = 0
        self._labels: list[str] = []
        self._column: dict[str, int] = {}
        self._counts = np.zeros((0, 0))
        # The same counts as Python lists, one per row (token): the short-message path reads
        # and writes them element by element, which lists do ten times faster than an array.
        # The short path writes both; the array path writes the array only, and marks the
        # rows it changed in _stale, which the short path copies over before it reads one
        # (_refresh). A row the array path created is None until then. Bulk changes rebuild
        # the lists (_recount).
        self._row_counts: list[list[float] | None] = []
        self._stale = np.zeros(0, dtype=bool)  # per row: changed by the array path
        self._any_stale = False
        # Per-row values a subclass derives from a row's counts for scoring short messages
        # (multinomial: the logs of the smoothed counts); an update of a row drops its entry.
        self._row_cache: dict[int, Any] = {}
        self._nnz = np.zeros(0, dtype=np.int32)  # classes with a non-zero count, per row
        self._n_docs = np.zeros(0)  # messages per class column
        self._totals = np.zeros(0)  # sum of counts per class column
        self._vocab = 0
        self._n_negative = 0  # count cells below zero (possible in a slice after unlearning)
        self._negative_docs = 0  # classes with a negative message count (same)
        self._active: np.ndarray | None = None  # cached columns of classes with messages
        self._active_list: list[int] = []
        self._active_list_of: np.ndarray | None = None  # the _active that _active_list lists
        self._log_prior_cache: np.ndarray | None = None
        self._lookup_cache: tuple[list, np.ndarray, int] | None = None
        self._short_limit = SHORT_MESSAGE_TOKENS
        # Rows written since mark_changes() (None: not tracked), see streamnb.models._keyed.
        self._changed_rows: set[int] | None = None
        self._totals_changed = False
        self._expired_keys: set = set()  # keys expired since mark_changes(), see _keyed
        # Last-seen stamps, see track_last_seen(): per row, the clock of the last learn or
        # unlearn step that wrote it; None when the model does not track them.
        self._seen: np.ndarray | None = None
        self._clock = 0  # learn and unlearn steps so far (when tracking)

    # -- options and introspection ------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        # half_life and class_offsets are listed only when set: a model without them has the
        # options (and the state) it had before they existed.
        options = {name: getattr(self, name) for name in self._OPTIONS
                   if name not in ("half_life", "class_offsets")}
        if self.half_life is not None:
            options["half_life"] = self.half_life
        if self.class_offsets:
            options["class_offsets"] = dict(self.class_offsets)
        return options

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"

    @property
    def classes(self) -> list[str]:
        """Labels with at least one (net) learned message, sorted."""
        return sorted(self._labels[c] for c in self._active_columns())

    @property
    def n_updates(self) -> int:
        """Net number of labelled messages learned (learned minus unlearned); with decay,
        their decayed weight (the messages the model remembers), rounded."""
        if self.half_life is not None:
            return round(float(self._n_docs.sum()) / self._unit)
        return int(self._n_docs.sum())

    @property
    def vocabulary_size(self) -> int:
        """|V|: tokens (or hash buckets) with a non-zero count in some class."""
        return self._vocab

    def state_nbytes(self) -> int:
        """Approximate bytes of the sufficient statistics: counts, per-class totals, token keys."""
        n_classes = len(self._labels)
        key_bytes = self._key_bytes if self.n_buckets is None else 8 * len(self._keys)
        return int(self._vocab * n_classes * 8 + key_bytes + n_classes * 24 + self._extra_nbytes())

    def _extra_nbytes(self) -> int:
        return 0

    # -- inputs -----------------------------------------------------------------------------
    def _encode(self, x: Any) -> tuple[list, np.ndarray]:
        """Keys (tokens or buckets) and their positive counts; hashing merges colliding keys."""
        if not isinstance(x, Mapping):
            raise ModelInputError(
                f"text models take a mapping token -> count, got {type(x).__name__}"
            )
        n = len(x)
        if n == 0:
            return [], _EMPTY_F
        try:
            values = np.fromiter(x.values(), dtype=np.float64, count=n)
        except (TypeError, ValueError):
            raise ModelInputError("token counts must be numbers") from None
        keys = list(x)
        if not (values.min() > 0 and values.max() < math.inf):
            if not np.isfinite(values).all() or (values < 0).any():
                raise ModelInputError("token counts must be finite numbers >= 0")
            keep = values != 0  # a zero count is an absent token
            keys = [k for k, kept in zip(keys, keep.tolist(), strict=True) if kept]
            values = values[keep]
        if self.n_buckets is not None and keys:
            try:
                buckets = np.fromiter(map(stable_bucket, keys, repeat(self.n_buckets)),
                                      dtype=np.int64, count=len(keys))
            except (AttributeError, TypeError):
                raise ModelInputError("tokens must be str") from None
            unique, inverse = np.unique(buckets, return_inverse=True)
            if len(unique) != len(buckets):
                values = np.bincount(inverse, weights=values)
            else:
                values = values[np.argsort(buckets, kind="stable")]
            keys = unique.tolist()
        return keys, values

    def _lookup(self, keys: list) -> np.ndarray:
        """Row of each key (-1 if not indexed).

        The daemon predicts a message and then learns it: the second call finds the same
        key list and reuses the rows (rows never move; keys indexed since are looked up
        again), which halves the dictionary lookups, the dominant cost of a step.
        """
        cached = self._lookup_cache
        if cached is not None and len(cached[0]) == len(keys) and cached[0] == keys:
            rows = cached[1]
            if cached[2] != len(self._keys):
                missing = np.flatnonzero(rows < 0)
                if missing.size:
                    get = self._index.get
                    rows = rows.copy()
                    rows[missing] = [get(keys[i], -1) for i in missing.tolist()]
        else:
            rows = np.array(list(map(self._index.get, keys, repeat(-1))), dtype=np.intp)
        # Callers never write into ``rows`` (it is shared with this cache).
        self._lookup_cache = (keys, rows, len(self._keys))
        return rows

    def _rows_in_vocabulary(self, keys: list, values: np.ndarray):
        """Rows and counts of the message's tokens that are in V, and which of ``keys`` they
        are (a boolean mask, or None for all)."""
        if not keys:
            return _EMPTY_I, _EMPTY_F, None
        rows = self._lookup(keys)
        known = rows >= 0
        if len(self._keys) != self._vocab:  # some indexed tokens have left V (unlearned)
            known[known] = self._nnz[rows[known]] > 0
        if known.all():
            return rows, values, None
        return rows[known], values[known], known

    def _rows_creating(self, keys: list) -> np.ndarray:
        rows = self._lookup(keys)
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            rows = rows.copy()
            new_keys = [keys[i] for i in missing.tolist()]
            if self.n_buckets is None:
                if not set(map(type, new_keys)) <= {str}:
                    if not all(isinstance(key, str) for key in new_keys):
                        raise ModelInputError("tokens must be str")
                    # str subclasses (numpy.str_, ...) are stored as plain str so the
                    # vocabulary serialises the same whatever produced the tokens.
                    new_keys = [str(key) for key in new_keys]
                self._key_bytes += sum(map(len, new_keys))  # characters: an estimate of bytes
            start = len(self._keys)
            self._add_rows(new_keys)
            self._row_counts.extend([None] * len(new_keys))  # the caller writes them: stale
            rows[missing] = np.arange(start, start + len(new_keys))
        return rows

    def _add_rows(self, new_keys: list, index_now: bool = True) -> None:
        """Index ``new_keys`` (not yet indexed) as new rows of zero counts in the array; the
        caller adds their row lists. ``index_now=False`` (the C batch step, which finds rows
        through its own table) leaves them out of the dict until it is next read."""
        start = len(self._keys)
        self._reserve_rows(start + len(new_keys))
        if index_now:
            index = self._index  # (the rows left out before are put in first)
            self._keys.extend(new_keys)
            index.update(zip(new_keys, range(start, start + len(new_keys)), strict=True))
            self._indexed = len(self._keys)
        else:
            self._keys.extend(new_keys)

    @property
    def _index(self) -> dict[Any, int]:
        """Key -> row of every key of ``_keys``. The rows a C batch step added are put in
        when it is next read: a SpamAssassin mail brings ~20 new tokens, and adding them to
        a dict of ~150,000 was a fifth of the C step's time (7.8 of 41 us a mail under
        cProfile), for a dict the daemon's batches of mail never read (expiry makes it anew)."""
        index = self._index_of
        if self._indexed < len(self._keys):
            start, keys = self._indexed, self._keys
            index.update(zip(keys[start:], range(start, len(keys)), strict=True))
            self._indexed = len(keys)
        return index

    @_index.setter
    def _index(self, index: dict[Any, int]) -> None:
        self._index_of = index
        self._indexed = len(index)

    def _reserve_rows(self, n_rows: int) -> None:
        capacity = self._counts.shape[0]
        if n_rows <= capacity:
            return
        # Grown by half, not doubled: on average a sixth of the rows is spare instead of a
        # third, and the copies still cost O(1) per row.
        capacity = max(n_rows, capacity + capacity // 2, 1024)
        counts = np.zeros((capacity, self._counts.shape[1]))
        counts[: self._counts.shape[0]] = self._counts
        nnz = np.zeros(capacity, dtype=np.int32)
        nnz[: self._nnz.shape[0]] = self._nnz
        stale = np.zeros(capacity, dtype=bool)
        stale[: self._stale.shape[0]] = self._stale
        self._counts, self._nnz, self._stale = counts, nnz, stale
        if self._seen is not None:
            seen = np.zeros(capacity, dtype=np.int64)
            seen[: self._seen.shape[0]] = self._seen
            self._seen = seen

    def _column_of(self, y: str) -> int:
        column = self._column.get(y)
        if column is None:
            column = len(self._labels)
            self._labels.append(y)
            self._column[y] = column
            self._counts = np.concatenate([self._counts, np.zeros((self._counts.shape[0], 1))], 1)
            for cells in self._row_counts:
                if cells is not None:
                    cells.append(0.0)
            self._row_cache.clear()
            self._n_docs = np.append(self._n_docs, 0.0)
            self._totals = np.append(self._totals, 0.0)
            self._add_class_column()
        return column

    def _add_class_column(self) -> None:
        pass

    def _active_columns(self) -> np.ndarray:
        if self._active is None:
            self._active = np.flatnonzero(self._n_docs > 0)
        return self._active

    # -- learning ---------------------------------------------------------------------------
    def _training_values(self, values: np.ndarray) -> np.ndarray:
        return values

    def _check_examples(self, xs: list, ys: list) -> None:
        # In the order predicting and then learning each example would raise: the input
        # (predict), then the label, then the token types (learn).
        for x, y in zip(xs, ys, strict=True):
            learning = y is not None
            if self._short_counts(x, learning=learning) is None:
                keys, _ = self._encode(x)
                if learning:
                    check_label(y)
                    if self.n_buckets is None and not all(isinstance(k, str) for k in keys):
                        raise ModelInputError("tokens must be str")
            elif learning:
                check_label(y)

    def learn_one(self, x: Mapping[str, float], y: str, *, learned_at: int | None = None
                  ) -> None:
        """Count the message ``x`` (token -> count) as an example of class ``y``.

        With ``half_life`` the message is learned at the next clock (one more learned
        message), or, given ``learned_at``, with the weight of a message learned at that
        clock without moving the clock (a corrected label keeps its message's age)."""
        self._update(x, y, 1.0, learned_at)

    def unlearn_one(self, x: Mapping[str, float], y: str, *, learned_at: int | None = None
                    ) -> None:
        """Exactly undo ``learn_one(x, y)`` (never raises on counts going negative).

        With ``half_life``, ``learned_at`` is the clock the message was learned at (default:
        the current clock, the last message learned); what remains of its weight is removed.
        The clock does not move back: the messages learned since stay as old as they are."""
        self._update(x, y, -1.0, learned_at)

    def unlearn_many(self, X, ys) -> None:
        if self.half_life is not None:
            # each message needs the clock it was learned at: only the caller knows them
            raise ValueError("with half_life, unlearn each message with "
                             "unlearn_one(x, y, learned_at=<the clock it was learned at>)")
        super().unlearn_many(X, ys)

    def _update(self, x: Mapping[str, float], y: str, sign: float,
                learned_at: int | None = None) -> None:
        check_label(y)
        if self.half_life is not None:
            self._update_decayed(x, y, sign, learned_at)
            return
        if sign < 0 and self._seen is not None:
            x = self.unlearnable_part(x, y)
        short = self._short_counts(x, learning=True)
        if short is not None:
            self._update_short(short, y, sign)
            return
        keys, values = self._encode(x)
        rows = self._rows_creating(keys)  # validates new tokens before anything changes
        column = self._column_of(y)
        self._n_docs[column] += sign
        if sign < 0 or self._negative_docs:
            self._negative_docs = int(np.count_nonzero(self._n_docs < 0))
        self._active = None
        self._message_learned(column, rows)
        if not keys:
            return
        values = self._training_values(values)
        old = self._counts[rows, column]
        new = old + sign * values
        self._counts[rows, column] = new
        self._stale[rows] = True
        self._any_stale = True
        self._totals[column] += sign * values.sum()
        if sign > 0 and not self._n_negative:
            # Counts only grow and none is negative: a row changes status iff it was zero.
            became = rows[old == 0]
            if became.size:
                before = self._nnz[became]
                self._nnz[became] = before + 1
                self._vocab += int(np.count_nonzero(before == 0))
        else:
            self._note_status_changes(rows, old, new)
        self._after_update(column, old, new)

    def _note_status_changes(self, rows: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
        """Keep the count of negative counts, each row's number of non-zero classes and the
        vocabulary in step with ``rows``' counts going from ``old`` to ``new``."""
        self._n_negative += int(np.count_nonzero(new < 0)) - int(np.count_nonzero(old < 0))
        changed = (old == 0) != (new == 0)
        if changed.any():
            changed_rows = rows[changed]
            before = self._nnz[changed_rows]
            after = before + np.where(new[changed] != 0, 1, -1)
            self._nnz[changed_rows] = after
            self._vocab += int(np.count_nonzero(before == 0)) - int(np.count_nonzero(after == 0))

    def _after_update(self, column: int, old: np.ndarray, new: np.ndarray) -> None:
        pass

    # -- decay --------------------------------------------------------------------------------
    @property
    def decay_clock(self) -> int:
        """Messages learned so far by a decaying model (0 without ``half_life``)."""
        return self._decay_clock

    @property
    def decay_scale(self) -> float:
        """g: the stored counts are the decayed counts times g (1.0 without decay)."""
        return self._unit

    def _set_scale(self) -> None:
        h = self.half_life
        if h is None:
            return
        g = decay_weight(self._decay_clock, h, decay_epoch(self._decay_clock, h))
        self._unit = g
        self._alpha = self.alpha * g
        self._log_prior_cache = None
        self._invalidate(None)

    def _rescale(self, shift: int) -> None:
        """Multiply every stored count by 2**shift (exact, barring underflow to zero)."""
        used = len(self._keys)
        if self._changed_rows is not None:
            self._note_rows(self._vocabulary_rows())
        self._counts[:used] = np.ldexp(self._counts[:used], shift)
        self._n_docs = np.ldexp(self._n_docs, shift)
        self._totals = np.ldexp(self._totals, shift)
        self._recount()
        self._rebuild()

    def _advance_clock(self, clock: int) -> None:
        """Move a decaying model's clock forward to ``clock``, starting a new epoch (every
        count divided by a power of two) when it crosses one."""
        h = self.half_life
        before, after = decay_epoch(self._decay_clock, h), decay_epoch(clock, h)
        self._decay_clock = clock
        if after != before:
            self._rescale(DECAY_EPOCH_BITS * (before - after))
        self._set_scale()

    def token_keys(self, x: Mapping[str, float]) -> list[tuple]:
        """The statistics keys of the tokens (or hash buckets) of ``x``."""
        return [("token", key) for key in self._encode(x)[0]]

    def add_slice_change(self, changes: Mapping[tuple, tuple[Any, Any]], old_clock: int,
                         new_clock: int) -> None:
        """A decaying sum of slices follows one slice: ``self += new - old`` for each key of
        ``changes`` (``{key: (old value, new value)}``, keyed values of the slice), the old
        values in the units of the slice's epoch at ``old_clock``, the new ones at
        ``new_clock``. The sum's clock becomes the later of its own and ``new_clock``."""
        h = self.half_life
        if h is None:
            raise RuntimeError("add_slice_change() is for a decaying model (half_life)")
        if new_clock > self._decay_clock:
            self._advance_clock(new_clock)
        mine = decay_epoch(self._decay_clock, h)
        old_shift = DECAY_EPOCH_BITS * (decay_epoch(old_clock, h) - mine)
        new_shift = DECAY_EPOCH_BITS * (decay_epoch(new_clock, h) - mine)
        values: dict[tuple, Any] = {}
        for key, (old, new) in changes.items():
            current = self.stat_value(key)
            if key == ("totals",):
                current, old, new = current or {}, old or {}, new or {}
                values[key] = {part: _shifted_sum(current.get(part), old.get(part),
                                                  new.get(part), old_shift, new_shift) or {}
                               for part in ("n_docs", "totals")}
                values[key]["decay_clock"] = self._decay_clock
            else:
                values[key] = _shifted_sum(current, old, new, old_shift, new_shift)
        self.set_stat_values(values)

    def _update_decayed(self, x: Mapping[str, float], y: str, sign: float,
                        learned_at: int | None) -> None:
        """:meth:`_update` with decay: the array path, the message's values times its
        weight; an unlearn removes what remains of the weight it was learned with."""
        keys, values = self._encode(x)
        if learned_at is not None and (
            isinstance(learned_at, bool) or not isinstance(learned_at, int | np.integer)
            or not 0 <= learned_at <= self._decay_clock
        ):
            raise ValueError(f"learned_at must be a clock in [0, {self._decay_clock}], "
                             f"got {learned_at!r}")
        rows = self._rows_creating(keys)
        column = self._column_of(y)
        if sign > 0 and learned_at is None:
            self._advance_clock(self._decay_clock + 1)
            learned_at = self._decay_clock
        elif learned_at is None:
            learned_at = self._decay_clock
        h = self.half_life
        weight = decay_weight(int(learned_at), h, decay_epoch(self._decay_clock, h))
        self._n_docs[column] = _decayed_sum(self._n_docs.item(column), sign * weight)
        self._negative_docs = int(np.count_nonzero(self._n_docs < 0))
        self._active = None
        self._message_learned(column, rows)
        if not keys:
            return
        values = self._training_values(values) * weight
        old = self._counts[rows, column]
        if sign < 0:
            if self._seen is not None:  # what expiry left of it (see unlearnable_part)
                values = np.minimum(values, np.maximum(old, 0.0))
            new = old - values
            new[np.abs(new) <= DECAY_ZERO * np.abs(old)] = 0.0
        else:
            new = old + values
        self._counts[rows, column] = new
        self._stale[rows] = True
        self._any_stale = True
        self._totals[column] = _decayed_sum(self._totals.item(column),
                                            sign * float(values.sum()))
        self._note_status_changes(rows, old, new)

    # -- the short-message path ---------------------------------------------------------------
    def _short_counts(self, x: Any, learning: bool = False) -> dict | None:
        """``x`` itself when the plain-Python path takes it: a dict (or Counter) of at most
        ``_short_limit`` tokens (str, when learning) with int counts in [1, 2**46), no
        hashing. Anything else (zeros, floats, other key types, bad input) takes the array
        path, which also raises the input errors."""
        if not isinstance(x, dict) or len(x) > self._short_limit or self.n_buckets is not None \
                or self.half_life is not None:
            return None
        for value in x.values():
            if type(value) is not int or not 0 < value < _EXACT_COUNT:
                return None
        if learning:
            for key in x:
                if type(key) is not str:
                    return None
        return x

    def _update_short(self, x: dict, y: str, sign: float) -> None:
        """:meth:`_update` for a message :meth:`_short_counts` accepted: the same arithmetic
        on lists, with one gather and one scatter of the class column."""
        index = self._index
        rows = [index.get(key, -1) for key in x]
        if -1 in rows:
            new_keys = [key for key, row in zip(x, rows, strict=True) if row < 0]
            self._key_bytes += sum(map(len, new_keys))
            self._add_rows(new_keys)
            n_columns = len(self._labels)
            self._row_counts.extend([0.0] * n_columns for _ in new_keys)
            rows = [index[key] for key in x]
        if self._any_stale:
            self._refresh(rows)
        column = self._column_of(y)
        n_docs = self._n_docs
        before = n_docs.item(column)
        n_docs[column] = after = before + sign
        if sign < 0 or self._negative_docs:
            self._negative_docs = int(np.count_nonzero(n_docs < 0))
        if (after > 0) != (before > 0):
            self._active = None  # the class appeared or disappeared
        self._message_learned(column, rows)
        if not x:
            return
        values = list(x.values()) if self._trains_on_counts() else [1] * len(x)
        # Element by element: numpy's take and put release the GIL, and with the Kafka
        # client's threads running, getting it back can cost more than the whole update.
        counts = self._counts
        row_counts = self._row_counts
        drop = self._row_cache.pop
        old = []
        new = []
        for row, value in zip(rows, values, strict=True):
            cells = row_counts[row]
            o = cells[column]
            cells[column] = n = o + sign * value
            counts[row, column] = n
            drop(row, None)
            old.append(o)
            new.append(n)
        self._totals[column] = self._totals.item(column) + sign * float(sum(values))
        nnz = self._nnz
        if sign > 0 and not self._n_negative:
            # Counts only grow and none is negative: a row changes status iff it was zero.
            for row, o in zip(rows, old, strict=True):
                if o == 0:
                    before = nnz.item(row)
                    nnz[row] = before + 1
                    if before == 0:
                        self._vocab += 1
        else:
            self._n_negative += sum(n < 0 for n in new) - sum(o < 0 for o in old)
            for row, o, n in zip(rows, old, new, strict=True):
                if (o == 0) != (n == 0):
                    before = nnz.item(row)
                    after = before + (1 if n != 0 else -1)
                    nnz[row] = after
                    self._vocab += (before == 0) - (after == 0)
        if self._tracks_updates():
            self._after_update(column, np.array(old), np.array(new))

    def _trains_on_counts(self) -> bool:
        """Whether learning adds a token's count (True) or 1 (presence)."""
        return True

    def _tracks_updates(self) -> bool:
        return type(self)._after_update is not TextModel._after_update

    def _refresh(self, rows: list[int]) -> None:
        """Copy into the row lists those of ``rows`` that the array path changed since."""
        is_stale = self._stale.item
        for row in rows:
            if is_stale(row):
                self._row_counts[row] = self._counts[row].tolist()
                self._stale[row] = False
                self._row_cache.pop(row, None)

    def _short_log_joint(self, x: dict, top_k: int | None) -> dict[str, float] | None:
        """Per-class log joint scores of a short message in plain Python (None: not here):
        the array path's arithmetic on the row lists, equal to its scores to rounding."""
        if self._n_negative or self._negative_docs:
            return None  # a partial slice: the array path reports what is wrong with it
        index_get = self._index.get
        rows = []
        values = []
        for key, value in x.items():
            row = index_get(key)
            if row is not None:
                rows.append(row)
                values.append(value)
        if self._any_stale:
            self._refresh(rows)
        if len(self._keys) != self._vocab:  # some indexed tokens have left V (unlearned)
            row_counts = self._row_counts
            kept = [i for i, row in enumerate(rows) if any(row_counts[row])]
            if len(kept) < len(rows):
                rows = [rows[i] for i in kept]
                values = [values[i] for i in kept]
        return self._short_scores(rows, values, self._active_column_list(), top_k)

    def _active_column_list(self) -> list[int]:
        """:meth:`_active_columns` as a list of ints, cached with it."""
        active = self._active_columns()
        if self._active_list_of is not active:
            self._active_list = active.tolist()
            self._active_list_of = active
        return self._active_list

    def _short_scores(self, rows: list, values: list, columns: list, top_k: int | None
                      ) -> dict[str, float] | None:
        """The class scores from the in-vocabulary rows and counts, in message order (None:
        a case this path leaves to the array path, such as a top-k selection)."""
        return None

    def _short_log_prior(self, columns: list) -> list | None:
        """log π_c in plain Python when the message counts are integers (then their sum is
        exact in any order, as numpy's is); None otherwise."""
        n_docs = self._n_docs.item
        selected = [n_docs(c) for c in columns]
        for n in selected:
            if not (n.is_integer() and 0 < n < _EXACT_COUNT):
                return None
        log_total = math.log(sum(selected))
        return [math.log(n) - log_total for n in selected]

    def _message_learned(self, column: int, rows) -> None:
        """The bookkeeping every learn or unlearn of one message into class ``column`` ends
        with, once its message count changed: the last-seen stamps of its ``rows`` (with a
        token budget), the caches derived from the counts, and the rows (and totals) the next
        commit writes."""
        if self._seen is not None:
            self._clock += 1
            self._seen[rows] = self._clock
        self._log_prior_cache = None
        self._invalidate(column)
        if self._changed_rows is not None:
            self._note_rows(rows)

    def _invalidate(self, column: int | None) -> None:
        pass

    def _combine(self, other: Model, sign: int) -> TextModel:
        self._check_same_kind(other, *self._COUNTING_OPTIONS)
        assert isinstance(other, TextModel)
        shift = 0  # the power of two that puts other's counts in this model's units
        if self.half_life is not None:
            # The sum at the later clock: each message keeps the weight of its own model's
            # clock when learned; both are put in the units of the later epoch.
            h = self.half_life
            if other._decay_clock > self._decay_clock:
                self._advance_clock(other._decay_clock)
            shift = DECAY_EPOCH_BITS * (decay_epoch(other._decay_clock, h)
                                        - decay_epoch(self._decay_clock, h))
        other_rows = np.flatnonzero(other._nnz[: len(other._keys)] > 0)
        other_columns = [c for c in range(len(other._labels))
                         if other._n_docs[c] != 0 or other._totals[c] != 0
                         or (other._counts[other_rows, c] != 0).any()]
        columns = [self._column_of(other._labels[c]) for c in other_columns]
        if other_rows.size:
            rows = self._rows_creating([other._keys[r] for r in other_rows.tolist()])
            block = other._counts[np.ix_(other_rows, other_columns)]
            if shift:
                block = np.ldexp(block, shift)
            self._counts[np.ix_(rows, columns)] += sign * block
            if self._seen is not None and other._seen is not None:
                self._seen[rows] = np.maximum(self._seen[rows], other._seen[other_rows])
            if self._changed_rows is not None:
                self._note_rows(rows)
        if self._seen is not None and other._seen is not None:
            self._clock = max(self._clock, other._clock)
        if self._changed_rows is not None:
            self._totals_changed = True
        for mine, theirs in zip(columns, other_columns, strict=True):
            self._n_docs[mine] += sign * math.ldexp(other._n_docs[theirs], shift)
            self._totals[mine] += sign * math.ldexp(other._totals[theirs], shift)
        self._recount()
        self._rebuild()
        return self

    def _recount(self) -> None:
        """Derive the bookkeeping kept beside the counts after a bulk change of them."""
        used = len(self._keys)
        # The row lists are made again on first use (_refresh), not here: most tokens are
        # rare, and a list of Python floats costs about 100 bytes a row.
        self._row_counts = [None] * used
        self._stale[:] = False
        self._stale[:used] = True
        self._any_stale = used > 0
        self._row_cache.clear()
        self._nnz[:used] = np.count_nonzero(self._counts[:used], axis=1)
        self._vocab = int(np.count_nonzero(self._nnz[:used]))
        self._n_negative = int(np.count_nonzero(self._counts[:used] < 0))
        self._negative_docs = int(np.count_nonzero(self._n_docs < 0))
        self._active = None
        self._log_prior_cache = None

    def _rebuild(self) -> None:
        self._invalidate(None)

    # -- scoring ----------------------------------------------------------------------------
    def _log_prior(self, columns: np.ndarray) -> np.ndarray:
        if self._log_prior_cache is None:
            n_docs = self._n_docs[columns]
            self._log_prior_cache = np.log(n_docs) - math.log(n_docs.sum())
        return self._log_prior_cache

    def _scoring_values(self, values: np.ndarray) -> np.ndarray:
        return values

    def _weigh(self, values: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """The weight of each scored token's term (its count, or a transform of it)."""
        return values

    def _token_scores(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Per-token, per-class log terms (shape tokens x classes) whose weighted sum scores."""
        raise NotImplementedError

    def _base_scores(self, columns: np.ndarray) -> np.ndarray:
        """The per-class score of a message before its tokens' terms (prior included)."""
        raise NotImplementedError

    def _may_leave_tokens_out(self, n_tokens: int, top_k: int | None) -> bool:
        """Whether :meth:`_select_top_k` may drop some of ``n_tokens`` scored tokens (their
        terms are then computed first)."""
        return top_k is not None and n_tokens > top_k

    def _select_top_k(self, terms: np.ndarray, top_k: int | None) -> np.ndarray | None:
        """Indices of the ``top_k`` tokens whose terms differ most between classes."""
        if top_k is None or terms.shape[0] <= top_k:
            return None
        spread = term_spreads(terms)
        return np.sort(np.argpartition(-spread, top_k - 1)[:top_k])

    def _score(self, x, top_k: int | None, want_terms: bool = False):
        columns = self._active_columns()
        keys, values = self._encode(x)
        rows, values, known = self._rows_in_vocabulary(keys, values)
        values = self._scoring_values(values)
        if not (self._n_negative or self._negative_docs):
            scored = self._score_rows(columns, known, values, rows, top_k, want_terms)
        else:  # a slice's own counts may be negative: log() gives NaN or -inf, refused below
            with np.errstate(invalid="ignore", divide="ignore"):
                scored = self._score_rows(columns, known, values, rows, top_k, want_terms)
        if not math.isfinite(scored[-1].sum()):
            raise ValueError(
                "this state has negative counts (a partial slice?): only a sum of slices "
                "can be scored"
            )
        return (keys, *scored)

    def _score_rows(self, columns, known, values, rows, top_k, want_terms):
        """Per-class log joint scores from the in-vocabulary tokens, the weight of each scored
        token's term (:meth:`_weigh`), and for a token selection (top-k) or ``want_terms`` the
        per-token terms; ``(known, chosen)`` say which of the message's keys were in V and
        which of those the selection kept (None: all)."""
        terms = chosen = None
        if want_terms or self._may_leave_tokens_out(rows.size, top_k):
            terms = self._token_scores(rows, columns)
            chosen = self._select_top_k(terms, top_k)
            if chosen is not None:
                terms, values, rows = terms[chosen], values[chosen], rows[chosen]
        values = self._weigh(values, rows, columns)
        scores = self._joint_scores(rows, values, columns)
        return columns, (known, chosen), values, terms, scores

    def _gather(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """A fresh C-contiguous (tokens x active classes) copy of the counts. The layout must
        not depend on how many inactive class columns the model holds: numpy's loops sum in
        an order that follows the strides."""
        counts = self._counts[rows]
        if columns.size != counts.shape[1]:
            counts = np.ascontiguousarray(counts[:, columns])
        return counts

    def _joint_scores(self, rows: np.ndarray, values: np.ndarray, columns: np.ndarray
                      ) -> np.ndarray:
        """log P(c) + log P(x | c) for the active classes.

        Sums go through ``einsum`` (numpy's own loops), not a BLAS dot: BLAS may round
        differently depending on memory alignment, and merged models must score bit for bit
        alike.
        """
        terms = self._token_scores(rows, columns)
        return self._base_scores(columns) + np.einsum("i,ij->j", values, terms)

    def predict_log_proba_one(self, x: Mapping[str, float], top_k: int | None = None
                              ) -> dict[str, float]:
        """log P(class | x) for every known class ({} before any class is learned).

        ``top_k`` (default: the model's ``top_k`` option) scores the message as if it held
        only its ``top_k`` most discriminative tokens.
        """
        short = self._short_counts(x)
        if self._active_columns().size == 0:
            if short is None:
                self._encode(x)  # still reject bad input
            return {}
        if top_k is None:
            top_k = self.top_k
        if short is not None:
            scores = self._short_log_joint(short, top_k)
            # Not finite: a slice whose counts are inconsistent without being negative (a
            # class's token seen in more messages than the class has, after unlearning what
            # it never learned); the array path below refuses it as it refuses negative ones.
            if scores is not None and math.isfinite(sum(scores.values())):
                temperature = self.temperature
                return log_normalise({label: score / temperature
                                      for label, score in scores.items()})
        _, columns, _, _, _, scores = self._score(x, top_k)
        return log_normalise(dict(zip((self._labels[c] for c in columns),
                                      (scores / self.temperature).tolist(), strict=True)))

    def explain(self, x: Mapping[str, float], top_k: int | None = None) -> dict[str, Any]:
        """How each token of ``x`` moved the decision.

        Returns ``{"prediction", "log_proba", "base", "tokens", "ignored"}``: ``base[c]`` is
        the class's score before the message's tokens (log prior, plus for Bernoulli the
        absent-word term of the whole vocabulary), ``tokens[t][c]`` the log term token ``t``
        adds for class ``c`` (strongest tokens first), and ``ignored`` the tokens outside the
        vocabulary or left out by top-k. ``base[c] + sum_t tokens[t][c]`` is class ``c``'s log
        joint score, which ``log_proba`` normalises after dividing it by ``temperature``.
        """
        if self._active_columns().size == 0:
            self._encode(x)
            return {"prediction": None, "log_proba": {}, "base": {}, "tokens": {},
                    "ignored": sorted(map(str, x))}
        all_keys, columns, (known, chosen), values, terms, scores = self._score(
            x, self.top_k if top_k is None else top_k, want_terms=True)
        base = self._base_scores(columns)
        keys = all_keys if known is None else [
            k for k, kept in zip(all_keys, known.tolist(), strict=True) if kept]
        if chosen is not None:
            keys = [keys[i] for i in chosen.tolist()]
        labels = [self._labels[c] for c in columns]
        contributions = values[:, None] * terms
        order = np.argsort(-(contributions.max(axis=1) - contributions.min(axis=1)),
                           kind="stable").tolist() if len(keys) else []
        names = self._names_of_keys(x)
        tokens = {names.get(keys[i], keys[i]): dict(zip(labels, contributions[i].tolist(),
                                                         strict=True)) for i in order}
        log_proba = log_normalise(dict(zip(labels, (scores / self.temperature).tolist(),
                                           strict=True)))
        used = set(keys)
        ignored = sorted(str(t) for t in x if self._bucket_of(t) not in used)
        return {
            "prediction": self.decide(log_proba),
            "log_proba": log_proba,
            "base": dict(zip(labels, base.tolist(), strict=True)),
            "tokens": tokens,
            "ignored": ignored,
        }

    def explanation_unavailable(self) -> str | None:
        """Why :meth:`explain_log_odds` cannot split this model's scores (None: it can)."""
        return None

    def explain_log_odds(self, x: Mapping[str, float], k: int = 10) -> dict[str, Any] | None:
        """Why ``x`` gets its prediction: the log-odds of the predicted class against the
        runner-up, split exactly into a prior term and one contribution per token.

        Returns None before two classes are known, else a dict: ``label`` (the prediction),
        ``versus`` (the runner-up), ``log_odds`` (log P(label | x) − log P(versus | x)),
        ``prior`` (log π_label − log π_versus), for Bernoulli ``absent_words`` (the difference
        of Σ_{j∈V} log(1 − φ_j|c), the score of the words the message lacks), ``tokens`` (the
        ``k`` largest contributions by magnitude, as ``[token, contribution]`` pairs; positive
        for the predicted class), ``rest`` (the sum of the other tokens' contributions),
        ``n_tokens`` (tokens that were scored) and ``n_ignored`` (tokens outside the
        vocabulary or left out by ``min_spread`` / ``top_k``, which contribute nothing). With
        ``class_offsets`` the label is the decision's (:meth:`decide`), ``versus`` the class
        highest after its offset, and ``offset`` (only then) is offset[label] −
        offset[versus]: the label won because ``log_odds + offset >= 0``, and ``log_odds``
        may be negative (a label less probable than ``versus``). Every
        term is divided by ``temperature``, as the scores are, so

            prior + absent_words + Σ tokens + rest = log_odds   (to rounding).

        A token's contribution is its weighted term's difference between the two classes:
        for the multinomial model w_t (log θ_t|label − log θ_t|versus), w_t its count or its
        weight after idf and length normalisation; for Bernoulli
        log(φ_t|label / (1 − φ_t|label)) − log(φ_t|versus / (1 − φ_t|versus)).

        >>> from streamnb.models import MultinomialNB
        >>> model = MultinomialNB()
        >>> model.learn_many([{"cheap": 2, "pills": 1}, {"meeting": 1}], ["spam", "ham"])
        >>> why = model.explain_log_odds({"cheap": 2, "meeting": 1})
        >>> why["label"], why["versus"], [(t, round(c, 4)) for t, c in why["tokens"]]
        ('spam', 'ham', [('cheap', 1.3863), ('meeting', -1.0986)])
        >>> # cheap: 2 log((3/6) / (1/4)), meeting: log((1/6) / (2/4)); equal priors
        >>> terms = why["prior"] + sum(c for _, c in why["tokens"]) + why["rest"]
        >>> round(terms, 12) == round(why["log_odds"], 12)
        True
        """
        reason = self.explanation_unavailable()
        if reason is not None:
            raise ValueError(reason)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        if self._active_columns().size < 2:
            self._encode(x)  # still reject bad input
            return None
        all_keys, columns, (known, chosen), values, terms, scores = self._score(
            x, self.top_k, want_terms=True)
        labels = [self._labels[c] for c in columns]
        temperature = self.temperature
        log_proba = log_normalise(dict(zip(labels, (scores / temperature).tolist(),
                                           strict=True)))
        label = self.decide(log_proba)
        offsets = self.class_offsets
        if offsets:  # the class the decision beat by the least: the highest after its offset
            versus = max(sorted(c for c in log_proba if c != label),
                         key=lambda c: log_proba[c] + offsets.get(c, 0.0))
        else:
            versus = max(sorted(c for c in log_proba if c != label), key=log_proba.__getitem__)
        first, second = labels.index(label), labels.index(versus)
        keys = all_keys if known is None else [
            key for key, kept in zip(all_keys, known.tolist(), strict=True) if kept]
        if chosen is not None:
            keys = [keys[i] for i in chosen.tolist()]
        names_of = self._names_of_keys(x)
        names = [str(names_of.get(key, key)) for key in keys]
        # the same operations as explain(): each class's weighted term, then their difference
        contributions = (values * terms[:, first] - values * terms[:, second]) / temperature
        listed = _strongest(contributions, names, k)
        shown = set(listed)
        log_prior = self._log_prior(columns)
        base = self._base_scores(columns)
        why: dict[str, Any] = {
            "label": label,
            "versus": versus,
            "log_odds": log_proba[label] - log_proba[versus],
            "prior": float(log_prior[first] - log_prior[second]) / temperature,
        }
        if offsets:  # the decision is log_odds + offset >= 0 (the offsets are not divided)
            why["offset"] = offsets.get(label, 0.0) - offsets.get(versus, 0.0)
        if self.kind == "bernoulli":
            absent = (base[first] - log_prior[first]) - (base[second] - log_prior[second])
            why["absent_words"] = float(absent) / temperature
        values_list = contributions.tolist()
        why["tokens"] = [[names[i], values_list[i]] for i in listed]
        why["rest"] = math.fsum(c for i, c in enumerate(values_list) if i not in shown)
        why["n_tokens"] = len(keys)
        used = set(keys)
        why["n_ignored"] = sum(self._bucket_of(token) not in used for token in x)
        return why

    def _bucket_of(self, token):
        return token if self.n_buckets is None else stable_bucket(token, self.n_buckets)

    def _names_of_keys(self, x: Mapping[str, float]) -> dict:
        """With hashing, bucket -> the message's tokens in it ("a|b" on a collision)."""
        if self.n_buckets is None:
            return {}
        names: dict[int, list[str]] = {}
        for token in x:
            names.setdefault(stable_bucket(token, self.n_buckets), []).append(token)
        return {bucket: "|".join(sorted(tokens)) for bucket, tokens in names.items()}

    def _log_theta(self, label: str) -> tuple[list, np.ndarray]:
        raise NotImplementedError

    def weights(self, c1: str, c2: str) -> dict:
        """The weight table: token -> log(P(token | c1) / P(token | c2)) over the vocabulary.

        With hashing (``n_buckets``) the keys are bucket numbers (int).
        """
        for label in (c1, c2):
            if label not in self._column or self._n_docs[self._column[label]] <= 0:
                raise ValueError(f"unknown class {label!r}; known classes: {self.classes}")
        keys, first = self._log_theta(c1)
        _, second = self._log_theta(c2)
        return dict(zip(keys, (first - second).tolist(), strict=True))

    def _vocabulary_rows(self) -> np.ndarray:
        return np.flatnonzero(self._nnz[: len(self._keys)] > 0)

    # -- state ------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """A JSON-compatible, canonical snapshot (sorted classes and vocabulary, no zero rows)."""
        rows = self._vocabulary_rows()
        keys = [self._keys[r] for r in rows.tolist()]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        rows = rows[order] if len(order) else rows
        columns = [c for c in range(len(self._labels))
                   if self._n_docs[c] != 0 or self._totals[c] != 0
                   or (self._counts[rows, c] != 0).any()]
        columns.sort(key=self._labels.__getitem__)
        state = {
            "model": self.kind,
            "version": STATE_VERSION,
            "options": self.options(),
            "classes": [self._labels[c] for c in columns],
            "n_docs": json_numbers(self._n_docs[columns]),
            "totals": json_numbers(self._totals[columns]),
            "vocabulary": [keys[i] for i in order],
            "counts": [json_numbers(self._counts[rows, c]) for c in columns],
        }
        if self._seen is not None:
            state["clock"] = self._clock
            state["last_seen"] = self._seen[rows].tolist()
        if self.half_life is not None:
            state["decay_clock"] = self._decay_clock
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> TextModel:
        """Rebuild a model from :meth:`to_state`'s output; raises StateError if it is unusable."""
        model = cls._empty_from_state(state)
        classes = state.get("classes")
        vocabulary = state.get("vocabulary")
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise StateError("corrupt state: 'classes' must be a list of str")
        if len(set(classes)) != len(classes):
            raise StateError("corrupt state: duplicate classes")
        key_type = str if model.n_buckets is None else int
        if not isinstance(vocabulary, list) or not all(
            type(k) is key_type for k in vocabulary
        ):
            raise StateError(f"corrupt state: 'vocabulary' must be a list of {key_type.__name__}")
        if len(set(vocabulary)) != len(vocabulary):
            raise StateError("corrupt state: duplicate vocabulary entries")
        if model.n_buckets is not None and any(not 0 <= k < model.n_buckets for k in vocabulary):
            raise StateError("corrupt state: a bucket is outside range(n_buckets)")
        n_docs = state_array(state, "n_docs", (len(classes),))
        totals = state_array(state, "totals", (len(classes),))
        counts = state_array(state, "counts", (len(classes), len(vocabulary)))
        for label in classes:
            model._column_of(label)
        model._n_docs[:] = n_docs
        model._totals[:] = totals
        rows = model._rows_creating(list(vocabulary))
        model._counts[rows] = counts.T
        if "last_seen" in state or "clock" in state:
            model._load_last_seen(state, rows)
        if model.half_life is not None:
            model._decay_clock = _decay_clock_of(state.get("decay_clock", 0), "decay_clock")
            model._set_scale()
        model._recount()
        model._check_loaded()
        model._rebuild()
        return model

    def _check_loaded(self) -> None:
        pass

    # -- last-seen stamps and token expiry --------------------------------------------------
    @property
    def tracks_last_seen(self) -> bool:
        return self._seen is not None

    @property
    def clock(self) -> int:
        """Learn and unlearn steps taken (0 unless :meth:`track_last_seen`)."""
        return self._clock

    def track_last_seen(self) -> None:
        """Stamp every row a learn or unlearn step writes with the step's number (the
        ``clock``), so :meth:`expire` can drop the tokens seen least recently. The stamps are
        statistics like the counts: in ``to_state`` (``"clock"``, ``"last_seen"``) and in the
        keyed values (see :mod:`streamnb.models._keyed`). Tokens already held get stamp 0.
        Unlearning then removes only what is still there (:meth:`unlearnable_part`)."""
        if self._seen is None:
            self._seen = np.zeros(self._counts.shape[0], dtype=np.int64)

    def last_seen(self, token: Any) -> int | None:
        """The stamp of ``token`` (a bucket number with hashing); None if not in V."""
        row = self._index.get(self._bucket_of(token) if self.n_buckets is not None
                              and not isinstance(token, int) else token)
        if self._seen is None or row is None or not self._nnz[row]:
            return None
        return int(self._seen[row])

    def _load_last_seen(self, state: Mapping[str, Any], rows: np.ndarray) -> None:
        clock = state.get("clock")
        seen = state_array(state, "last_seen", (rows.size,))
        if isinstance(clock, bool) or not isinstance(clock, int) or clock < 0 or not (
            np.array_equal(seen, np.rint(seen)) and (seen >= 0).all() and (seen <= clock).all()
        ):
            raise StateError("corrupt state: 'clock' and 'last_seen' must be integers with "
                             "0 <= last_seen <= clock")
        self.track_last_seen()
        self._seen[rows] = seen.astype(np.int64)
        self._clock = clock

    def unlearnable_part(self, x: Mapping[str, float], y: str) -> dict:
        """What of ``x`` unlearning it as ``y`` can remove: each token's training value, at
        most its count in class ``y`` (tokens expired since ``x`` was learned hold less, or
        nothing). For a message learned and not expired, that is all of ``x``.

        With hashing a bucket is kept whole or left out (kept when its count covers the
        message's value for it)."""
        keys, values = self._encode(x)
        column = self._column.get(y)
        if column is None or not keys:
            return {}
        values = self._training_values(values)
        rows = self._lookup(keys)
        present = rows >= 0
        held = np.zeros(len(rows))  # (indexing only the present rows: an expiry may leave none)
        held[present] = self._counts[rows[present], column]
        kept = np.minimum(held, values)
        if self.n_buckets is not None:
            whole = {k for k, v, h in zip(keys, values.tolist(), held.tolist(), strict=True)
                     if h >= v}
            return {t: c for t, c in x.items() if c and self._bucket_of(t) in whole}
        if self._trains_on_counts():  # ints stay ints, so the short path still takes them
            return {k: int(c) if c.is_integer() else c
                    for k, c in zip(keys, kept.tolist(), strict=True) if c > 0}
        return {k: x[k] for k, c in zip(keys, kept.tolist(), strict=True) if c > 0}

    def expiry_order(self) -> list:
        """The vocabulary in the order :meth:`expire` drops it: the least recently seen
        first (smallest stamp); among tokens of the same stamp, the rarest first (smallest
        total count over the classes); then by token (or bucket) in sorted order."""
        if self._seen is None:
            raise RuntimeError("expiry_order() needs track_last_seen()")
        return self._expiry_prefix(self._vocab)

    def _expiry_prefix(self, n: int) -> list:
        """The first ``n`` tokens of :meth:`expiry_order`."""
        return list(map(self._keys.__getitem__, self._expiry_rows(n).tolist()))

    def _expiry_rows(self, n: int) -> np.ndarray:
        """The rows of the first ``n`` tokens of :meth:`expiry_order`. Only the tokens that
        can be among them (by stamp and total count, up to the ties of the n-th) are sorted
        by token, most of an expiry's sorting when it takes all of them."""
        rows = self._vocabulary_rows()
        seen = self._seen[rows]
        total = np.abs(self._counts[rows]).sum(axis=1)
        if 0 < n < rows.size:
            by_stamp = np.lexsort((total, seen))
            last = by_stamp[n - 1]
            candidates = (seen < seen[last]) | ((seen == seen[last]) & (total <= total[last]))
            rows, seen, total = rows[candidates], seen[candidates], total[candidates]
        rank = _key_ranks(list(map(self._keys.__getitem__, rows.tolist())))
        return rows[np.lexsort((rank, total, seen))[:n]]

    def expire(self, max_tokens: int, keep: int | None = None,
               old_values: bool = True) -> Mapping[tuple, Any]:
        """If the vocabulary holds more than ``max_tokens`` tokens, remove tokens in
        :meth:`expiry_order` until ``keep`` remain (default ``max_tokens``; SpamAssassin
        keeps max(75 %, 100,000) of ``bayes_expiry_max_db_size``).

        A removed token's counts are set to zero exactly as ``set_stat_values`` would (the
        per-class totals lose them too, Bernoulli's absent-word sums follow), so the model
        equals one that never counted them; other tokens' counts are untouched. Removed
        tokens are listed by ``changed_keys()`` (their value is None: tombstones), and their
        rows are freed. Returns ``{key: value before}`` of every key it changed (the tokens
        and ``("totals",)``), for a sum of slices to follow; {} when within budget.
        ``old_values=False``: the same keys, each None (the values are not read: a slice
        that is the whole model has no sum to follow, and the gather is a fifth of the
        expiry's CPU), in a read-only mapping that makes no key tuple until asked."""
        if self._seen is None:
            raise RuntimeError("expire() needs track_last_seen()")
        keep = max_tokens if keep is None else keep
        if not 0 <= keep <= max_tokens:
            raise ValueError(f"expire needs 0 <= keep <= max_tokens, got {keep}, {max_tokens}")
        if self._vocab <= max_tokens:
            return {}
        rows = self._expiry_rows(self._vocab - keep)
        doomed = list(map(self._keys.__getitem__, rows.tolist()))
        from streamnb.models._keyed import TOTALS_KEY

        if old_values:
            keys = list(zip(repeat("token"), doomed))
            before = dict(zip(keys, self.stat_values(keys), strict=True))  # one gather
            before[TOTALS_KEY] = self.stat_value(TOTALS_KEY)
        else:
            before = _ExpiredKeys(doomed)
        removed = self._counts[rows].sum(axis=0)
        tracking = self._changed_rows
        self._zero_rows(rows)
        self._totals -= removed
        self._invalidate(None)
        self._log_prior_cache = None
        if tracking is not None:
            self._totals_changed = True
            self._expired_keys.update(doomed)
        self._drop_empty_rows()
        return before

    def _drop_empty_rows(self) -> None:
        """Free the rows of tokens outside V (expired or unlearned to zero): the index, the
        arrays and the row lists are rebuilt without them. Row numbers change, so the rows
        changed since mark_changes() are renumbered."""
        used = len(self._keys)
        kept = np.flatnonzero(self._nnz[:used] > 0)
        if kept.size == used:
            return
        keys = list(map(self._keys.__getitem__, kept.tolist()))
        # the freed keys' characters (fewer than the kept ones, and just read by the expiry)
        freed_bytes = (sum(map(len, map(self._keys.__getitem__,
                                        np.flatnonzero(self._nnz[:used] == 0).tolist())))
                       if self.n_buckets is None else 0)
        changed = None
        if self._changed_rows is not None:
            renumber = np.full(used, -1, dtype=np.intp)
            renumber[kept] = np.arange(kept.size)
            old = np.fromiter(self._changed_rows, dtype=np.intp, count=len(self._changed_rows))
            new = renumber[old]
            # A changed row that left V: its key must still be written (as a tombstone).
            self._expired_keys.update(map(self._keys.__getitem__, old[new < 0].tolist()))
            changed = set(new[new >= 0].tolist())
        capacity = max(1024, kept.size)
        counts = np.zeros((capacity, self._counts.shape[1]))
        counts[: kept.size] = self._counts[kept]
        self._counts = counts
        if self._seen is not None:
            seen = np.zeros(capacity, dtype=np.int64)
            seen[: kept.size] = self._seen[kept]
            self._seen = seen
        self._nnz = np.zeros(capacity, dtype=np.int32)
        self._stale = np.zeros(capacity, dtype=bool)
        self._keys = keys
        self._index = dict(zip(keys, range(len(keys)), strict=True))
        if self.n_buckets is None:
            self._key_bytes -= freed_bytes
        self._lookup_cache = None
        self._recount()
        self._rebuild()
        if changed is not None:
            self._changed_rows = changed


class _ExpiredKeys(Mapping):
    """``{("token", t): None for t in tokens} | {("totals",): None}`` (an expiry without old
    values), its key tuples made only when iterated: the daemon's commit reads its length."""

    __slots__ = ("_tokens", "_set")

    def __init__(self, tokens: list) -> None:
        self._tokens = tokens
        self._set: set | None = None

    def __len__(self) -> int:
        return len(self._tokens) + 1

    def __iter__(self):
        from streamnb.models._keyed import TOTALS_KEY

        yield from zip(repeat("token"), self._tokens)
        yield TOTALS_KEY

    def __getitem__(self, key: Any) -> None:
        from streamnb.models._keyed import TOTALS_KEY

        if key == TOTALS_KEY:
            return None
        if self._set is None:
            self._set = set(self._tokens)
        if type(key) is tuple and len(key) == 2 and key[0] == "token" and key[1] in self._set:
            return None
        raise KeyError(key)


#: The most bytes :func:`_key_ranks` gives an array of fixed-width byte strings (the longest
#: token's UTF-8 times the tokens); beyond it, a hostile token's length could cost gigabytes.
_MAX_KEY_ARRAY_BYTES = 64 << 20


def _key_ranks(keys: list) -> np.ndarray:
    """Each key's rank in the sorted order of ``keys`` (distinct tokens, or buckets).

    Tokens are sorted as their UTF-8 bytes in a numpy array of fixed-width byte strings: the
    byte order of UTF-8 is the order of code points, Python's order of str (``surrogatepass``
    keeps that for lone surrogates too), and the sort runs in C instead of comparing str
    objects (a third of the time on an expiry's 40,000 tokens). numpy pads such strings with
    NUL bytes and ignores trailing ones when comparing, so keys holding a NUL, or an array
    over ``_MAX_KEY_ARRAY_BYTES``, are sorted as objects."""
    rank = np.empty(len(keys), dtype=np.int64)
    if not keys:
        return rank
    if type(keys[0]) is int:  # hash buckets: ints in range(n_buckets)
        column = np.array(keys, dtype=np.int64)
    else:
        encoded = [key.encode("utf-8", "surrogatepass") for key in keys]
        width = max(map(len, encoded))
        if width * len(encoded) <= _MAX_KEY_ARRAY_BYTES and b"\0" not in b"".join(encoded):
            column = np.array(encoded, dtype=f"S{max(width, 1)}")
        else:
            column = np.array(keys, dtype=object)
    rank[np.argsort(column, kind="stable")] = np.arange(len(keys))
    return rank


def _decayed_sum(old: float, change: float) -> float:
    """``old + change``, zero when that leaves less than DECAY_ZERO of ``old`` (rounding)."""
    new = old + change
    return 0.0 if abs(new) <= DECAY_ZERO * abs(old) else new


def _plain_counts(value: Any) -> dict:
    if value is None:
        return {}
    if isinstance(value, Mapping) and "counts" in value and "seen" in value:
        value = value["counts"]
    return value


def _shifted_sum(current: Any, old: Any, new: Any, old_shift: int, new_shift: int
                 ) -> dict | None:
    """``current - old * 2**old_shift + new * 2**new_shift`` for {label: count} values (None,
    or with last-seen stamps, allowed); a count cancelled to rounding is zero."""
    out = dict(_plain_counts(current))
    scale = dict.fromkeys(out, 0.0)
    for value, shift, sign in ((old, old_shift, -1.0), (new, new_shift, 1.0)):
        for label, count in _plain_counts(value).items():
            term = math.ldexp(float(count), shift)
            out[label] = out.get(label, 0.0) + sign * term
            scale[label] = max(scale.get(label, 0.0), abs(term))
    kept = {label: count for label, count in sorted(out.items())
            if abs(count) > DECAY_ZERO * max(scale[label], abs(_plain_counts(current).get(
                label, 0.0)))}
    return kept or None


def _decay_clock_of(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateError(f"corrupt state: {where!r} must be an int >= 0, got {value!r}")
    return value


def _strongest(contributions: np.ndarray, names: list[str], k: int) -> list[int]:
    """Indices of the ``k`` largest ``contributions`` by magnitude, strongest first; equal
    magnitudes in name order (so the listing never depends on the message's token order)."""
    magnitude = np.abs(contributions)
    n = magnitude.size
    if k < n:
        kth = np.partition(magnitude, n - k)[n - k] if k else math.inf
        candidates = np.flatnonzero(magnitude >= kth).tolist()
    else:
        candidates = list(range(n))
    candidates.sort(key=lambda i: (-magnitude.item(i), names[i]))
    return candidates[:k]
