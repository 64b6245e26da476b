"""The store of recent messages that lets late labels, corrections and duplicates be learned once.

For each recent message id it keeps the model input (compact JSON bytes), the input partition
("slice") it came from and the label the model **currently** holds for it (``None`` when the
message was unlabelled and no feedback has come yet). That last field is what makes feedback
idempotent: a label equal to the current one is a duplicate and changes nothing, a different
one is a correction (unlearn the old, learn the new). Replaying feedback after a crash is then
safe, because the store is committed together with the model and the offsets (see
:mod:`streamnb.daemon.changelog`).

In the changelog, entries travel in **runs**: consecutive arrivals, up to ``RUN_ENTRIES``
entries and ``run_max_bytes`` of record value, each run one record keyed by its first entry's
arrival number. A message joins the run of the newest entry while it has room, else starts
one; a change to an entry (its label, its eviction, the id remembered again) rewrites its
run. A commit of N new messages thus writes about N / ``RUN_ENTRIES`` records instead of N.
The run of every entry is part of the store's state, read back from the records, so a store
restored from its changelog groups the next messages exactly as the live one.

Inputs are kept as the JSON the changelog carries: their own JSON when it is short, and from
``COMPRESS_FROM`` bytes of it on (a mail's token counts, 7 KB on average on SpamAssassin) that
JSON compressed with Zstandard (level 1) and base64-encoded, as a JSON *string*
(:func:`encode_x`, :func:`decode_x`). A model input is a mapping or a list, never a string, so
each stored input says which it is. Compressed, a mail's input takes 2.9 KB instead of 7.2:
the store holds two and a half times as many mails in ``max_bytes``, and a commit sends that
much less changelog, which was the largest share of a mail's commit.

The store is bounded by a number of ids and a number of bytes; the oldest messages (by arrival)
are forgotten first. Feedback for a forgotten (or never seen) id cannot be learned: the daemon
dead-letters it with reason ``unknown_id``.

>>> store = FeedbackStore(max_ids=2)
>>> store.remember("m1", "mail:0", {"win": 1}, None)
0
>>> decide(store.get("m1"), "spam")
'learned'
>>> store.set_label("m1", "spam")
>>> decide(store.get("m1"), "spam"), decide(store.get("m1"), "ham")
('duplicate', 'relabelled')
>>> store.remember("m2", "mail:0", {"hi": 1}, "ham"), store.remember("m3", "mail:0", {}, None)
(0, 1)
>>> store.get("m1") is None, len(store)
(True, 2)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import KeysView
from dataclasses import dataclass
from typing import Any

import orjson
import pybase64
import zstandard

__all__ = ["COMPRESS_FROM", "Entry", "FeedbackStore", "decide", "decode_x", "encode_x",
           "entry_cost", "entry_costs"]

#: Inputs whose JSON is at least this many bytes are stored compressed. Below it Zstandard's
#: frame and base64 outweigh what it saves (an SMS's 200-400 bytes of JSON shrink by a few
#: dozen, for 3-5 us of CPU).
COMPRESS_FROM = 1024
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


class _Codecs(threading.local):
    """A Zstandard compressor and decompressor per thread: one may not serve two threads at
    once, and making one a call costs half as much again as the compressing (30 us a mail
    against 20). Level 1: on SpamAssassin's inputs it makes 7.2 KB 2.2 KB in 22 us, where
    level 3 takes 28 us for 2.1 KB and zlib's fastest 63 us for 2.2 KB (LZ4: 11 us, 3.2 KB)."""

    def __init__(self) -> None:
        self.compress = zstandard.ZstdCompressor(level=1).compress
        self.decompress = zstandard.ZstdDecompressor().decompress


_codecs = _Codecs()


def encode_x(x: Any) -> bytes:
    """The form a model input is stored and committed in: its JSON, or from
    ``COMPRESS_FROM`` bytes on that JSON compressed, base64-encoded, as a JSON string, where
    that is shorter (it is never longer than the JSON); in a bytes object of its own size.
    Raises ``TypeError`` if ``x`` is not JSON-encodable.

    A string ``x`` is an input already stored compressed, as a changelog record's JSON gives
    it back: it is kept as it is, so ``encode_x(orjson.loads(encode_x(x))) == encode_x(x)``.

    orjson's output keeps the buffer it grew (4x at a time: about 130 KB for a mail's 7 KB of
    JSON), so an uncompressed input is copied at once: the buffer is freed before the next
    input is encoded, which reuses it. Copied later (by the store), a batch of 500 mails held
    65 MB of such buffers, memory the allocator handed back to the system and faulted in
    again every batch (two page faults a mail)."""
    try:
        data = orjson.dumps(x, option=_OPTIONS)
    except orjson.JSONEncodeError as error:
        raise TypeError(f"model input cannot be stored: {error}") from None
    if len(data) >= COMPRESS_FROM and type(x) is not str:
        compressed = b'"%b"' % pybase64.b64encode(_codecs.compress(data))
        if len(compressed) < len(data):  # not so for tokens as random as base64's output
            return compressed
    return memoryview(data).tobytes()


def decode_x(x_json: bytes) -> Any:
    """The model input stored as ``x_json`` (:func:`encode_x`'s form, or the plain JSON of
    a changelog written before inputs were compressed). Raises ``ValueError`` on bytes that
    are neither."""
    if x_json[:1] != b'"':
        return orjson.loads(x_json)
    try:
        data = _codecs.decompress(pybase64.b64decode(x_json[1:-1], validate=True))
    except zstandard.ZstdError as error:
        raise ValueError(f"stored model input cannot be decompressed: {error}") from None
    return orjson.loads(data)


# Dict and bookkeeping overhead per entry, so max_bytes bounds real memory, not just payloads.
ENTRY_OVERHEAD = 200
#: Entries of one run record at most, and its value's bytes at most (a relabel rewrites its
#: run: these bound what one feedback record costs to commit).
RUN_ENTRIES = 128
RUN_BYTES = 128 * 1024
# An entry's JSON in a run record, besides its id, label and input (and learn clock): brackets,
# commas and an arrival number of up to 20 digits.
_ENTRY_JSON_OVERHEAD = 26


def entry_cost(msg_id: str, label: str | None, x_json: bytes, clock: int | None = None) -> int:
    """An upper bound of the bytes an entry takes in a run record's value."""
    return (len(x_json) + len(orjson.dumps(msg_id)) + len(orjson.dumps(label))
            + _ENTRY_JSON_OVERHEAD + (0 if clock is None else 1 + len(str(clock))))


def entry_costs(ids: list[str], labels: list[str | None], x_jsons: list[bytes]) -> list[int]:
    """``[entry_cost(i, l, x) for i, l, x in zip(ids, labels, x_jsons)]``, each id's and
    label's JSON priced once a batch: when the ids joined encode as their characters and two
    quotes (ASCII, nothing escaped: orjson writes each character of a string on its own, as
    one byte at least), so does each of them; a batch has few distinct labels."""
    try:
        joined = "".join(ids)
        plain = len(orjson.dumps(joined)) == len(joined) + 2
    except (TypeError, orjson.JSONEncodeError):  # a surrogate, say: priced one at a time
        plain = False
    if not plain:
        return [entry_cost(msg_id, label, x_json)
                for msg_id, label, x_json in zip(ids, labels, x_jsons, strict=True)]
    label_cost = {label: len(orjson.dumps(label)) + _ENTRY_JSON_OVERHEAD + 2
                  for label in set(labels)}
    return [len(x_json) + len(msg_id) + label_cost[label]
            for msg_id, label, x_json in zip(ids, labels, x_jsons, strict=True)]


@dataclass(slots=True)
class Entry:
    slice: str
    label: str | None
    x_json: bytes
    #: Arrival order (per store), so a store rebuilt from its changelog evicts in the same order.
    seq: int = 0
    #: With decay (model.half_life_messages): the slice clock its label was learned at, so a
    #: correction removes what is left of that weight; None without decay or before a label.
    clock: int | None = None
    #: The run (changelog record) it belongs to: None for an entry read from a record of its
    #: own (the changelog's earlier layout), which keeps that record.
    run: int | None = None

    @property
    def x(self) -> Any:
        """The model input as it was learned (token counts, or a numeric vector)."""
        return decode_x(self.x_json)


def decide(entry: Entry | None, label: str) -> str:
    """What feedback ``label`` means for ``entry``: one of the feedback outcomes."""
    if entry is None:
        return "unknown_id"
    if entry.label is None:
        return "learned"
    if entry.label == label:
        return "duplicate"
    return "relabelled"


class FeedbackStore:
    """Recent messages by id, bounded by ``max_ids`` and ``max_bytes``, oldest evicted first."""

    def __init__(self, max_ids: int = 100_000, max_bytes: int = 64 * 1024 * 1024,
                 run_max_bytes: int = RUN_BYTES):
        self.max_ids = max_ids
        self.max_bytes = max_bytes
        #: The largest run record value the store makes by grouping (an entry larger than
        #: that is a run of its own).
        self.run_max_bytes = min(run_max_bytes, RUN_BYTES)
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self.nbytes = 0
        self.evicted = 0
        self._next_seq = 0
        # run -> its entries' ids (in the order they joined) and its record's bytes (bound)
        self._runs: dict[int, dict[str, None]] = {}
        self._run_bytes: dict[int, int] = {}
        # Runs changed since mark_changes(), and ids of entries with records of their own
        # (run None) changed since (None: not tracked).
        self._changed_runs: set[int] | None = None
        self._changed: set[str] | None = None
        self._unordered = False  # put() added an entry older than the newest
        # One str per slice key, shared by its entries (the daemon names each record's slice
        # afresh: a copy per entry would cost ~55 bytes a message).
        self._slice_names: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._entries

    def ids(self) -> KeysView[str]:
        """The ids held, as a live view (``in`` without a call into the store; a restore's
        :meth:`order_by_arrival` makes a new view)."""
        return self._entries.keys()

    def get(self, msg_id: str) -> Entry | None:
        return self._entries.get(msg_id)

    #: :func:`encode_x`, where the daemon finds it with the store.
    encode_x = staticmethod(encode_x)

    def remember(self, msg_id: str, slice_key: str, x: Any, label: str | None,
                 clock: int | None = None) -> int:
        """Keep ``msg_id``; ``x`` is the model input or its :meth:`encode_x` bytes.

        The store keeps the bytes object it is given, so it must be of its own size, as
        :meth:`encode_x` makes it (or as a pipe hands it over): orjson's own output carries a
        buffer of 130 KB for a mail's 5 to 10 KB of JSON, and a store of 100,000 mails would
        hold 13 GB of them. Returns how many old entries were evicted to make room.
        """
        x_json = x if isinstance(x, bytes) else self.encode_x(x)
        old = self._entries.pop(msg_id, None)
        if old is not None:
            self.nbytes -= self._size(msg_id, old)
            self._leave_run(msg_id, old)
        slice_key = self._slice_names.setdefault(slice_key, slice_key)
        seq = self._next_seq
        cost = entry_cost(msg_id, label, x_json, clock)
        run = self._open_run(cost)
        entry = Entry(slice_key, label, x_json, seq, clock, seq if run is None else run)
        self._next_seq += 1
        self._entries[msg_id] = entry
        self.nbytes += self._size(msg_id, entry)
        self._join_run(msg_id, entry.run, cost)
        return self._evict_oldest()

    def remember_many(self, slice_key: str, ids: list[str], x_jsons: list[bytes],
                      labels: list[str | None]) -> int:
        """:meth:`remember` for each ``(ids[i], slice_key, x_jsons[i], labels[i])`` in order,
        without a learn clock: the same entries, runs, bytes and evictions, with the newest
        run, the counts and the lookups kept across the entries (a call each, with its
        lookups, was the largest part of a short message's bookkeeping in the daemon's batch
        step), and the entries priced a batch at a time (:func:`entry_costs`). ``x_jsons``
        are kept as they are (:meth:`remember`: :meth:`encode_x`'s bytes). An id the store
        holds already goes through :meth:`remember`. Returns how many old entries were
        evicted."""
        entries, runs, run_bytes = self._entries, self._runs, self._run_bytes
        changed_runs, run_max_bytes = self._changed_runs, self.run_max_bytes
        max_ids, max_bytes = self.max_ids, self.max_bytes
        slice_key = self._slice_names.setdefault(slice_key, slice_key)
        slice_bytes = len(slice_key) + ENTRY_OVERHEAD
        run = entries[next(reversed(entries))].run if entries else None
        members = runs.get(run) if run is not None else None
        evicted = 0
        # The byte count, the next arrival number and the open run's bytes in locals, written
        # back before any call that reads them, and at the end.
        nbytes, seq = self.nbytes, self._next_seq
        open_bytes = run_bytes[run] if members is not None else 0
        noted = None  # the run last added to changed_runs
        for msg_id, x_json, label, cost in zip(ids, x_jsons, labels,
                                               entry_costs(ids, labels, x_jsons), strict=True):
            if msg_id in entries:
                if members is not None:
                    run_bytes[run] = open_bytes
                self.nbytes, self._next_seq = nbytes, seq
                evicted += self.remember(msg_id, slice_key, x_json, label)
                nbytes, seq = self.nbytes, self._next_seq
                run = entries[msg_id].run
                members = runs.get(run)
                open_bytes = run_bytes[run] if members is not None else 0
                continue
            if members is None or len(members) >= RUN_ENTRIES or (
                    open_bytes + cost > run_max_bytes):
                if members is not None:
                    run_bytes[run] = open_bytes
                run = seq
                members = runs[run] = {}
                open_bytes = 2  # the list's brackets
            entries[msg_id] = Entry(slice_key, label, x_json, seq, None, run)
            seq += 1
            members[msg_id] = None
            open_bytes += cost + 1  # and its comma
            if changed_runs is not None and run != noted:
                changed_runs.add(run)
                noted = run
            nbytes += len(msg_id) + len(x_json) + slice_bytes
            if len(entries) > max_ids or nbytes > max_bytes:
                run_bytes[run] = open_bytes
                self.nbytes, self._next_seq = nbytes, seq
                evicted += self._evict_oldest()
                nbytes = self.nbytes
                open_bytes = run_bytes[run]  # its older entries may have gone (the newest stays)
        if members is not None:
            run_bytes[run] = open_bytes
        self.nbytes, self._next_seq = nbytes, seq
        return evicted

    def _evict_oldest(self) -> int:
        """Forget the oldest entries until the store is within its bounds (the newest stays);
        returns how many."""
        evicted = 0
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_ids or self.nbytes > self.max_bytes
        ):
            old_id, old_entry = self._entries.popitem(last=False)
            self.nbytes -= self._size(old_id, old_entry)
            self._leave_run(old_id, old_entry)
            evicted += 1
        self.evicted += evicted
        return evicted

    def set_label(self, msg_id: str, label: str | None, clock: int | None = None) -> None:
        """The label the model now holds for ``msg_id``; ``clock``, when given, the slice
        clock it was learned at (decay)."""
        entry = self._entries[msg_id]
        clock = entry.clock if clock is None else clock
        run = entry.run
        if run is not None:
            grown = (entry_cost(msg_id, label, entry.x_json, clock)
                     - entry_cost(msg_id, entry.label, entry.x_json, entry.clock))
            if self._run_bytes[run] + grown <= self.run_max_bytes or len(self._runs[run]) == 1:
                self._run_bytes[run] += grown
            else:
                # A longer label would push the run past its record's room: the entry moves
                # to a run of its own (numbered like an arrival, so no run key repeats).
                self._leave_run(msg_id, entry)
                entry.run = self._next_seq
                self._next_seq += 1
                entry.label, entry.clock = label, clock
                self._join_run(msg_id, entry.run, entry_cost(msg_id, label, entry.x_json, clock))
                return
        entry.label, entry.clock = label, clock
        self._changed_entry(msg_id, entry)

    # -------------------------------------------------------------- runs
    def _open_run(self, cost: int) -> int | None:
        """The run a new entry of ``cost`` bytes joins: the newest entry's, if it has room."""
        if not self._entries:
            return None
        run = self._entries[next(reversed(self._entries))].run
        if run is None or len(self._runs[run]) >= RUN_ENTRIES or (
                self._run_bytes[run] + cost > self.run_max_bytes):
            return None
        return run

    def _join_run(self, msg_id: str, run: int, cost: int) -> None:
        members = self._runs.get(run)
        if members is None:
            members = self._runs[run] = {}
            self._run_bytes[run] = 2  # the list's brackets
        members[msg_id] = None
        self._run_bytes[run] += cost + 1  # and its comma
        if self._changed_runs is not None:
            self._changed_runs.add(run)

    def _leave_run(self, msg_id: str, entry: Entry) -> None:
        run = entry.run
        if run is None:
            if self._changed is not None:
                self._changed.add(msg_id)
            return
        members = self._runs[run]
        del members[msg_id]
        if members:
            self._run_bytes[run] -= entry_cost(msg_id, entry.label, entry.x_json,
                                               entry.clock) + 1
        else:
            del self._runs[run], self._run_bytes[run]
        if self._changed_runs is not None:
            self._changed_runs.add(run)

    def _changed_entry(self, msg_id: str, entry: Entry) -> None:
        if entry.run is None:
            if self._changed is not None:
                self._changed.add(msg_id)
        elif self._changed_runs is not None:
            self._changed_runs.add(entry.run)

    def run_entries(self, run: int) -> list[tuple[str, Entry]]:
        """The entries of ``run``, oldest first (none: the run is gone)."""
        entries = self._entries
        return [(msg_id, entries[msg_id]) for msg_id in self._runs.get(run, ())]

    def runs(self) -> list[int]:
        return sorted(self._runs)

    def put_run(self, run: int, items: list[tuple[str, Entry]] | None) -> None:
        """Set ``run`` as its changelog record says (None: the run is gone): its entries
        not listed leave the store, the listed ones are put (see :meth:`put`)."""
        listed = {msg_id for msg_id, _ in items or ()}
        for msg_id in [i for i in self._runs.get(run, ()) if i not in listed]:
            self.put(msg_id, None)
        for msg_id, entry in items or ():
            entry.run = run
            self.put(msg_id, entry)

    # -------------------------------------------------------------- changelog
    def mark_changes(self) -> None:
        """Start (or restart) remembering which runs change (see :meth:`changed_runs`)."""
        self._changed = set()
        self._changed_runs = set()

    def changed_runs(self) -> list[int]:
        """Runs an entry joined, left or was relabelled in since :meth:`mark_changes`."""
        if self._changed_runs is None:
            raise RuntimeError("changed_runs() before mark_changes(): nothing is tracked")
        return sorted(self._changed_runs)

    def changed_ids(self) -> list[str]:
        """Ids of entries with records of their own (see :class:`Entry`) relabelled, evicted
        or remembered again since :meth:`mark_changes`."""
        if self._changed is None:
            raise RuntimeError("changed_ids() before mark_changes(): nothing is tracked")
        return sorted(self._changed)

    def put(self, msg_id: str, entry: Entry | None) -> None:
        """Set ``msg_id``'s entry as its changelog record says (None: delete it), without
        evicting anything: only the store's owner evicts, and its evictions are records too.
        The entry's ``x_json`` is kept as it is (:meth:`remember`: :meth:`encode_x`'s bytes).
        An id already held keeps its place; call :meth:`order_by_arrival` after a restore."""
        old = self._entries.pop(msg_id, None) if entry is None else self._entries.get(msg_id)
        if old is not None:
            self.nbytes -= self._size(msg_id, old)
            self._leave_run(msg_id, old)
        if entry is None:
            return
        if (entry.seq < self._next_seq) if old is None else (entry.seq != old.seq):
            self._unordered = True
        self._entries[msg_id] = entry
        self.nbytes += self._size(msg_id, entry)
        # (a run's number may be one no entry has: see set_label)
        self._next_seq = max(self._next_seq, entry.seq + 1, (entry.run or 0) + 1)
        if entry.run is not None:
            self._join_run(msg_id, entry.run,
                           entry_cost(msg_id, entry.label, entry.x_json, entry.clock))
        elif self._changed is not None:
            self._changed.add(msg_id)

    def order_by_arrival(self) -> None:
        """Put the entries back in arrival order (a compacted log holds them in write order)."""
        if not self._unordered:
            return
        self._unordered = False
        self._entries = OrderedDict(sorted(self._entries.items(), key=lambda item: item[1].seq))

    def items(self):
        return self._entries.items()

    @staticmethod
    def _size(msg_id: str, entry: Entry) -> int:
        return len(msg_id) + len(entry.x_json) + len(entry.slice) + ENTRY_OVERHEAD

    # -------------------------------------------------------------- persistence
    def to_state(self) -> dict[str, Any]:
        """State for :func:`orjson.dumps`, oldest entry first (eviction order survives a restart).

        Each stored input is embedded as the JSON it already is (an ``orjson.Fragment``), not
        copied into a string: no second copy of the store in memory while checkpointing, and
        no escaping in the file.
        """
        return {
            "version": 1,
            "evicted": self.evicted,
            "entries": [
                [msg_id, e.slice, e.label, orjson.Fragment(e.x_json)]
                for msg_id, e in self._entries.items()
            ],
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], max_ids: int = 100_000, max_bytes: int = 64 * 1024 * 1024
    ) -> FeedbackStore:
        """The store saved by :meth:`to_state`, as read back from the JSON file."""
        if state.get("version") != 1:
            raise ValueError(f"feedback store state version {state.get('version')!r} unknown")
        store = cls(max_ids=max_ids, max_bytes=max_bytes)
        for msg_id, slice_key, label, x in state["entries"]:
            store.remember(msg_id, slice_key, cls.encode_x(x), label)
        store.evicted += state.get("evicted", 0)
        return store
