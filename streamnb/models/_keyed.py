"""Statistics as keyed values: what changed since a mark, and setting a key's value exactly.

A model's sufficient statistics can be seen as a table of keys, each with a JSON-compatible
value, such that the model is a function of the table alone. That is what lets a daemon keep a
model in a compacted Kafka topic (a record per key holding its **full current value**), write
only the keys a batch changed, and rebuild or update a model from such records idempotently.

Keys are tuples:

* ``("token", t)``: the per-class counts of token (or hash bucket) ``t`` of a text model, as
  ``{label: count}`` with the non-zero counts only;
* ``("totals",)``: a text model's per-class message counts and count totals,
  ``{"n_docs": {label: n}, "totals": {label: s}}`` (non-zero entries);
* ``("model",)``: the whole state of a model with no finer keys (GDA: its statistics are a few
  d × d matrices, changed together by every message).

A value of ``None`` means the key is absent (all zeros): a tombstone in the changelog.

A text model that tracks last-seen stamps (``track_last_seen()``, needed by token expiry)
writes a token's value as ``{"counts": {label: count}, "seen": n}`` (n: the model's clock when a
step last wrote the token) and adds ``"clock": n`` to the totals, so the stamps travel with the
counts and every reader of the records holds the same stamps. A model that does not track them
reads such values for their counts (and ignores the stamps); one that does reads a plain value
as stamp 0 (seen before anything it remembers).

The protocol (on :class:`~streamnb.models._base.Model`):

``mark_changes()``
    start (or restart) remembering which keys change; ``changed_keys()`` lists the keys
    written since (learning, unlearning, merging, setting), in no particular order. A key
    written and written back (learn then unlearn) is still listed: its value is simply the
    same as before.
``stat_keys()``, ``stat_value(key)``
    every key with a value, and a key's current value.
``set_stat_values({key: value})``
    give keys their values, exactly (the counts are integers in float64, so nothing rounds);
    keys not mentioned keep theirs.

A text model also says the same in tokens, for a changelog commit that reads hundreds of
thousands of them (the changelog falls back to the keys for a model without them):
``changed_tokens()`` is ``changed_keys()`` as the changed tokens (in its order) and the other
keys; ``token_values(tokens)`` is ``[stat_value(("token", t)) for t in tokens]``. And in arrays,
made from the model's rows with no token looked up: ``changed_table()``, the changed tokens
with their counts (``token_table``'s columns); ``vocabulary_table()``, every token's, by last
seen; ``changed_token_count()``, how many tokens changed.

>>> from streamnb.models import make_model
>>> slice_ = make_model("multinomial", alpha=1.0, repeated_words="count")
>>> slice_.mark_changes()
>>> slice_.learn_one({"win": 2, "cash": 1}, "spam")
>>> sorted(slice_.changed_keys())
[('token', 'cash'), ('token', 'win'), ('totals',)]
>>> slice_.stat_value(("token", "win")), slice_.stat_value(("totals",))
({'spam': 2.0}, {'n_docs': {'spam': 1.0}, 'totals': {'spam': 3.0}})
>>> copy = make_model("multinomial", alpha=1.0, repeated_words="count")
>>> copy.set_stat_values({k: slice_.stat_value(k) for k in slice_.stat_keys()})
>>> copy.to_state() == slice_.to_state()
True
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from typing import Any

import numpy as np

from streamnb.models._base import StateError

__all__ = ["MODEL_KEY", "TOTALS_KEY", "add_values", "replace_part", "split_seen", "token_key"]

TOTALS_KEY: tuple = ("totals",)
MODEL_KEY: tuple = ("model",)


def token_key(token: Any) -> tuple:
    return ("token", token)


def split_seen(value: Any, key: Any) -> tuple[Any, int | None]:
    """A token value's counts and its last-seen stamp (None: a plain ``{label: count}``)."""
    if isinstance(value, Mapping) and "seen" in value and "counts" in value and len(value) == 2:
        seen = value["seen"]
        if isinstance(seen, bool) or not isinstance(seen, int) or seen < 0:
            raise StateError(f"corrupt statistics value for {key!r}: bad last-seen stamp")
        return value["counts"], seen
    return value, None


def _counts(value: Any, key: Any) -> dict[str, float]:
    """``value`` as ``{label: float count}`` (None: no counts); StateError names ``key``."""
    if value is None:
        return {}
    if key != TOTALS_KEY and isinstance(value, Mapping) and "seen" in value:
        value = split_seen(value, key)[0]
    if not isinstance(value, Mapping):
        raise StateError(f"corrupt statistics value for {key!r}: expected {{label: count}}")
    out = {}
    for label, count in value.items():
        kind = type(count)
        if type(label) is not str or kind not in (float, int):
            if not isinstance(label, str):
                raise StateError(
                    f"corrupt statistics value for {key!r}: expected {{label: count}}")
            if isinstance(count, bool) or not isinstance(count, int | float):
                raise StateError(
                    f"corrupt statistics value for {key!r}: {count!r} is not a number")
        out[label] = float(count)
    return out


def add_values(key: tuple, value: Any, change: Any, sign: float = 1.0) -> Any:
    """``value`` plus ``sign`` times ``change``, for two values of the text-model ``key``
    (None is zero); the result is None when every count is zero.

    >>> add_values(("token", "a"), {"spam": 2.0}, {"spam": 2.0, "ham": 1.0}, -1.0)
    {'ham': -1.0}
    """
    if key == TOTALS_KEY:
        value = value or {}
        change = change or {}
        parts = {
            part: add_values(("token", part), value.get(part), change.get(part), sign)
            for part in ("n_docs", "totals")
        }
        parts = {part: counts or {} for part, counts in parts.items()}
        return parts if any(parts.values()) else None
    total = _counts(value, key)
    for label, count in _counts(change, key).items():
        total[label] = total.get(label, 0.0) + sign * count
    kept = {label: count for label, count in sorted(total.items()) if count != 0}
    return _with_seen(kept or None, value, change)


def _with_seen(counts: Any, *values: Any) -> Any:
    """``counts`` with the latest stamp of ``values`` when ``values[0]`` (the sum's value)
    carries one: a sum of slices stamps a token with its most recent slice's stamp."""
    if counts is None or split_seen(values[0], None)[1] is None:
        return counts
    stamps = [s for s in (split_seen(v, None)[1] for v in values) if s is not None]
    return {"counts": counts, "seen": max(stamps)}


def replace_part(key: tuple, total: Any, old: Any, new: Any) -> Any:
    """``total - old + new`` for three values of the text-model ``key`` (None is zero): a sum
    of slices after one slice's ``key`` went from ``old`` to ``new``. Exact for integer
    counts, in any order.

    >>> replace_part(("token", "a"), {"spam": 5.0, "ham": 1.0}, {"spam": 2.0}, {"ham": 2.0})
    {'ham': 3.0, 'spam': 3.0}
    """
    if key == TOTALS_KEY:
        total, old, new = total or {}, old or {}, new or {}
        parts = {part: replace_part(("token", part), total.get(part), old.get(part),
                                    new.get(part)) or {} for part in ("n_docs", "totals")}
        return parts if any(parts.values()) else None
    out = _counts(total, key)
    for label, count in _counts(old, key).items():
        out[label] = out.get(label, 0.0) - count
    for label, count in _counts(new, key).items():
        out[label] = out.get(label, 0.0) + count
    counts = {label: count for label, count in sorted(out.items()) if count != 0} or None
    return _with_seen(counts, total, new)


#: ``token_values`` groups rows by which labels they count (a bit each) while there are few
#: labels and each group has rows enough to pay for its numpy calls; else a row at a time.
_MAX_PATTERN_LABELS = 62
_ROWS_PER_PATTERN = 16
#: Rows noted changed at once up to which they go into the set without the mask first.
_NOTED_DIRECTLY = 256


def _count_dicts(names: list[str], table: list[list[float]]) -> list[dict[str, float]]:
    """``[dict(zip(names, row)) for row in table]``; for one or two labels (most models) as
    dict displays, which build a dict several times faster than ``dict(zip(...))``."""
    if len(names) == 1:
        (a,) = names
        return [{a: x} for (x,) in table]
    if len(names) == 2:
        a, b = names
        return [{a: x, b: y} for x, y in table]
    return list(map(dict, map(zip, repeat(names), table)))


class KeyedTextStatistics:
    """The keyed view of a :class:`~streamnb.models._text.TextModel`'s counts (a mixin).

    Change tracking costs nothing until :meth:`mark_changes` is first called: the update
    paths add the rows they write to ``_changed_rows`` only when it is a set.
    """

    _changed_rows: set | None
    _totals_changed: bool

    def mark_changes(self) -> None:
        self._changed_rows = set()
        self._totals_changed = False
        self._expired_keys = set()

    def changed_keys(self) -> list[tuple]:
        if self._changed_rows is None:
            raise RuntimeError("changed_keys() before mark_changes(): nothing is tracked")
        tokens, others = self.changed_tokens()
        return [*map(token_key, tokens), *others]

    def changed_tokens(self) -> tuple[list, list[tuple]]:
        """``changed_keys()`` as the changed tokens themselves (in its order) and the other
        changed keys: a changelog commit reads thousands of tokens, and a key tuple each is
        made only to be taken apart again."""
        tokens, _ = self._changed_token_rows()
        return tokens, [TOTALS_KEY] if self._totals_changed else []

    def _changed_token_rows(self) -> tuple[list, np.ndarray]:
        """The changed tokens, those of the changed rows (in the changed set's order) then
        the expired ones not among them, and their rows (-1: not held); distinct tokens,
        neither hashed into a set nor looked up but the expired."""
        if self._changed_rows is None:
            raise RuntimeError("changed_keys() before mark_changes(): nothing is tracked")
        changed = self._changed_rows
        rows = np.fromiter(changed, dtype=np.intp, count=len(changed))
        tokens = list(map(self._keys.__getitem__, rows.tolist()))
        if self._expired_keys:
            # tokens whose rows were freed (expired): written as tombstones unless learned
            # since (then a changed row's token already)
            get = self._index.get
            gone = [(token, row) for token in self._expired_keys
                    if (row := get(token, -1)) < 0 or row not in changed]
            if gone:
                tokens.extend(token for token, _ in gone)
                rows = np.concatenate([rows, np.array([row for _, row in gone],
                                                      dtype=np.intp)])
        return tokens, rows

    def changed_token_count(self) -> int:
        """``len(changed_tokens()[0])``, without making the list: a commit that rewrites the
        whole slice (when it changed as many tokens as the slice holds) needs only the count."""
        if self._changed_rows is None:
            raise RuntimeError("changed_keys() before mark_changes(): nothing is tracked")
        rows = self._changed_rows
        if not self._expired_keys:
            return len(rows)  # (the index is not read: see TextModel._index)
        get = self._index.get
        # an expired token learned again since is a changed row's token already
        return len(rows) + sum(1 for token in self._expired_keys
                               if (row := get(token)) is None or row not in rows)

    def changed_other_keys(self) -> list[tuple]:
        """The changed keys that are not tokens (``changed_tokens()[1]``)."""
        if self._changed_rows is None:
            raise RuntimeError("changed_keys() before mark_changes(): nothing is tracked")
        return [TOTALS_KEY] if self._totals_changed else []

    def _note_rows(self, rows) -> None:
        """Called by the update paths with the rows they wrote (when tracking).

        A batch step writes ~20,000 rows, most of them noted already by an earlier batch
        since the last commit: those are dropped first with :meth:`_noted_mask` (one numpy
        gather) and only the others become ints and go into the set. Adding a member a set
        holds leaves it as it was, so the set, and the order a commit lists its tokens in,
        are those of adding every row. A message's few rows go to the set directly."""
        if isinstance(rows, np.ndarray):
            if rows.size > _NOTED_DIRECTLY:
                noted = self._noted_mask()
                rows = rows[~noted[rows]]
                noted[rows] = True
            rows = rows.tolist()
        self._changed_rows.update(rows)
        self._totals_changed = True

    def _noted_mask(self) -> np.ndarray:
        """Per row of the count array, whether ``_changed_rows`` holds it: True only where
        it does (the set only grows in place; ``mark_changes`` and an expiry's renumbering
        make another), False where it does not or where the row went in directly. Made
        again from the set when the set is another object, extended when the array grew."""
        changed = self._changed_rows
        noted = getattr(self, "_noted", None)
        n_rows = self._counts.shape[0]
        if noted is None or getattr(self, "_noted_of", None) is not changed:
            noted = np.zeros(n_rows, dtype=bool)
            if changed:
                noted[np.fromiter(changed, dtype=np.intp, count=len(changed))] = True
            self._noted, self._noted_of = noted, changed
        elif noted.size < n_rows:
            noted = self._noted = np.concatenate([noted, np.zeros(n_rows - noted.size, bool)])
        return noted

    def stat_keys(self) -> list[tuple]:
        keys = [token_key(self._keys[row]) for row in self._vocabulary_rows().tolist()]
        if self._n_docs.any() or self._totals.any() or self._decay_clock:
            keys.append(TOTALS_KEY)
        return keys

    def stat_value(self, key: tuple) -> Any:
        labels = self._labels
        if key == TOTALS_KEY:
            n_docs = {labels[c]: n for c, n in enumerate(self._n_docs.tolist()) if n}
            totals = {labels[c]: t for c, t in enumerate(self._totals.tolist()) if t}
            seen = self._seen
            if not (n_docs or totals or (seen is not None and self._clock)
                    or self._decay_clock):
                return None
            value = {"n_docs": dict(sorted(n_docs.items())),
                     "totals": dict(sorted(totals.items()))}
            if seen is not None:
                value["clock"] = self._clock
            if self.half_life is not None:
                value["decay_clock"] = self._decay_clock
            return value
        if len(key) != 2 or key[0] != "token":
            raise KeyError(key)
        row = self._index.get(key[1])
        if row is None:
            return None
        counts = {labels[c]: n for c, n in enumerate(self._counts[row].tolist()) if n}
        if not counts:
            return None
        if self._seen is not None:
            return {"counts": dict(sorted(counts.items())), "seen": int(self._seen[row])}
        return dict(sorted(counts.items()))

    def stat_values(self, keys: list[tuple]) -> list[Any]:
        """``[self.stat_value(key) for key in keys]``, the token keys' values made by
        :meth:`token_values` (one array gather for all of them)."""
        tokens = [key[1] for key in keys if len(key) == 2 and key[0] == "token"]
        made = iter(self.token_values(tokens))
        return [next(made) if len(key) == 2 and key[0] == "token" else self.stat_value(key)
                for key in keys]

    def token_table(self, tokens: list) -> tuple[list[str], np.ndarray, np.ndarray | None]:
        """The counts of ``tokens`` as arrays, for a changelog page to encode as columns:
        the labels (sorted), a float array of a row per token and a column per label (zeros
        for a token without counts) and, with last-seen stamps, their stamps (int64; 0 for a
        token not held). ``token_values`` are the same counts as dicts."""
        return self._rows_table(self._rows_of(tokens))

    def _rows_of(self, tokens: list) -> np.ndarray:
        """The row of each of ``tokens`` (-1: not held). While the index dict lacks rows the
        C batch step added, through that step's token table: reading the dict would add
        them (``TextModel._index``), at every commit that moves unchanged tokens."""
        if self._indexed < len(self._keys):
            from streamnb.models._prequential import table_rows

            rows = table_rows(self, tokens if isinstance(tokens, list) else list(tokens))
            if rows is not None:
                return rows
        return np.array(list(map(self._index.get, tokens, repeat(-1))), dtype=np.intp)

    def _rows_table(self, rows: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray | None]:
        """``token_table`` of the tokens of ``rows`` (-1: a token not held)."""
        labels = self._labels
        order = sorted(range(len(labels)), key=labels.__getitem__)
        present = rows >= 0
        if present.all():
            table = self._counts[rows][:, order]
            stamps = self._seen[rows] if self._seen is not None else None
        else:
            table = np.zeros((len(rows), len(order)))
            table[present] = self._counts[rows[present]][:, order]
            stamps = None
            if self._seen is not None:
                stamps = np.zeros(len(rows), dtype=np.int64)
                stamps[present] = self._seen[rows[present]]
        return [labels[c] for c in order], table, stamps

    def changed_table(self) -> tuple[list, list[str], np.ndarray, np.ndarray | None]:
        """``changed_tokens()[0]`` and ``token_table`` of them, from the changed rows: a
        commit's tokens are not looked up for their counts."""
        tokens, rows = self._changed_token_rows()
        return tokens, *self._rows_table(rows)

    def vocabulary_table(self) -> tuple[list, list[str], np.ndarray, np.ndarray | None]:
        """Every token with counts and ``token_table`` of them, from the rows (no token
        looked up), in row order or, with last-seen stamps, ordered by them (stable): what a
        changelog's rewrite of the whole slice writes."""
        rows = self._vocabulary_rows()
        if self._seen is not None:
            rows = rows[np.argsort(self._seen[rows], kind="stable")]
        return list(map(self._keys.__getitem__, rows.tolist())), *self._rows_table(rows)

    def token_values(self, tokens: list) -> list[Any]:
        """``[self.stat_value(("token", t)) for t in tokens]``, made a block at a time: the
        tokens' rows are read with one array gather and grouped by which labels they count,
        and each group's values are made by one comprehension of dict displays (a changelog
        commit makes hundreds of thousands of them)."""
        n = len(tokens)
        labels = self._labels
        if not n or not labels:
            return [None] * n
        order = sorted(range(len(labels)), key=labels.__getitem__)
        names = [labels[c] for c in order]
        rows = self._rows_of(tokens)
        present = np.flatnonzero(rows >= 0)
        rows = rows[present]
        table = self._counts[rows][:, order]
        stamps = self._seen[rows] if self._seen is not None else None
        nonzero = table != 0
        values = np.full(n, None, dtype=object)
        if len(names) <= _MAX_PATTERN_LABELS:
            patterns = nonzero @ (1 << np.arange(len(names), dtype=np.int64))
            kinds = np.unique(patterns)
            if len(kinds) * _ROWS_PER_PATTERN <= len(rows):
                for pattern in kinds.tolist():
                    if pattern == 0:
                        continue  # no counts: None
                    block = np.flatnonzero(patterns == pattern)
                    columns = [c for c in range(len(names)) if pattern >> c & 1]
                    made = _count_dicts([names[c] for c in columns],
                                        table[np.ix_(block, columns)].tolist())
                    if stamps is not None:
                        made = [{"counts": counts, "seen": seen}
                                for counts, seen in zip(made, stamps[block].tolist(), strict=True)]
                    values[present[block]] = made
                return values.tolist()
        made = [{name: x for name, x in zip(names, counts, strict=True) if x} or None
                for counts in table.tolist()]
        if stamps is not None:
            made = [counts and {"counts": counts, "seen": seen}
                    for counts, seen in zip(made, stamps.tolist(), strict=True)]
        values[present] = made
        return values.tolist()

    def set_stat_values(self, values: Mapping[tuple, Any]) -> None:
        """Give each key of ``values`` its value (None: all zeros), exactly, keeping every
        derived quantity (vocabulary size, caches, Bernoulli's running sums) consistent."""
        tokens: list = []
        token_counts: list[dict[str, float]] = []
        stamps: list[int] = []
        totals = None
        clock = None
        for key, value in values.items():
            if key == TOTALS_KEY:
                totals = value or {}
                if not isinstance(totals, Mapping):
                    raise StateError(f"corrupt statistics value for {key!r}")
                clock = totals.get("clock")
                decay_clock = totals.get("decay_clock", 0)
                for stamp in (clock, decay_clock):
                    if stamp is not None and (isinstance(stamp, bool)
                                              or not isinstance(stamp, int) or stamp < 0):
                        raise StateError(f"corrupt statistics value for {key!r}: bad clock")
                totals = {part: _counts(totals.get(part), (*key, part))
                          for part in ("n_docs", "totals")}
            elif isinstance(key, tuple) and len(key) == 2 and key[0] == "token":
                tokens.append(self._checked_token(key[1]))
                counts, seen = split_seen(value, key)
                token_counts.append(_counts(counts, key))
                stamps.append(seen or 0)
            else:
                raise StateError(f"unknown statistics key {key!r} for a {self.kind} model")
        for counts in [*token_counts, *(totals.values() if totals else ())]:
            for label in counts:
                self._column_of(label)
        if tokens:
            rows = self._set_rows(tokens, token_counts)
            if self._seen is not None:
                self._seen[rows] = stamps
        if totals is not None:
            if self._seen is not None:
                self._clock = clock or 0
            if self.half_life is not None:
                # the counts set are in this clock's units (its epoch): no rescaling here
                self._decay_clock = decay_clock
                self._set_scale()
            column = self._column
            self._n_docs[:] = 0.0
            self._totals[:] = 0.0
            for label, n in totals["n_docs"].items():
                self._n_docs[column[label]] = n
            for label, t in totals["totals"].items():
                self._totals[column[label]] = t
            self._negative_docs = int(np.count_nonzero(self._n_docs < 0))
            self._active = None
            self._log_prior_cache = None
            self._invalidate(None)
            if self._changed_rows is not None:
                self._totals_changed = True

    def _checked_token(self, token: Any) -> Any:
        if self.n_buckets is None:
            if type(token) is not str:
                raise StateError(f"corrupt statistics key: token {token!r} is not a str")
        elif isinstance(token, bool) or not isinstance(token, int) or not (
            0 <= token < self.n_buckets
        ):
            raise StateError(f"corrupt statistics key: bucket {token!r} outside range(n_buckets)")
        return token

    def _array_rows_changed(self, rows: np.ndarray) -> None:
        """The count array's ``rows`` were written directly: the short path's row lists and
        cached rows are stale, so it copies them back from the array before it reads them."""
        self._stale[rows] = True
        self._any_stale = True
        if self._row_cache:
            drop = self._row_cache.pop
            for row in rows.tolist():
                drop(row, None)

    def _set_rows(self, tokens: list, token_counts: list[dict[str, float]]) -> np.ndarray:
        if len(set(tokens)) != len(tokens):
            raise StateError("corrupt statistics: a token is set twice")
        rows = self._rows_creating(tokens)
        column = self._column
        new = np.zeros((len(tokens), len(self._labels)))
        for i, counts in enumerate(token_counts):
            for label, count in counts.items():
                new[i, column[label]] = count
        old = self._counts[rows]
        self._counts[rows] = new
        self._array_rows_changed(rows)
        nnz_old = np.count_nonzero(old, axis=1)
        nnz_new = np.count_nonzero(new, axis=1)
        self._nnz[rows] = nnz_new
        self._vocab += int(np.count_nonzero(nnz_new)) - int(np.count_nonzero(nnz_old))
        self._n_negative += int(np.count_nonzero(new < 0)) - int(np.count_nonzero(old < 0))
        if self._tracks_updates():
            for c in range(len(self._labels)):
                self._after_update(c, old[:, c], new[:, c])
        self._invalidate(None)
        self._lookup_cache = None
        if self._changed_rows is not None:
            self._note_rows(rows)
        return rows

    def _zero_rows(self, rows: np.ndarray) -> None:
        """``_set_rows`` of distinct present ``rows`` to no counts (an expiry's tokens), from
        their rows: the tokens are not looked up nor given a dict each. The rows are not
        noted as changed: the expiry lists their tokens in ``_expired_keys``."""
        old = self._counts[rows]
        self._counts[rows] = 0.0
        self._array_rows_changed(rows)
        self._nnz[rows] = 0
        self._vocab -= int(np.count_nonzero(np.count_nonzero(old, axis=1)))
        self._n_negative -= int(np.count_nonzero(old < 0))
        if self._tracks_updates():
            zeros = np.zeros(len(rows))
            for c in range(len(self._labels)):
                self._after_update(c, old[:, c], zeros)
        self._invalidate(None)
        self._lookup_cache = None
        if self._changed_rows is not None:
            self._totals_changed = True


class KeyedWholeModel:
    """The keyed view of a model whose statistics are one key, ``("model",)`` (a mixin)."""

    _model_changed: bool | None = None

    def mark_changes(self) -> None:
        self._model_changed = False

    def changed_keys(self) -> list[tuple]:
        if self._model_changed is None:
            raise RuntimeError("changed_keys() before mark_changes(): nothing is tracked")
        return [MODEL_KEY] if self._model_changed else []

    def _note_change(self) -> None:
        if self._model_changed is not None:
            self._model_changed = True

    def stat_keys(self) -> list[tuple]:
        return [MODEL_KEY] if self.stat_value(MODEL_KEY) is not None else []

    def stat_value(self, key: tuple) -> Any:
        if key != MODEL_KEY:
            raise KeyError(key)
        state = self.to_state()
        return state if state.get("classes") else None

    def set_stat_values(self, values: Mapping[tuple, Any]) -> None:
        for key in values:
            if key != MODEL_KEY:
                raise StateError(f"unknown statistics key {key!r} for a {self.kind} model")
        if MODEL_KEY not in values:
            return
        value = values[MODEL_KEY]
        if value is not None:
            if not isinstance(value, Mapping):
                raise StateError(f"corrupt statistics value for {MODEL_KEY!r}")
            # the statistics, under this model's (scoring) options
            value = {**value, "options": self.options()}
        fresh = type(self)(**self.options()) if value is None else type(self).from_state(value)
        tracking = self._model_changed
        self.__dict__.update(fresh.__dict__)
        self._model_changed = tracking
        self._note_change()
