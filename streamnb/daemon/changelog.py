"""The changelog's records: a partition's slice as keyed full values, and back.

Each input partition's state (its model slice and its feedback store) lives in partition p of a
compacted changelog topic. A record is the **full current value** of one key, never an
increment, so applying a record twice is applying it once, and compaction (which keeps the last
record per key) keeps exactly what a reader needs:

=============================  ===============================================================
record key (JSON)              record value (JSON; ``null`` value = tombstone: the key is gone)
=============================  ===============================================================
``[1, "page", n]``             token page n: ``{"format": 2, "labels": [l, ...], "tokens": [t, ...],
                               "counts": [[count, ...], ...], "seen": [n, ...]}`` (a column
                               of counts per label, 0 for none; ``seen`` with stamps), or
                               (format 1) ``[[t, value], ...]``, values as ``[1, "token", t]``
``[1, "totals"]``              ``{"n_docs": {label: n}, "totals": {label: s}}``
``[1, "model"]``               a model without finer keys (GDA): its whole ``to_state()``
``[1, "entries", r]``          ``[[id, label | null, seq, model input(, clock)], ...]``: run r
``[1, "slice"]``               ``{"kind": k, "counting": {option: value}}``: what the counts are
``[1, "token", t]``            ``{label: count}``, token (or hash bucket) t's counts (read only)
``[1, "tokens", b]``           ``[[t, {label: count}], ...]``: a bucket of tokens (read only)
``[1, "feedback", id]``        ``{"label": l | null, "seq": n, "x": model input}`` (read only)
=============================  ===============================================================

A token's value (``{label: count}``, or ``{"counts": {label: count}, "seen": n}`` with expiry's
last-seen stamps) is in a **page**: a commit writes the values of all the tokens it changed
packed into new pages, numbered on from the slice's last page (one more than the largest page
number in the log, tombstones included: a number is used again only once compaction has removed
all its records), at most ``PAGE_ENTRIES`` values and the topic's record size each. A token's
*home* is the last page that lists it; the pages before it that still list it hold a stale
value. The writer, and every reader as it applies the records in log order, keep the same index
of homes (:class:`_Pages`, derived from the records alone), and a page's tombstone removes the
tokens whose home it still is. So that the log stays about the size of the vocabulary, a commit
**cleans** every page it left with fewer than half of its entries live (``CLEAN_BELOW``): their
live tokens move into the commit's new pages and the page is tombstoned (a page left with none
is tombstoned alone); the live pages then list at most twice as many entries as the slice has
tokens, and a value is rewritten about once more than it changes. A token that **loses its
counts** (expiry, a relabel that takes its last count) is in no page of the commit, and every
page that lists it, home or stale, is cleaned: once compaction has dropped a later page and its
tombstone, an older page still listing it would bring it back. A commit's records are its new
pages (the tokens it changed, then, in pages of their own, those it moved: they change slowly,
and such pages stay live for long), then the tombstones of the pages it cleaned. A commit that
changes at least as many tokens as the slice holds (an expiry's) writes the whole slice in new
pages instead, by last seen, and tombstones every other page (:meth:`_Pages.rewrite`).

A page's value is **format 2** (its ``"format"``): its tokens' counts as columns, encoded from
the model's arrays (``token_table``) with no object per value. Pages of **format 1**, lists of
``[t, value]`` pairs, written before it (and by a model without ``token_table``), are read
too: :func:`page_pairs` makes the same pairs of either.

Why any compaction of the log reads back to the live slice: a live page is the last record of
its key, so it is kept; a tombstoned page's value is dropped no later than its tombstone
(Kafka's cleaner removes a tombstone only once the records before it of its key are gone).
A live token's home is live and no later record lists it; a token with no counts is listed
only by tombstoned pages, so the last of them a reader still sees is followed by its
tombstone.

The **earlier layout** (a token's own record ``[1, "token", t]``, and bucket records listing
every token of a bucket, whichever came later held the value) is still read, in log order. A
new owner's first commit moves every token whose value is in such a record into pages, and
tombstones those keys: the tokens' own records before its pages (a token's own tombstone
removes it, whatever holds it), the buckets after them (a bucket's tombstone removes the
tokens whose value it still holds, as a page's).

The feedback store's entries travel in runs of consecutive arrivals
(:mod:`streamnb.daemon.feedback`), a record each, keyed by the run's first arrival number; a
tombstone when the run's last entry is gone. An entry's model input is in the form the store
keeps it (:func:`~streamnb.daemon.feedback.encode_x`): its JSON, or that JSON compressed,
as a JSON string; a reader keeps either as it reads it. A changelog written before runs
holds a record per entry, keyed by its id: they are read as before, and when such an entry
changes its record is rewritten (or, when it left the store or moved into a run,
tombstoned) ahead of the runs. A commit sends the store's records before the model's
(:func:`changed_records`): a reader keeps the two apart, so their order between them
changes nothing it holds.

The ``slice`` record lets a daemon refuse a changelog written by a model of another kind, or
one that counts differently (hashing buckets, repeated words), instead of adding up counts
that do not mean the same thing.

The leading 1 is the format version; a record this build cannot read stops the daemon
(:class:`ChangelogError`): state is never skipped silently.

>>> from streamnb.models import make_model
>>> from streamnb.daemon.feedback import FeedbackStore
>>> model, store = make_model("bernoulli"), FeedbackStore()
>>> model.mark_changes(); store.mark_changes()
>>> model.learn_one({"win": 1}, "spam")
>>> _ = store.remember("m1", "mail:0", {"win": 1}, "spam")
>>> records = changed_records(model, store)
>>> [key for key, _ in records]
[b'[1,"entries",0]', b'[1,"page",0]', b'[1,"totals"]']
>>> copy, copy_store = make_model("bernoulli"), FeedbackStore()
>>> apply_records(copy, copy_store, "mail:0", records)
3
>>> copy.to_state() == model.to_state(), copy_store.get("m1").label
(True, 'spam')
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections import Counter, deque
from collections.abc import Iterable
from itertools import compress, repeat
from operator import eq, is_not, not_
from typing import Any

import numpy as np
import orjson

from streamnb.daemon.feedback import Entry, FeedbackStore

__all__ = [
    "ChangelogError",
    "FORMAT_VERSION",
    "all_records",
    "apply_records",
    "changed_records",
    "changelog_topic",
    "decode",
    "no_cyclic_gc",
    "page_pairs",
    "slice_record",
]

FORMAT_VERSION = 1
#: The ``format`` of a token page whose value holds its tokens' counts as columns (a page
#: whose value is a list of ``[token, value]`` pairs is format 1).
COLUMNS_PAGE = 2

#: How many token values a page holds at most: a commit makes about one page per this many
#: changed tokens (a send each), and a token that loses its counts has every page that lists
#: it rewritten (their live tokens moved), so this also bounds what one deletion rewrites.
PAGE_ENTRIES = 2048
#: A page whose share of live entries (tokens it is the home of) falls below this is cleaned:
#: its live tokens move into the commit's new pages and it is tombstoned, so the live pages
#: list at most 1 / CLEAN_BELOW times as many entries as the slice has tokens.
CLEAN_BELOW = 0.5
#: The largest page record a writer makes when the topic's limit is not given (Kafka's
#: default max.message.bytes less room for the key and the batch).
DEFAULT_MAX_VALUE_BYTES = 1_000_000

Records = list[tuple[bytes, bytes | None]]


class ChangelogError(RuntimeError):
    """A changelog record this daemon cannot apply (corrupt, or from another format)."""


def changelog_topic(group_id: str, input_topic: str) -> str:
    """The changelog topic of one input topic for one consumer group (as Kafka Streams names
    ``<application.id>-<store>-changelog``).

    >>> changelog_topic("streamnb", "mail")
    'streamnb-mail-changelog'
    """
    return f"{group_id}-{input_topic}-changelog"


def _dumps(obj: Any) -> bytes:
    """``obj`` as JSON in a bytes object of its own size: orjson's output carries a buffer of
    ~4 KiB whatever its length, and a commit holds all its records at once (tens of thousands
    when a slice expires: hundreds of MiB, which stayed in the daemon's RSS)."""
    return memoryview(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)).tobytes()


def _stat_record(key: tuple, value: Any) -> tuple[bytes, bytes | None]:
    return _dumps([FORMAT_VERSION, *key]), None if value is None else _dumps(value)


def _feedback_record(msg_id: str, entry: Entry | None) -> tuple[bytes, bytes | None]:
    """The record of an entry kept in a record of its own (the earlier layout); a tombstone
    once it has left the store or joined a run."""
    key = _dumps([FORMAT_VERSION, "feedback", msg_id])
    if entry is None or entry.run is not None:
        return key, None
    body = {"label": entry.label, "seq": entry.seq, "x": orjson.Fragment(entry.x_json)}
    if entry.clock is not None:  # decay: the clock its label was learned at
        body["clock"] = entry.clock
    return key, _dumps(body)


def run_key(run: int) -> bytes:
    return _dumps([FORMAT_VERSION, "entries", run])


def _run_record(store: FeedbackStore, run: int) -> tuple[bytes, bytes | None]:
    items = store.run_entries(run)
    if not items:
        return run_key(run), None
    Fragment = orjson.Fragment
    return run_key(run), _dumps([
        [msg_id, e.label, e.seq, Fragment(e.x_json)] if e.clock is None
        else [msg_id, e.label, e.seq, Fragment(e.x_json), e.clock]  # decay: its learn clock
        for msg_id, e in items])


def _feedback_records(store: FeedbackStore, ids: Iterable[str], runs: Iterable[int]) -> Records:
    # Own records first: an id that moved into a run is tombstoned before its run is written.
    records = [_feedback_record(i, store.get(i)) for i in ids]
    records.extend(_run_record(store, run) for run in runs)
    return records


def slice_record(model: Any) -> tuple[bytes, bytes]:
    """The record saying what the slice's counts are (model kind, counting options)."""
    return orjson.dumps([FORMAT_VERSION, "slice"]), orjson.dumps(slice_identity(model))


def slice_identity(model: Any) -> dict:
    counting = {name: getattr(model, name) for name in getattr(model, "_COUNTING_OPTIONS", ())}
    if counting.get("half_life", 0) is None:
        del counting["half_life"]  # no decay: the identity changelogs written before it had
    return {"kind": getattr(model, "kind", type(model).__name__), "counting": counting}


class _Pages:
    """Where each token's value lives in a slice's changelog (the module docstring's pages).

    The slice's owner keeps one to write each commit's pages, and every reader keeps one as
    it applies the records, derived from them alone; so a reader that takes the slice over
    writes on from what it read, and one restored from a compacted log holds what the writer
    holds (the live pages survive compaction whole; a tombstoned page's entries leave the
    index with its tombstone)."""

    __slots__ = ("home", "listed", "live", "stale", "legacy", "legacy_keys", "next_page")

    def __init__(self) -> None:
        #: token -> the page holding its current value
        self.home: dict[Any, int] = {}
        #: page -> the tokens it lists (live pages: those not tombstoned)
        self.listed: dict[int, list] = {}
        #: page -> how many of the tokens it lists it is the home of
        self.live: dict[int, int] = {}
        #: token -> the other live page (an int) or pages (a list) listing an older value of it
        self.stale: dict[Any, int | list[int]] = {}
        #: token -> the record of the earlier layout holding its value: its bucket b, or -1
        #: for its own record
        self.legacy: dict[Any, int] = {}
        #: the earlier layout's keys, ``("token", t)`` and ``("tokens", b)``, whose last
        #: record is a value (the first commit of pages tombstones them)
        self.legacy_keys: set[tuple] = set()
        #: the number of the next page (one more than any page seen)
        self.next_page = 0

    # ------------------------------------------------------------------ reading, in log order
    def _leave(self, token: Any) -> None:
        """``token``'s value no longer lives in its page (if it had one)."""
        page = self.home.pop(token, None)
        if page is not None:
            self.live[page] -= 1
            self._add_stale(token, page)

    def _add_stale(self, token: Any, page: int) -> None:
        # one page (most tokens) as an int, more as a list: a slice's index holds one entry
        # for most of its tokens
        pages = self.stale.get(token)
        if pages is None:
            self.stale[token] = page
        elif type(pages) is int:
            if pages != page:
                self.stale[token] = [pages, page]
        elif page not in pages:
            pages.append(page)

    def _drop_stale(self, token: Any, page: int) -> None:
        pages = self.stale.get(token)
        if pages is None:
            return
        if type(pages) is int:
            if pages == page:
                del self.stale[token]
        elif page in pages:
            pages.remove(page)
            if len(pages) == 1:
                self.stale[token] = pages[0]

    def _stale_pages(self, token: Any) -> tuple | list:
        pages = self.stale.get(token, ())
        return (pages,) if type(pages) is int else pages

    def read_page(self, page: int, entries: list, stats: dict) -> None:
        if page >= self.next_page:
            self.next_page = page + 1
        home, live, stale, legacy = self.home, self.live, self.stale, self.legacy
        tokens = []
        moved_in = 0
        for token, value in entries:
            stats["token", token] = value
            tokens.append(token)
            old = home.get(token)
            if old == page:
                continue  # the same page read again
            if old is not None:
                live[old] -= 1
                self._add_stale(token, old)
            elif legacy:
                legacy.pop(token, None)
            if token in stale:
                self._drop_stale(token, page)
            home[token] = page
            moved_in += 1
        self.listed[page] = tokens
        live[page] = live.get(page, 0) + moved_in

    def drop_page(self, page: int, stats: dict) -> None:
        """A page's tombstone: the tokens whose home it still is are gone."""
        if page >= self.next_page:
            self.next_page = page + 1
        self.live.pop(page, None)
        home = self.home
        for token in self.listed.pop(page, ()):
            if home.get(token) == page:
                del home[token]
                stats["token", token] = None
            else:
                self._drop_stale(token, page)

    def read_own(self, token: Any, value: Any, stats: dict) -> None:
        """A token's own record (the earlier layout): its value, or its tombstone."""
        stats["token", token] = value
        self._leave(token)
        if value is None:
            self.legacy.pop(token, None)
            self.legacy_keys.discard(("token", token))
        else:
            self.legacy[token] = -1
            self.legacy_keys.add(("token", token))

    def read_bucket(self, bucket: int, entries: list | None, stats: dict) -> None:
        """A bucket record (the earlier layout), or its tombstone (written by the first commit
        of pages: the tokens whose value it still holds are gone)."""
        legacy = self.legacy
        if entries is None:
            self.legacy_keys.discard(("tokens", bucket))
            for token in [t for t, where in legacy.items() if where == bucket]:
                del legacy[token]
                stats["token", token] = None
            return
        self.legacy_keys.add(("tokens", bucket))
        for token, value in entries:
            stats["token", token] = value
            self._leave(token)
            legacy[token] = bucket

    # ------------------------------------------------------------------ writing a commit
    def _clean(self, page: int, moved: list) -> None:
        """Take ``page`` out of the index: the tokens whose home it is join ``moved``, and
        it is no longer a stale page of the others (map and compress: C loops over its up
        to PAGE_ENTRIES tokens; an expiry cleans most pages of the slice)."""
        home, stale = self.home, self.stale
        tokens = self.listed.pop(page)
        del self.live[page]
        at_home = list(map(eq, map(home.get, tokens), repeat(page)))
        here = list(compress(tokens, at_home))
        moved.extend(here)
        deque(map(home.__delitem__, here), maxlen=0)
        others = list(compress(tokens, map(not_, at_home)))
        theirs = list(map(stale.get, others))
        # most hold this page as their one stale page (an int; a list never equals one)
        deque(map(stale.__delitem__, compress(others, map(eq, theirs, repeat(page)))),
              maxlen=0)
        for token in compress(others, map(isinstance, theirs, repeat(list))):
            self._drop_stale(token, page)

    def commit(self, model: Any, tokens: list, values: _Values, max_value_bytes: int
               ) -> Records:
        """The records of a commit whose changed ``tokens`` (each once) have ``values`` (None:
        the token lost its counts), in the order a reader must apply them."""
        home, live, listed, stale = self.home, self.live, self.listed, self.stale
        doomed: set[int] = set()  # pages this commit tombstones
        olds = list(map(home.pop, tokens, repeat(None)))
        left = Counter(olds)  # page -> how many of its tokens moved home
        left.pop(None, None)
        for page, count in left.items():
            live[page] -= count
        # the pages that lost the home of a token, as a set: the order the cleaned pages'
        # tokens move in follows it
        touched = set(left)
        all_tokens = tokens  # and those that lost their counts
        kept = values.kept()
        if not all(kept):
            # No page may list a token that lost its counts any more: an older one would
            # bring it back once compaction has dropped the later pages and their tombstones.
            gone = list(map(not_, kept))
            doomed.update(compress(olds, gone))
            doomed.discard(None)
            for token in stale.keys() & set(compress(tokens, gone)):
                doomed.update(self._stale_pages(token))
            tokens = list(compress(tokens, kept))
            values = values.compress(kept)
            olds = list(compress(olds, kept))
        # The pages the changed tokens left list a stale value of them now: a dict and set
        # operations (C loops) for the tokens with no stale page yet, most of them.
        had_home = list(map(is_not, olds, repeat(None)))
        left_home = dict(zip(compress(tokens, had_home), compress(olds, had_home), strict=True))
        for token in left_home.keys() & stale.keys():
            self._add_stale(token, left_home.pop(token))
        stale.update(left_home)
        for page in touched:
            if live[page] < CLEAN_BELOW * len(listed[page]):
                doomed.add(page)
        moved: list = []
        for page in doomed:
            self._clean(page, moved)
        # The first commit after the earlier layout moves its tokens into pages.
        if self.legacy:
            changed = set(all_tokens)
            moved.extend(token for token in self.legacy if token not in changed)
        legacy_keys = sorted(self.legacy_keys, key=_sort_key)
        self.legacy.clear()
        self.legacy_keys.clear()
        # A token's own tombstone removes it whatever holds it, so those go before the
        # pages; a page's or a bucket's removes only the tokens whose home it still is.
        records: Records = [_stat_record(key, None) for key in legacy_keys if key[0] == "token"]
        self._pages(tokens, values, max_value_bytes, records)
        if moved:
            # In pages of their own: tokens that stayed unchanged while most of their page
            # changed are the slow-changing ones, and pages of them stay live for longer
            # than pages mixed with the tokens every commit changes. With expiry's stamps,
            # in the order they were last seen: an expiry (the least recently seen go) then
            # empties whole pages, to be tombstoned, instead of a share of every page.
            moved_values = _values_of(model, moved)
            kept = moved_values.kept()
            moved, moved_values = list(compress(moved, kept)), moved_values.compress(kept)
            moved, moved_values = _by_last_seen(moved, moved_values)
            self._pages(moved, moved_values, max_value_bytes, records)
        records.extend(_page_record(page, None) for page in sorted(doomed))
        records.extend(_stat_record(key, None) for key in legacy_keys if key[0] == "tokens")
        if len(home) != getattr(model, "vocabulary_size", len(home)):
            # A change went untracked (the model learned before its mark_changes, say): the
            # whole vocabulary into new pages, every other page tombstoned.
            records.extend(self.rewrite(model, max_value_bytes))
        return records

    def rewrites_whole(self, model: Any, changed: int) -> bool:
        """Whether a commit of ``changed`` tokens (those that lost their counts included)
        writes the whole slice instead (:meth:`rewrite`): when they are at least as many as
        the slice holds (the expiry of a slice's first overrun of its budget: it removes a
        third of the vocabulary, and most pages, each listing one of them, would be cleaned),
        the changes' pages and the cleanings' would list about the whole vocabulary anyway,
        and a rewrite spares the index's bookkeeping of every token's move. Not over the
        earlier layout, whose records the first commit of pages moves and tombstones."""
        vocabulary = getattr(model, "vocabulary_size", None)
        return (vocabulary is not None and bool(self.listed) and not self.legacy_keys
                and not self.legacy and changed >= vocabulary)

    def rewrite(self, model: Any, max_value_bytes: int) -> Records:
        """Every token of ``model`` in new pages (with expiry's stamps, in the order they were
        last seen: the next expiry empties whole pages), then the tombstones of every other
        page (each removes the tokens whose home it still is: those no longer held)."""
        old = sorted(self.listed)
        self.home, self.listed, self.live, self.stale = {}, {}, {}, {}
        table = getattr(model, "vocabulary_table", None)
        if table is not None:  # the tokens and their counts from the model's rows
            tokens, *columns = table()
            values = _Columns(*columns)
        else:
            tokens = [key[1] for key in model.stat_keys() if key[0] == "token"]
            tokens, values = _by_last_seen(tokens, _values_of(model, tokens))
        records: Records = []
        self._pages(tokens, values, max_value_bytes, records)
        records.extend(_page_record(page, None) for page in old)
        return records

    def _pages(self, tokens: list, values: _Values, max_value_bytes: int,
               records: Records) -> None:
        for start in range(0, len(tokens), PAGE_ENTRIES):
            self._pack(tokens, values, start, min(start + PAGE_ENTRIES, len(tokens)),
                       max_value_bytes, records)

    def _pack(self, tokens: list, values: _Values, start: int, end: int,
              max_value_bytes: int, records: Records) -> None:
        """The page of ``tokens[start:end]`` (halved until it fits ``max_value_bytes``)."""
        page_tokens = tokens[start:end]
        value = values.page(page_tokens, start, end)
        if len(value) > max_value_bytes and end - start > 1:
            half = start + (end - start) // 2
            self._pack(tokens, values, start, half, max_value_bytes, records)
            self._pack(tokens, values, half, end, max_value_bytes, records)
            return
        page = self.next_page
        self.next_page += 1
        self.listed[page] = page_tokens
        self.live[page] = len(page_tokens)
        self.home.update(dict.fromkeys(page_tokens, page))
        records.append((_page_key(page), value))


def _by_last_seen(tokens: list, values: _Values) -> tuple[list, _Values]:
    """``tokens`` and their ``values`` in the order they were last seen (stable), or as they
    are when the values have no stamps."""
    order = values.by_last_seen()
    if order is None:
        return tokens, values
    return list(map(tokens.__getitem__, order)), values.take(order)


class _Values:
    """The values of a list of tokens, each ``{label: count}`` (or, with expiry's stamps,
    ``{"counts": {label: count}, "seen": n}``; None: no counts), as a page's record holds
    them: a list of ``[token, value]`` pairs (format 1)."""

    __slots__ = ("values",)

    def __init__(self, values: list) -> None:
        self.values = values

    def kept(self) -> list[bool]:
        """Whether each token has counts."""
        return list(map(is_not, self.values, repeat(None)))

    def compress(self, kept: list[bool]) -> _Values:
        return _Values(list(compress(self.values, kept)))

    def by_last_seen(self) -> list[int] | None:
        """The order of the tokens by their last-seen stamps (stable), if they have them."""
        values = self.values
        if not (values and type(values[0]) is dict and "seen" in values[0]):
            return None
        return sorted(range(len(values)), key=lambda i: values[i].get("seen", 0))

    def take(self, order: list[int]) -> _Values:
        return _Values(list(map(self.values.__getitem__, order)))

    def page(self, tokens: list, start: int, end: int) -> bytes:
        return _dumps(list(zip(tokens, self.values[start:end], strict=True)))


class _Columns(_Values):
    """Token values as the model's arrays (``token_table``), a page's record holding them
    as columns (format 2, ``COLUMNS_PAGE``): no dict per token to make, nor to encode."""

    __slots__ = ("labels", "counts", "seen")

    def __init__(self, labels: list[str], counts: np.ndarray, seen: np.ndarray | None
                 ) -> None:
        self.labels, self.counts, self.seen = labels, counts, seen

    def kept(self) -> list[bool]:
        return self.counts.any(axis=1).tolist()

    def compress(self, kept: list[bool]) -> _Columns:
        return self.take(np.flatnonzero(kept))

    def by_last_seen(self) -> np.ndarray | None:
        return None if self.seen is None else np.argsort(self.seen, kind="stable")

    def take(self, order) -> _Columns:
        return _Columns(self.labels, self.counts[order],
                        None if self.seen is None else self.seen[order])

    def page(self, tokens: list, start: int, end: int) -> bytes:
        counts = self.counts[start:end]
        body = {"format": COLUMNS_PAGE, "labels": self.labels, "tokens": tokens,
                "counts": [np.ascontiguousarray(counts[:, c]) for c in range(counts.shape[1])]}
        if self.seen is not None:
            body["seen"] = self.seen[start:end]
        return _dumps(body)


_PAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pages_of(model: Any) -> _Pages:
    pages = _PAGES.get(model)
    if pages is None:
        pages = _PAGES[model] = _Pages()
    return pages


def _page_key(page: int) -> bytes:
    return _dumps([FORMAT_VERSION, "page", page])


def _page_record(page: int, value: bytes | None) -> tuple[bytes, bytes | None]:
    return _page_key(page), value


def _stat_values(model: Any, keys: list[tuple]) -> list[Any]:
    bulk = getattr(model, "stat_values", None)
    return bulk(keys) if bulk is not None else [model.stat_value(key) for key in keys]


def _values_of(model: Any, tokens: list) -> _Values:
    """The values of ``tokens``: the model's ``token_table`` if it has one (its arrays, for
    columnar pages), else its ``token_values``, else its values of the keys
    ``("token", t)``."""
    table = getattr(model, "token_table", None)
    if table is not None:
        return _Columns(*table(tokens))
    bulk = getattr(model, "token_values", None)
    if bulk is not None:
        return _Values(bulk(tokens))
    return _Values(_stat_values(model, [("token", token) for token in tokens]))


def _token_records(model: Any, tokens: list, max_value_bytes: int,
                   whole: bool = False, values: _Values | None = None) -> Records:
    """The records of the changed ``tokens`` (each once; their ``values`` if known): pages of
    their values, the pages they leave tombstoned or cleaned (module docstring). ``whole``:
    every token of the model, in pages numbered from 0 (the slice alone, as a compacted log
    of it holds it)."""
    pages = _Pages() if whole else _pages_of(model)
    if pages.rewrites_whole(model, len(tokens)):
        return pages.rewrite(model, max_value_bytes)
    if values is None:
        values = _values_of(model, tokens)
    return pages.commit(model, tokens, values, max_value_bytes)


def _changed_stat_records(model: Any, max_value_bytes: int) -> Records:
    """The records of the model's keys changed since its ``mark_changes()``; its changed
    tokens as they are (``changed_tokens``) when it says them so."""
    changed_tokens = getattr(model, "changed_tokens", None)
    if changed_tokens is None:
        return _stat_records(model, model.changed_keys(), max_value_bytes)
    count = getattr(model, "changed_token_count", None)
    if count is not None:
        pages = _pages_of(model)
        if pages.rewrites_whole(model, count()):  # the changed tokens need not be listed
            records = pages.rewrite(model, max_value_bytes)
            records.extend(_other_records(model, model.changed_other_keys()))
            return records
    table = getattr(model, "changed_table", None)
    if table is not None:  # the tokens and their counts from the model's changed rows
        tokens, *columns = table()
        return _stat_records(model, model.changed_other_keys(), max_value_bytes,
                             tokens=tokens, values=_Columns(*columns))
    tokens, others = changed_tokens()
    return _stat_records(model, others, max_value_bytes, tokens=tokens)


def _other_records(model: Any, keys: list[tuple]) -> Records:
    """The records of keys that are not tokens (the totals, a whole model), sorted."""
    return [_stat_record(key, model.stat_value(key)) for key in sorted(keys, key=_sort_key)]


def _stat_records(model: Any, keys: Iterable[tuple], max_value_bytes: int,
                  whole: bool = False, tokens: list | None = None,
                  values: _Values | None = None) -> Records:
    """The records of ``keys`` (and of the token keys of ``tokens``, given as the tokens,
    with their ``values`` if known)."""
    tokens = [] if tokens is None else tokens
    others = []
    given = len(tokens)
    for key in keys:
        if key[0] == "token":
            tokens.append(key[1])
        else:
            others.append(key)
    if len(tokens) != given:
        values = None
    # A model with tokens commits them even when none changed: the first commit after the
    # earlier layout moves its tokens into pages, and an untracked change is caught.
    has_tokens = tokens or hasattr(model, "vocabulary_size")
    records = (_token_records(model, tokens, max_value_bytes, whole, values) if has_tokens
               else [])
    records.extend(_other_records(model, others))
    return records


@contextlib.contextmanager
def no_cyclic_gc():
    """Python's cyclic collector off while a commit's records are made: they are hundreds of
    thousands of short-lived lists, floats and dicts (none in a cycle), and every few hundred
    of them the collector would walk the daemon's whole heap (the model, the store): making
    SpamAssassin's records took 3.25 s of CPU with it on against 2.03 s off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def changed_feedback_records(store: FeedbackStore) -> Records:
    """The records of every id and run of ``store`` changed since its ``mark_changes()``."""
    return _feedback_records(store, store.changed_ids(), store.changed_runs())


def changed_model_records(model: Any, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
                          ) -> Records:
    """The records of every key of ``model`` changed since its ``mark_changes()``. No page
    record is larger than ``max_value_bytes`` (what the topic accepts with its key)."""
    with no_cyclic_gc():
        return _changed_stat_records(model, max_value_bytes)


def changed_records(model: Any, store: FeedbackStore,
                    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> Records:
    """The records of every key of ``model`` and id of ``store`` changed since their
    ``mark_changes()``, in the order a commit sends them; the caller marks them again once
    the records are committed. No page record is larger than ``max_value_bytes`` (what the
    topic accepts with its key).

    The store's records come first: a reader keeps the two kinds apart
    (:func:`apply_records`), so their order between them changes nothing it reads, and on
    mail they are most of a commit's bytes (each entry carries its message's token counts)
    and quick to make, so the producer flushes them while the model's pages are made."""
    with no_cyclic_gc():
        records = changed_feedback_records(store)
        records.extend(_changed_stat_records(model, max_value_bytes))
    return records


def all_records(model: Any, store: FeedbackStore,
                max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> Records:
    """Every key's record: the whole slice (what a compacted changelog converges to)."""
    with no_cyclic_gc():
        records = _stat_records(model, model.stat_keys(), max_value_bytes, whole=True)
        records.extend(_feedback_records(
            store, [i for i, entry in store.items() if entry.run is None], store.runs()))
    return records


def _sort_key(key: tuple) -> tuple:
    return (key[0], str(key[1:]))


def _is_token(token: Any) -> bool:
    return type(token) is str or type(token) is int


def page_pairs(body: Any) -> list | None:
    """A token page's value (decoded JSON, of either format) as ``[[token, value], ...]``;
    None if it is not a page's value."""
    if isinstance(body, list):
        if all(type(pair) is list and len(pair) == 2 and _is_token(pair[0]) for pair in body):
            return body
        return None
    if not (type(body) is dict and body.get("format") == COLUMNS_PAGE):
        return None
    labels, tokens, counts = body.get("labels"), body.get("tokens"), body.get("counts")
    seen = body.get("seen")
    if not (type(labels) is list and all(type(label) is str for label in labels)
            and type(tokens) is list and all(map(_is_token, tokens))
            and type(counts) is list and len(counts) == len(labels)
            and all(type(column) is list and len(column) == len(tokens) for column in counts)
            and (seen is None or (type(seen) is list and len(seen) == len(tokens)))):
        return None
    if len(labels) == 1:
        (a,) = labels
        values = [{a: x} if x else {} for x in counts[0]]
    elif len(labels) == 2:
        a, b = labels
        values = [({a: x, b: y} if y else {a: x}) if x else ({b: y} if y else {})
                  for x, y in zip(*counts, strict=True)]
    else:
        values = [{label: x for label, x in zip(labels, row, strict=True) if x}
                  for row in zip(*counts, strict=True)] if labels else [{} for _ in tokens]
    if seen is not None:
        values = [{"counts": value, "seen": stamp}
                  for value, stamp in zip(values, seen, strict=True)]
    return [[token, value] for token, value in zip(tokens, values, strict=True)]


def decode(key: bytes | None, value: bytes | None, where: str) -> tuple:
    """``("stat", key_tuple, value)`` or ``("feedback", id, Entry-fields or None)``."""
    try:
        parts = orjson.loads(key) if key is not None else None
        body = orjson.loads(value) if value is not None else None
    except orjson.JSONDecodeError as error:
        raise ChangelogError(f"{where}: undecodable changelog record ({error})") from None
    if not isinstance(parts, list) or len(parts) < 2 or parts[0] != FORMAT_VERSION:
        raise ChangelogError(
            f"{where}: changelog record key {key!r:.120} is not a streamnb changelog key "
            f"of format {FORMAT_VERSION}"
        )
    kind = parts[1]
    if kind == "feedback" and len(parts) == 3 and isinstance(parts[2], str):
        if body is None:
            return ("feedback", parts[2], None)
        if not (isinstance(body, dict) and isinstance(body.get("seq"), int)
                and (body.get("label") is None or isinstance(body["label"], str))
                and (body.get("clock") is None or (isinstance(body["clock"], int)
                                                   and not isinstance(body["clock"], bool)))
                and "x" in body):
            raise ChangelogError(f"{where}: corrupt feedback entry for {parts[2]!r:.80}")
        return ("feedback", parts[2], body)
    if kind == "token" and len(parts) == 3:
        if not _is_token(parts[2]):
            raise ChangelogError(f"{where}: corrupt token key {parts[2]!r:.80}")
        return ("stat", ("token", parts[2]), body)
    if kind in ("totals", "model"):
        return ("stat", tuple(parts[1:]), body)
    if kind == "page" and len(parts) == 3 and type(parts[2]) is int and parts[2] >= 0:
        if body is None:
            return ("page", parts[2], None)
        pairs = page_pairs(body)
        if pairs is None:
            raise ChangelogError(f"{where}: corrupt token page {parts[2]}")
        return ("page", parts[2], pairs)
    if kind == "entries" and len(parts) == 3 and type(parts[2]) is int:
        if body is not None and not (isinstance(body, list) and all(
                isinstance(item, list) and len(item) in (4, 5) and isinstance(item[0], str)
                and (item[1] is None or isinstance(item[1], str))
                and type(item[2]) is int and (len(item) == 4 or type(item[4]) is int)
                for item in body)):
            raise ChangelogError(f"{where}: corrupt feedback run {parts[2]}")
        return ("run", parts[2], body)
    if kind == "tokens" and len(parts) == 3 and type(parts[2]) is int:
        if body is not None and not (isinstance(body, list) and all(
                type(pair) is list and len(pair) == 2 and _is_token(pair[0])
                for pair in body)):
            raise ChangelogError(f"{where}: corrupt token bucket record {parts[2]}")
        return ("bucket", parts[2], body)
    if kind == "slice" and len(parts) == 2:
        return ("slice", None, body)
    raise ChangelogError(f"{where}: unknown changelog record kind {kind!r:.40}")


def _changed_only(model: Any, stats: dict) -> tuple[dict, dict]:
    """``stats`` less the token values the model already holds, and the old values of the
    tokens left: a page also lists the tokens a commit moved without changing them, and
    setting those (and the global model's follow-up) costs ten times as much as reading the
    values to compare."""
    tokens = [key for key in stats if key[0] == "token"]
    old_values = {}
    for key, old in zip(tokens, _stat_values(model, tokens), strict=True):
        if old == stats[key]:
            del stats[key]
        else:
            old_values[key] = old
    return stats, old_values


def apply_records(
    model: Any,
    store: FeedbackStore | None,
    slice_key: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    where: str = "changelog",
    on_stat: Any = None,
) -> int:
    """Apply records in log order to a slice (``store`` None: feedback records are checked,
    not kept); the last record of a key wins, as after compaction. ``on_stat(changes)``, if
    given, sees ``{key: (old_value, new_value)}`` before the model is set (the global model's
    update). Returns how many records were applied."""
    stats: dict[tuple, Any] = {}
    feedback: dict[str, Any] = {}
    runs: dict[int, Any] = {}
    pages = _pages_of(model)
    count = 0
    for key, value in records:
        kind, name, body = decode(key, value, where)
        count += 1
        if kind == "page":
            if body is None:
                pages.drop_page(name, stats)
            else:
                pages.read_page(name, body, stats)
        elif kind == "stat":
            if name[0] == "token":
                pages.read_own(name[1], body, stats)
            else:
                stats[name] = body
        elif kind == "run":
            runs[name] = body
        elif kind == "feedback":
            feedback[name] = body
        elif kind == "bucket":
            pages.read_bucket(name, body, stats)
        elif kind == "slice" and body is not None and body != slice_identity(model):
            raise ChangelogError(
                f"{where}: the changelog holds the counts of {body!r}, but this daemon's "
                f"model is {slice_identity(model)!r}: use another group_id (a changelog "
                "of its own), or the model it was written with")
    if stats:
        try:
            stats, old_values = _changed_only(model, stats)
        except (ValueError, TypeError, KeyError) as error:
            raise ChangelogError(f"{where}: changelog statistics cannot be applied: {error}"
                                 ) from None
    if stats:
        if on_stat is not None:
            on_stat({key: (old_values[key] if key in old_values else model.stat_value(key),
                           value) for key, value in stats.items()})
        try:
            model.set_stat_values(stats)
        except (ValueError, TypeError, KeyError) as error:
            raise ChangelogError(f"{where}: changelog statistics cannot be applied: {error}"
                                 ) from None
    if store is not None:
        for msg_id, body in feedback.items():
            if body is None:
                store.put(msg_id, None)
                continue
            x_json = FeedbackStore.encode_x(body["x"])
            store.put(msg_id, Entry(slice_key, body["label"], x_json, body["seq"],
                                    body.get("clock")))
        encode = FeedbackStore.encode_x
        for run, body in runs.items():
            store.put_run(run, None if body is None else [
                (msg_id, Entry(slice_key, label, encode(x), seq,
                               clock[0] if clock else None, run))
                for msg_id, label, seq, x, *clock in body])
    return count
