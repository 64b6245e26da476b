"""The prequential batch step of :class:`MultinomialNB`: in C where it is built, else in numpy.

Predicting then learning each message of a batch in turn costs a Python step per message.
Every step here returns, per message, what ``predict_log_proba_one`` returns: log P(class | x)
of every class known then, each the normalised score itself (score - log Z, never the log of
an exponentiated probability), so it stays finite where the probability underflows to 0.0.
Probabilities are made from them (``probabilities_of``), by whoever needs them.

**The C step** (``streamnb.models._step``, built by the set-up) is that loop itself, run in C:
one pass reads the batch (``_step.intern``: each message's counts, each distinct token looked
up once in the model's token table, :class:`_TokenTable`), the tokens to index get their rows
as the loop would give them, and ``_step.step`` predicts then learns each message in turn,
writing the model's arrays in place; :func:`_after_native` then keeps the Python-side
bookkeeping (stale row lists, caches, changed rows) in step. A message holding a token whose
spread is within :data:`SPREAD_BAND` of ``min_spread`` is handed back to the loop.

**A batch given as token numbers** (:func:`prequential_numbered`; the daemon's prepare
process numbers its messages' tokens with a :class:`NumberingTable` and sends numbers instead
of dicts): :class:`TokenNumbers` makes from them the batch ``_step.intern`` makes from the
dicts, bit for bit, keeping each number's model row between batches, so that only the tokens
it holds no row for are looked up; the C step then runs as above.

**The numpy step** (``STREAMNB_PURE_PYTHON=1``, or no compiler) reconstructs instead every count
a prediction reads from prefix sums over the batch: the count of token k in class c *before*
message i is the stored count plus the sum of the increments of the earlier labelled messages
that hold k (an exclusive cumulative sum over k's occurrences in message order); the per-class
message counts and totals and the vocabulary size before message i are exclusive cumulative
sums over the messages. From those the scores are the arithmetic of the loop, vectorised over
all occurrences, segment-summed per message. The learning is then applied to the counts in one
scatter.

Messages of any length take either: those the loop scores on the short path (at most
``_short_limit`` distinct tokens, ``MultinomialNB._short_scores``) and the longer ones it
scores on the array path (``_score_rows``, ``_weigh``, ``_joint_scores``). Where the two paths'
expressions differ (the idf term, the min_spread filter) each message gets its own path's.

The stored counts are integers below 2**45 and a batch adds less than 2**45 to them (else it
takes the loop), so every sum is exact in any order: the counts, and the state, are bit for bit
those of the loop. The scores agree to rounding (the order of the weighted sums; numpy's log
against libm's), except at one discontinuity: the ``min_spread`` filter. A token whose spread
falls within rounding of the threshold has it recomputed with the expression of its message's
path (numpy step) or its message stepped by the loop (C step), so the same tokens are kept.
"""

from __future__ import annotations

import math
import os
import weakref
from collections import defaultdict
from itertools import chain, count, groupby, repeat
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from streamnb.models._text import _EXACT_COUNT

try:
    from streamnb.models import _step as _native
except ImportError:  # an install without a compiler: the numpy step, same results
    _native = None

if TYPE_CHECKING:
    from streamnb.models.multinomial import MultinomialNB

#: Spreads this close to ``min_spread`` are recomputed exactly (numpy and libm logs differ by
#: an ulp or so; terms are below 100 in magnitude, so their error is below 1e-13).
SPREAD_BAND = 1e-9
#: The stored counts and message counts, and what one batch adds to them, stay below this:
#: every sum of them is then exact.
_EXACT_LIMIT = _EXACT_COUNT / 2
#: Set to 1, the numpy step runs even where the C one (``streamnb.models._step``) is built.
PURE_PYTHON_ENV = "STREAMNB_PURE_PYTHON"


def native() -> bool:
    """Whether the batch step runs in C: the extension is built and ``STREAMNB_PURE_PYTHON``
    does not ask for pure Python."""
    return _native is not None and os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")


def takes(model: MultinomialNB) -> bool:
    """Whether the vectorised step can compute what the loop computes with this model's
    options and state: not those the short path leaves to the array path (complement,
    Robinson, top-k, hashing, the negative counts of a slice)."""
    return not (model.complement or model.combining != "nb" or model.top_k is not None
                or model.n_buckets is not None or model._n_negative or model._negative_docs
                or model._tracks_updates())


def prequential_log_proba_many(model: MultinomialNB, xs: list, ys: list
                               ) -> list[dict[str, float]]:
    """``Model.prequential_log_proba_many`` for a model :func:`takes`: the runs of examples
    :func:`vectorisable` accepts take the vectorised step, each other example the loop."""
    batch = _read(model, xs, ys)
    if batch is not None:  # usually the whole batch at once
        return _step(model, batch, xs, ys)
    vectorised = [vectorisable(x, y) for x, y in zip(xs, ys, strict=True)]
    others = [i for i, ok in enumerate(vectorised) if not ok]
    # before anything is learned (the vectorisable ones are valid inputs)
    model._check_examples([xs[i] for i in others], [ys[i] for i in others])
    log_probas: list[dict[str, float]] = []
    start = 0
    for in_step, run in groupby(vectorised):
        stop = start + len(list(run))
        run_xs, run_ys = xs[start:stop], ys[start:stop]
        if in_step:
            batch = _InternedBatch.read(model, run_xs, run_ys) if native() else _Batch(
                model, run_xs, _values(run_xs))
            assert batch is not None  # examples vectorisable accepts
            log_probas += _step(model, batch, run_xs, run_ys)
        else:
            log_probas += model._prequential_loop(run_xs, run_ys)
        start = stop
    return log_probas


def vectorisable(x, y) -> bool:
    """Whether the vectorised step takes the example: a dict of ``str`` tokens with ``int``
    counts in [1, 2**46), of any length, and a ``str`` label or none. The others (float, bool
    or zero counts, other token types, bad inputs) go to the loop. (The check of a whole batch,
    :meth:`_Batch.read`, takes the types of the tokens the model knows for granted: they equal
    its ``str`` keys.)"""
    return (isinstance(x, dict) and (y is None or isinstance(y, str))
            and all(type(value) is int and 0 < value < _EXACT_COUNT for value in x.values())
            and all(type(key) is str for key in x))


def _values(xs: list[dict]) -> np.ndarray:
    """The counts of every message, concatenated in message order."""
    n = sum(map(len, xs))
    return np.fromiter(chain.from_iterable(map(dict.values, xs)), dtype=np.float64, count=n)


class _Batch:
    """The batch's token occurrences, one per (message, token) in message order: their counts,
    which of the batch's distinct tokens each is (``ids``, numbered by first occurrence), and
    their rows (-1: a token the model has not indexed).

    Each distinct token is looked up in the model's index once per batch: a mail's tokens are
    mostly repeats of earlier mails' (500 SpamAssassin mails hold ~170,000 occurrences of
    ~20,000 tokens), and a lookup in the large index costs several cache misses, one in the
    batch's small table far fewer."""

    def __init__(self, model: MultinomialNB, xs: list[dict], values: np.ndarray):
        self.values = values
        self.lengths = np.fromiter(map(len, xs), dtype=np.intp, count=len(xs))
        id_of = defaultdict(count().__next__)
        self.ids = np.fromiter(map(id_of.__getitem__, chain.from_iterable(xs)), dtype=np.intp,
                               count=values.size)
        self.distinct = list(id_of)
        self.distinct_rows = np.fromiter(map(model._index.get, self.distinct, repeat(-1)),
                                         dtype=np.intp, count=len(self.distinct))
        self.rows = self.distinct_rows[self.ids]
        self.unknown_ids = np.flatnonzero(self.distinct_rows < 0)

    @classmethod
    def read(cls, model: MultinomialNB, xs: list, ys: list) -> _Batch | None:
        """The batch, if :func:`vectorisable` accepts every example (checked over the whole
        batch at once); None otherwise. A token the model knows equals a ``str`` (the model
        holds no other): only the others' types are checked."""
        if not all(isinstance(x, dict) for x in xs) or not all(
                y is None or isinstance(y, str) for y in ys):
            return None
        values = list(chain.from_iterable(map(dict.values, xs)))
        if not set(map(type, values)) <= {int}:
            return None
        try:
            array = np.fromiter(values, dtype=np.float64, count=len(values))
        except OverflowError:
            return None
        # Rounding to float64 is monotonic and 2**46 is a float: the range check is exact.
        if array.size and not (array.min() > 0 and array.max() < _EXACT_COUNT):
            return None
        batch = cls(model, xs, array)
        if not set(map(type, _pick(batch.distinct, batch.unknown_ids))) <= {str}:
            return None
        return batch


class _InternedBatch:
    """The batch as the C step reads it (``_step.intern``): per occurrence, in message order,
    its count (``values``), its distinct token (``ids``) and that token's row (``rows``); per
    message its length; the tokens the batch will index (``new_keys``, learned by a labelled
    message, in the loop's order) and the rows they will get, from ``n_indexed`` on."""

    def __init__(self, lengths: np.ndarray, values: np.ndarray, ids: np.ndarray,
                 distinct: list, distinct_rows: np.ndarray, new_keys: list, n_indexed: int):
        self.lengths, self.values, self.ids = lengths, values, ids
        self.distinct, self.distinct_rows = distinct, distinct_rows
        self.new_keys, self.n_indexed = new_keys, n_indexed
        self.rows = distinct_rows[ids]

    @classmethod
    def read(cls, model: MultinomialNB, xs: list, ys: list) -> _InternedBatch | None:
        """The batch, if :func:`vectorisable` accepts every example; None otherwise."""
        if not (_str_or_none(ys) and all(map(isinstance, xs, repeat(dict)))):
            return None
        n = sum(map(len, xs))
        ids = np.empty(n, dtype=np.int64)
        values = np.empty(n)
        lengths = np.empty(len(xs), dtype=np.int64)
        n_indexed = len(model._keys)
        read = _native.intern(list(xs), list(ys), _token_table(model), model._keys, ids,
                              values, lengths)
        if read is None:
            return None
        distinct, rows, new_keys = read
        return cls(lengths, values, ids, distinct, np.frombuffer(rows, np.int64), new_keys,
                   n_indexed)

    def known_rows(self) -> np.ndarray:
        """The rows of the distinct tokens the model indexed before the batch."""
        rows = self.distinct_rows
        return rows[(rows >= 0) & (rows < self.n_indexed)]


class TokenNumbers:
    """A numbering of tokens made elsewhere (the daemon's prepare process, which sends each
    message's token numbers instead of its dict) and the model rows of those numbers, for the
    step's read of a batch given as numbers (:func:`prequential_numbered`).

    ``tokens[n]`` is the token numbered ``n`` (:meth:`extend` appends the new ones, in their
    numbers' order; :meth:`restart` begins a new numbering). ``rows[n]`` is the row of token
    ``n`` in ``model._keys`` where it is known (-1: not looked up, or not held): rows are kept
    only for one model and one row list, which only grows (expiry makes a new one), so a row
    once found stays right until either changes, when all are looked up again. (The model is
    held weakly, so that a revoked one is not kept alive; the list is held, so that no other
    list can take its place in memory and pass for it.)"""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.tokens: list[str] = []
        self._forget_rows()

    def _forget_rows(self, size: int = 1 << 12) -> None:
        self._model: weakref.ref | None = None
        self._keys: list | None = None
        self.rows = np.full(size, -1, dtype=np.int64)
        # per number, scratch of a batch (left at _NOWHERE): its first occurrence, its rank
        self.first = np.full(size, _NOWHERE, dtype=np.int64)
        self.rank = np.zeros(size, dtype=np.int64)

    def extend(self, new_tokens: list[str]) -> None:
        self.tokens += new_tokens
        if len(self.tokens) > self.rows.size:
            size = 2 * len(self.tokens)
            self.rows = _grown(self.rows, size, -1)
            self.first = _grown(self.first, size, _NOWHERE)
            self.rank = _grown(self.rank, size, 0)

    def batch(self, model: MultinomialNB, numbers: np.ndarray, counts: np.ndarray,
              lengths: np.ndarray, ys: list) -> _InternedBatch:
        """The batch as ``_step.intern`` reads it from the messages' dicts: per occurrence its
        distinct token (numbered by first occurrence in the batch), its count and row; the
        tokens a labelled message will index, by first labelled occurrence, and their rows
        from ``len(model._keys)`` on. ``numbers`` and ``counts`` are the messages' tokens
        in their dicts' order, concatenated; ``lengths`` the messages' numbers of tokens."""
        if self._keys is not model._keys or self._model is None or self._model() is not model:
            self._forget_rows(self.rows.size)
            self._model, self._keys = weakref.ref(model), model._keys
        # each number's first occurrence without a sort: a scatter of the positions' minimum
        occurrences = np.arange(numbers.size)
        first = self.first
        np.minimum.at(first, numbers, occurrences)
        distinct = numbers[first[numbers] == occurrences]  # in the order first seen
        first[distinct] = _NOWHERE
        self.rank[distinct] = np.arange(distinct.size)
        ids = self.rank[numbers]
        rows = self.rows[distinct]
        unknown = np.flatnonzero(rows < 0)
        tokens = self.tokens
        if unknown.size:  # not held when last looked for, or never looked for
            found = table_rows(model, [tokens[n] for n in distinct[unknown].tolist()])
            rows[unknown] = found
            self.rows[distinct[unknown]] = found
        n_indexed = len(model._keys)
        labelled = np.fromiter((y is not None for y in ys), dtype=bool, count=len(ys))
        candidates = ids[np.repeat(labelled, lengths) & (rows[ids] < 0)]
        new_ids, where = np.unique(candidates, return_index=True)
        new_ids = new_ids[np.argsort(where, kind="stable")]  # by first labelled occurrence
        rows[new_ids] = n_indexed + np.arange(new_ids.size)
        return _InternedBatch(lengths, np.asarray(counts, dtype=np.float64), ids, None, rows,
                              [tokens[n] for n in distinct[new_ids].tolist()], n_indexed)


_NOWHERE = np.iinfo(np.int64).max


def _grown(array: np.ndarray, size: int, fill: int) -> np.ndarray:
    grown = np.full(size, fill, dtype=array.dtype)
    grown[:array.size] = array
    return grown


class NumberingTable:
    """A numbering of tokens by first sight, for another process to read a batch by
    (:class:`TokenNumbers`): the daemon's prepare process numbers its messages' tokens,
    through a token table of its own as the C step's read looks a model's up (``_step.intern``:
    each distinct token of a batch once, fetched ahead). Needs the C step (:func:`native`)."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self._table = _TokenTable(self.tokens)

    def number(self, xs: list) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray] | None:
        """``(new_tokens, numbers, counts, lengths)`` of the messages ``xs``: each occurrence's
        token number and count (float64), in message and dict order, the tokens numbered now
        (from ``len(tokens)`` on, in their numbers' order) and the messages' numbers of
        tokens. None, with nothing numbered, when a message is not what the C step reads (see
        :func:`vectorisable`)."""
        n = sum(map(len, xs))
        ids, counts = np.empty(n, dtype=np.int64), np.empty(n)
        lengths = np.empty(len(xs), dtype=np.int64)
        tokens = self.tokens
        read = _native.intern(xs, [None] * len(xs), self._table.slots, tokens, ids, counts,
                              lengths)
        if read is None:
            return None
        distinct, rows, _ = read
        numbers_of_distinct = np.frombuffer(rows, np.int64).copy()
        unknown = np.flatnonzero(numbers_of_distinct < 0)
        new_tokens = _pick(distinct, unknown)
        start = len(tokens)
        tokens += new_tokens
        numbers_of_distinct[unknown] = np.arange(start, len(tokens))
        self._table = _table_of(self._table, tokens)
        return new_tokens, numbers_of_distinct[ids], counts, lengths


def numbered_step_takes(model) -> bool:
    """Whether :func:`prequential_numbered` computes ``model.prequential_log_proba_many`` (the
    C step of a :class:`MultinomialNB` that :func:`takes`, without decay)."""
    from streamnb.models.multinomial import MultinomialNB

    return (isinstance(model, MultinomialNB) and model.half_life is None and native()
            and takes(model))


def prequential_numbered(model: MultinomialNB, numbering: TokenNumbers, numbers: np.ndarray,
                         counts: np.ndarray, lengths: np.ndarray, xs, ys: list
                         ) -> list[dict[str, float]]:
    """``model.prequential_log_proba_many(xs, ys)`` for a model :func:`numbered_step_takes`,
    with each message's tokens given as their numbers in ``numbering`` and their counts (ints
    in [1, 2**46)), in the dicts' order: no dict is read. ``xs`` (a sequence making each dict
    when indexed) serves the messages the loop steps (a spread at the threshold, or counts
    that are not exact); labels are ``str`` or None."""
    if not _str_or_none(ys):
        raise TypeError("labels must be str or None")
    return _step(model, numbering.batch(model, numbers, counts, lengths, ys), xs, ys)


class _TokenTable:
    """The C step's look-up table of a model's tokens (see ``_step.c``): ``slots`` over the
    rows of ``keys`` (the model's list) up to ``n_rows``, by the str hashes of the process
    that built it (``seed``), at most half of them used."""

    def __init__(self, keys: list):
        room = len(keys) + max(len(keys) // 2, 1 << 11)  # grown by half, as the counts
        self.keys = keys
        self.slots = np.zeros(1 << (2 * room - 1).bit_length(), dtype=np.int64)
        self.n_rows = 0
        self.seed = hash(_SEED)

    def serves(self, keys: list) -> bool:
        """Whether it holds the rows of ``keys`` (or of a prefix of it), in this process, with
        room for all of them."""
        return (self.keys is keys and self.n_rows <= len(keys) and self.seed == hash(_SEED)
                and 2 * len(keys) <= self.slots.size)


_SEED = "streamnb token table"


def _str_or_none(ys: list) -> bool:
    """Whether every label is a ``str`` or None: their types looked at once (a batch holds
    two or three), each label only where one is of another type (a subclass of ``str``)."""
    return set(map(type, ys)) <= _LABEL_TYPES or all(
        y is None or isinstance(y, str) for y in ys)


_LABEL_TYPES = frozenset({str, type(None)})


def _token_table(model: MultinomialNB) -> np.ndarray:
    """The model's token table, with every row it has: built on the first batch, after the
    rows were renumbered (expiry), when full, or in another process (a pickled model); else
    the rows indexed since the last batch are added."""
    table = model._token_table = _table_of(model._token_table, model._keys)
    return table.slots


def _table_of(table: _TokenTable | None, keys: list) -> _TokenTable:
    """``table`` holding every row of ``keys``: the rows added to it since, or a new table
    where it is None or cannot serve them (another list, full, another process)."""
    if table is None or not table.serves(keys):
        table = _TokenTable(keys)
    if table.n_rows < len(keys):
        _native.table_insert(table.slots, keys, table.n_rows)
        table.n_rows = len(keys)
    return table


def table_rows(model: MultinomialNB, tokens: list) -> np.ndarray | None:
    """The rows of ``tokens`` (-1: not held) through the C step's token table, or None (a
    token not exactly a ``str``, or no C step): for the tokens a changelog commit reads while
    the index dict still lacks the rows the C step added (``TextModel._index``)."""
    if _native is None:
        return None
    rows = np.empty(len(tokens), dtype=np.int64)
    if not _native.table_rows(_token_table(model), model._keys, tokens, rows):
        return None
    return rows


def _read(model: MultinomialNB, xs: list, ys: list) -> _Batch | _InternedBatch | None:
    """The batch as the step that will run reads it (None: not every example is
    :func:`vectorisable`)."""
    if native():
        return _InternedBatch.read(model, xs, ys)
    return _Batch.read(model, xs, ys)


def _pick(items: list, positions: np.ndarray) -> list:
    """``[items[i] for i in positions]``."""
    if positions.size < 2:
        return [items[i] for i in positions.tolist()]
    return list(itemgetter(*positions.tolist())(items))


def _state_is_exact(model: MultinomialNB, rows: np.ndarray, added: float) -> bool:
    """Whether the message counts, the totals and the stored counts of ``rows`` are integers
    below the limit, and the batch adds less than it (``added``), so the batch's sums of them
    are exact in any order. (The per-class figures are a few floats: read as such, not with
    a numpy call each, which cost more than the arithmetic.)"""
    if added >= _EXACT_LIMIT:
        return False
    n_docs, totals = model._n_docs.tolist(), model._totals.tolist()
    if n_docs and not (
        all(map(_integral, n_docs)) and all(map(_integral, totals))
        and max(n_docs) < _EXACT_LIMIT and max(totals) < _EXACT_LIMIT
        # a class without messages holds no counts, so the vocabulary ignores its column
        and not any(docs == 0 and total != 0 for docs, total in zip(n_docs, totals,
                                                                    strict=True))
    ):
        return False
    if not rows.size:
        return True
    counts = model._counts[rows]
    return bool(np.array_equal(counts, np.rint(counts)) and counts.max() < _EXACT_LIMIT)


def _integral(figure: float) -> bool:
    """``figure == rint(figure)``, as numpy has it: an integer or an infinity."""
    return figure.is_integer() or math.isinf(figure)


def _columns_and_rows(model: MultinomialNB, batch: _Batch, ys: list,
                      message: np.ndarray) -> np.ndarray:
    """Create the class columns and token rows the batch's labelled messages will need (zero
    counts, in the order the loop would create them: by first labelled occurrence); return
    each message's column (-1: unlabelled) and fill in the rows of ``batch``."""
    column = _class_columns(model, ys)
    if batch.unknown_ids.size:
        unknown = np.flatnonzero(batch.rows < 0)
        learned = unknown[column[message[unknown]] >= 0]
        if learned.size:
            # the distinct tokens to create, by first labelled occurrence
            first = np.full(len(batch.distinct), batch.ids.size)
            np.minimum.at(first, batch.ids[learned], learned)
            created = np.flatnonzero(first < batch.ids.size)
            new_ids = created[np.argsort(first[created])]
            new_keys = _pick(batch.distinct, new_ids)
            start = len(model._keys)
            model._key_bytes += sum(map(len, new_keys))
            model._add_rows(new_keys)
            # learned below, hence stale: their row lists are made when the short path reads
            # them
            model._row_counts.extend([None] * len(new_keys))
            batch.distinct_rows[new_ids] = np.arange(start, start + new_ids.size)
            batch.rows[unknown] = batch.distinct_rows[batch.ids[unknown]]
    return column


def _group_order(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """The stable sort of ``ids`` (occurrences in message order): grouped by token, each group
    in message order. numpy sorts 16-bit keys stably by radix, in linear time."""
    if n_ids <= 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")
    return np.argsort(ids, kind="stable")


def _class_columns(model: MultinomialNB, ys: list) -> np.ndarray:
    """Each message's class column (-1: unlabelled), the columns of classes first seen in
    this batch created in the order the loop creates them."""
    known_column = model._column.get
    column = np.array([-1 if y is None else known_column(y, -1) for y in ys], dtype=np.intp)
    for i in np.flatnonzero(column < 0).tolist():  # a class first seen in this batch
        if ys[i] is not None:
            column[i] = model._column_of(ys[i])
    return column


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """Along axis 0: the sum of the entries before each one."""
    return np.cumsum(values, axis=0) - values


def _step(model: MultinomialNB, batch: _Batch | _InternedBatch, xs: list, ys: list
          ) -> list[dict[str, float]]:
    """The batch step over examples :func:`vectorisable` accepts: in C where it is built,
    else in numpy (see the module doc); the loop where the counts are not exact integers."""
    added = float(batch.values.sum()) if model.counts_occurrences else float(batch.values.size)
    if isinstance(batch, _InternedBatch):
        if not _state_is_exact(model, batch.known_rows(), added):
            return model._prequential_loop(xs, ys)
        return _native_step(model, batch, xs, ys)
    if not _state_is_exact(model, batch.distinct_rows[batch.distinct_rows >= 0], added):
        return model._prequential_loop(xs, ys)
    return _numpy_step(model, batch, xs, ys)


def _native_step(model: MultinomialNB, batch: _InternedBatch, xs: list, ys: list
                 ) -> list[dict[str, float]]:
    """The loop in C (``_step.step``), message by message: the same state bit for bit, the
    same log-probabilities to rounding. It hands back the rare message holding a token whose
    spread is within :data:`SPREAD_BAND` of ``min_spread``, which the loop itself steps."""
    column = _class_columns(model, ys)
    if not model._counts.flags.c_contiguous:  # (it always is: the C step writes it in place)
        model._counts = np.ascontiguousarray(model._counts)
    if batch.new_keys:
        if len(model._keys) != batch.n_indexed:
            raise RuntimeError("the model indexed tokens between reading and stepping a batch")
        model._key_bytes += sum(map(len, batch.new_keys))
        model._add_rows(batch.new_keys, index_now=False)  # the table finds them
        # stale from the start (the loop may read them before the step learns them): their
        # row lists are made when the short path reads them
        model._row_counts.extend([None] * len(batch.new_keys))
        model._stale[batch.n_indexed:len(model._keys)] = True
        model._any_stale = True
    options = (float(model.alpha), float(model.min_spread), SPREAD_BAND,
               float(model.temperature), float(model.spread_weight),
               int(model.repeated_words == "count"),
               int(not model.counts_occurrences), int(model.tf == "log"), int(model.idf),
               int(model.length_norm), int(model._short_limit))
    offsets = np.concatenate(([0], np.cumsum(batch.lengths)))
    log_probas: list[dict[str, float]] = []
    start = 0
    while start < len(xs):
        done, vocab, clock, stepped = _native.step(
            batch.rows, batch.lengths, batch.values, column, model._counts, model._nnz,
            model._n_docs, model._totals, model._seen, model._labels, model._vocab,
            model._clock, start, options)
        log_probas += stepped
        model._vocab, model._clock = vocab, clock
        _after_native(model, batch, column, offsets, start, done)
        if done < len(xs):  # a spread at the threshold: the loop decides it
            log_probas += model._prequential_loop(xs[done:done + 1], ys[done:done + 1])
            done += 1
        start = done
    return log_probas


def _after_native(model: MultinomialNB, batch: _Batch, column: np.ndarray,
                  offsets: np.ndarray, start: int, stop: int) -> None:
    """The bookkeeping beside the counts after messages ``start:stop`` were learned in C:
    the rows they wrote become stale (their row lists and cached logs are remade when the
    short path reads them), and the caches of the priors and the class columns are dropped."""
    learned = np.flatnonzero(column[start:stop] >= 0) + start
    if not learned.size:
        return
    in_learned = np.repeat(column[start:stop] >= 0, batch.lengths[start:stop])
    written = np.zeros(batch.distinct_rows.size, dtype=bool)
    written[batch.ids[offsets[start]:offsets[stop]][in_learned]] = True
    changed_rows = batch.distinct_rows[written]  # one row per distinct token
    model._array_rows_changed(changed_rows)
    if model._changed_rows is not None:
        model._note_rows(changed_rows)
    model._active = None
    model._log_prior_cache = None
    model._lookup_cache = None
    for c in sorted(set(column[learned].tolist())):
        model._invalidate(c)


def _numpy_step(model: MultinomialNB, batch: _Batch, xs: list, ys: list
                ) -> list[dict[str, float]]:
    """The vectorised step over examples :func:`vectorisable` accepts (see the module doc)."""
    train_values = batch.values if model.counts_occurrences else np.ones_like(batch.values)
    n_messages = len(xs)
    message = np.repeat(np.arange(n_messages), batch.lengths)  # of each occurrence
    column = _columns_and_rows(model, batch, ys, message)
    n_columns = len(model._labels)
    labelled = column >= 0

    # Per message: messages, counted tokens and the vocabulary size before it.
    learned_docs = np.zeros((n_messages, n_columns))
    learned_docs[np.flatnonzero(labelled), column[labelled]] = 1.0
    per_message = np.bincount(message, weights=train_values, minlength=n_messages)
    learned_totals = learned_docs * per_message[:, None]
    n_docs = model._n_docs + _exclusive_cumsum(learned_docs)
    totals = model._totals + _exclusive_cumsum(learned_totals)

    # Per occurrence of a token learned before or during the batch, in (row, message) order;
    # each row's occurrences form a group. Class-major arrays (classes x occurrences), so
    # that each class is one contiguous run.
    kept = np.flatnonzero(batch.rows >= 0)
    order = kept[_group_order(batch.ids[kept], len(batch.distinct))]
    rows = batch.rows[order]
    message = message[order]
    n_kept = order.size
    new_group = np.empty(n_kept, dtype=bool)
    new_group[:1] = True
    np.not_equal(rows[1:], rows[:-1], out=new_group[1:])
    starts = np.flatnonzero(new_group)
    ends = np.append(starts[1:], n_kept)[: starts.size] - 1
    group = np.cumsum(new_group) - 1  # of each occurrence
    group_rows = rows[starts]
    stored = model._counts[group_rows].T  # classes x groups
    occurrence_column = column[message]
    learned_values = np.where(occurrence_column >= 0, train_values[order], 0.0)
    counts = np.empty((n_columns, n_kept))  # N_kc before each occurrence's message
    group_sums = np.empty((n_columns, starts.size))  # what the batch adds to each row
    for c in range(n_columns):
        increments = np.where(occurrence_column == c, learned_values, 0.0)
        running = np.cumsum(increments)
        before_group = running[starts] - increments[starts]
        group_sums[c] = running[ends] - before_group
        # the sum restarts at each group, from the stored count
        np.subtract(running, increments, out=counts[c])
        counts[c] += (stored[c] - before_group)[group]

    # A token enters V at its first learned occurrence, if it had no count before the batch.
    learned_here = np.flatnonzero(occurrence_column >= 0)
    firsts = learned_here[np.r_[True, group[learned_here[1:]] != group[learned_here[:-1]]]
                          ] if learned_here.size else learned_here
    entering = firsts[model._nnz[group_rows[group[firsts]]] == 0]
    entered = np.bincount(message[entering], minlength=n_messages)
    vocab = model._vocab + _exclusive_cumsum(entered)

    # The loop scores a message longer than the short path's limit on the array path.
    on_array_path = batch.lengths > model._short_limit
    log_probas = _log_probabilities(model, batch.values[order], on_array_path[message],
                                    message, counts, n_docs, totals, vocab)

    # Learn the whole batch: the counts in one scatter, then the bookkeeping beside them.
    if model._seen is not None:
        # The loop's stamps: labelled message i is learn step clock + (labelled up to i).
        step = model._clock + np.cumsum(labelled)
        np.maximum.at(model._seen, rows[learned_here], step[message[learned_here]])
        model._clock += int(labelled.sum())
    if n_kept:
        changed = group_sums.any(axis=0)
        changed_rows = group_rows[changed]
        model._counts[changed_rows] += group_sums[:, changed].T
        _after_bulk_learning(model, changed_rows)
        if model._changed_rows is not None and changed_rows.size:  # (it marks the totals)
            model._note_rows(changed_rows)
    model._n_docs += learned_docs.sum(axis=0)
    if model._changed_rows is not None and labelled.any():
        model._totals_changed = True
    model._totals += learned_totals.sum(axis=0)
    model._active = None
    model._log_prior_cache = None
    model._lookup_cache = None
    for c in sorted(set(column[labelled].tolist())):
        model._invalidate(c)
    return log_probas


def _after_bulk_learning(model: MultinomialNB, changed_rows: np.ndarray) -> None:
    """Counts of ``changed_rows`` only grew: update V and the per-row caches (the row lists
    become stale, as after the array path's update)."""
    before = model._nnz[changed_rows]
    after = np.count_nonzero(model._counts[changed_rows], axis=1)
    model._nnz[changed_rows] = after
    model._vocab += int(np.count_nonzero((before == 0) & (after > 0)))
    model._array_rows_changed(changed_rows)


def _log_probabilities(model: MultinomialNB, values: np.ndarray, on_array_path: np.ndarray,
                       message: np.ndarray, counts: np.ndarray, n_docs: np.ndarray,
                       totals: np.ndarray, vocab: np.ndarray) -> list[dict[str, float]]:
    """What ``predict_log_proba_one`` returns for each message, from the counts before it:
    per occurrence ``counts`` (classes x occurrences), ``message`` and whether the loop
    scores that message on the array path (else the short path), per message ``n_docs``,
    ``totals`` and ``vocab``."""
    n_occurrences = message.size
    n_messages = n_docs.shape[0]
    active = n_docs > 0
    alpha = model.alpha
    with np.errstate(divide="ignore", invalid="ignore"):  # inactive columns, masked below
        log_prior = np.log(n_docs) - np.log(np.where(active, n_docs, 0.0).sum(axis=1))[:, None]
        log_denominators = np.log(totals + alpha * vocab[:, None])
    log_counts = np.log(counts + alpha)
    df = counts.sum(axis=0)
    scored = df > 0  # in V before the message (no count is negative)
    spread = None
    if (model.min_spread or model.spread_weight) and n_occurrences:
        # max - min over the active classes of log(N_kc + α) - log(N_c + α|V|)
        every_class_active = bool(active.all())
        highest = np.full(n_occurrences, -np.inf)
        lowest = np.full(n_occurrences, np.inf)
        for c in range(counts.shape[0]):
            terms = log_counts[c] - log_denominators[:, c][message]
            if every_class_active:
                np.maximum(highest, terms, out=highest)
                np.minimum(lowest, terms, out=lowest)
            else:
                active_here = active[:, c][message]
                np.maximum(highest, np.where(active_here, terms, -np.inf), out=highest)
                np.minimum(lowest, np.where(active_here, terms, np.inf), out=lowest)
        with np.errstate(invalid="ignore"):  # inf - inf: a token nothing holds, not scored
            spread = highest - lowest
        if model.min_spread:
            near = np.flatnonzero(scored & (np.abs(spread - model.min_spread) < SPREAD_BAND))
            for i in near.tolist():
                exact_spread = _array_spread if on_array_path[i] else _short_spread
                spread[i] = exact_spread(model, counts[:, i], totals[message[i]],
                                         int(vocab[message[i]]), active[message[i]])
            scored &= spread >= model.min_spread
    kept = np.flatnonzero(scored)
    message = message[kept]
    log_counts = log_counts[:, kept]
    weights = values[kept] if model.repeated_words == "count" else np.ones(kept.size)
    if model.tf == "log":
        weights = np.log1p(weights)
    if model.idf:
        n_learned = np.where(active, n_docs, 0.0).sum(axis=1)
        log_n = np.log(1.0 + n_learned) + 1.0
        df = df[kept]
        idf = log_n[message] - np.log(1.0 + df)  # the short path's log(1 + N) - log(1 + df)
        array_path = np.flatnonzero(on_array_path[kept])
        if array_path.size:  # the array path's log((1 + N) / (1 + df))
            idf[array_path] = np.log((1.0 + n_learned[message[array_path]])
                                     / (1.0 + df[array_path])) + 1.0
        weights = weights * np.maximum(idf, 0.0)
    if model.spread_weight and kept.size:
        weights = weights * spread[kept] ** model.spread_weight
    if model.length_norm:
        norm = np.sqrt(np.bincount(message, weights=weights * weights, minlength=n_messages))
        divisor = norm[message]
        weights = np.where(divisor > 0, weights / np.where(divisor > 0, divisor, 1.0), weights)
    weight = np.bincount(message, weights=weights, minlength=n_messages)
    sums = np.zeros(n_docs.shape)  # per message and class: Σ_k w_k log(N_kc + α)
    for c in range(n_docs.shape[1]):
        sums[:, c] = np.bincount(message, weights=weights * log_counts[c],
                                 minlength=n_messages)
    has_terms = np.bincount(message, minlength=n_messages) > 0
    with np.errstate(divide="ignore", invalid="ignore"):  # messages without a class
        scores = np.where(has_terms[:, None],
                          (log_prior - weight[:, None] * log_denominators) + sums, log_prior)
        scores = np.where(active, scores / model.temperature, -np.inf)
        top = scores.max(axis=1, initial=-np.inf)
        finite_top = np.where(np.isfinite(top), top, 0.0)[:, None]
        shifted = scores - finite_top
        # log_normalise's (s - top) - log Σ exp(s - top)
        log_proba = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        # one class is certain (log_normalise's 0.0), even where its score is not finite
        certain = (active.sum(axis=1) == 1)[:, None]
        log_proba = np.where(certain, 0.0, log_proba)
    return _as_dicts(model, log_proba, active)


def _short_spread(model: MultinomialNB, counts: np.ndarray, totals: np.ndarray, vocab: int,
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


def _array_spread(model: MultinomialNB, counts: np.ndarray, totals: np.ndarray, vocab: int,
                  active: np.ndarray) -> float:
    """A token's spread exactly as the array path computes it (``_token_scores`` then
    ``_select_top_k``: numpy logs of the active columns, max - min)."""
    columns = np.flatnonzero(active)
    terms = (np.log(counts[columns][None, :] + model.alpha)
             - np.log(totals[columns] + model.alpha * vocab))
    return float(terms.max(axis=1)[0] - terms.min(axis=1)[0])


def _as_dicts(model: MultinomialNB, values: np.ndarray, active: np.ndarray
              ) -> list[dict[str, float]]:
    """One dict per message (row of ``values``, messages x class columns) over every one of
    its active classes, in column order (as the loop's); an inactive class is one the model
    had not learned then, not one whose value underflowed."""
    n_columns = active.shape[1]
    if not n_columns:
        return [{} for _ in range(values.shape[0])]
    out: list = [None] * values.shape[0]
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
        for i, row in zip(members.tolist(), values[np.ix_(members, columns)].tolist(),
                          strict=True):
            out[i] = dict(zip(names, row, strict=True))
    return out
