"""The changelog's records: a partition's slice as keyed full values, and back.

Each input partition's state (its model slice and its feedback store) lives in partition p of a
compacted changelog topic. A record is the **full current value** of one key, never an
increment, so applying a record twice is applying it once, and compaction (which keeps the last
record per key) keeps exactly what a reader needs:

=============================  ===============================================================
record key (JSON)              record value (JSON; ``null`` value = tombstone: the key is gone)
=============================  ===============================================================
``[1, "token", t]``            ``{label: count}``, token (or hash bucket) t's counts
``[1, "tokens", b]``           ``[[t, {label: count}], ...]``: every token of bucket b
``[1, "totals"]``              ``{"n_docs": {label: n}, "totals": {label: s}}``
``[1, "model"]``               a model without finer keys (GDA): its whole ``to_state()``
``[1, "entries", r]``          ``[[id, label | null, seq, model input(, clock)], ...]``: run r
``[1, "feedback", id]``        ``{"label": l | null, "seq": n, "x": model input}`` (read only)
``[1, "slice"]``               ``{"kind": k, "counting": {option: value}}``: what the counts are
=============================  ===============================================================

A token's value is in its own record or in its bucket's (b = :func:`token_bucket`, one of
1,024), whichever comes later in the log: a bucket record lists **every** token of its bucket
that has counts, so it holds a token's latest value until a later record of the token's own
key does. A writer writes a bucket whole where most of its tokens changed (the records of a
small vocabulary, an SMS stream's, are then a thousand instead of one per token) and the
changed tokens' own records where few did (a commit of mail touches a small share of a large
vocabulary). A token that loses its counts is always written through its bucket: its own
key's tombstone, then the whole bucket without it, so that no compaction can leave an older
bucket record that still lists it; a bucket too large for one record is instead "dissolved":
each of its tokens' own records and an empty bucket record. :func:`apply_records` applies
both kinds in log order, which is all a reader needs to know.

The feedback store's entries travel in runs of consecutive arrivals
(:mod:`streamnb.daemon.feedback`), a record each, keyed by the run's first arrival number; a
tombstone when the run's last entry is gone. A changelog written before runs holds a record per
entry, keyed by its id: they are read as before, and when such an entry changes its record is
rewritten (or, when it left the store or moved into a run, tombstoned) ahead of the runs.

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
[b'[1,"tokens",886]', b'[1,"totals"]', b'[1,"entries",0]']
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
import zlib
from collections.abc import Iterable
from typing import Any

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
    "slice_record",
    "token_bucket",
]

FORMAT_VERSION = 1

#: Buckets of token records (part of the format: a reader finds a token's bucket by it).
TOKEN_BUCKETS = 1024
#: A commit writes a bucket whole when it has at most this many tokens per changed token: a
#: token value costs 1-2 µs to read and encode in a bucket, its own record 15-60 µs (most of
#: it kafka-python's send). SpamAssassin in commits of 500 mails: 4 wrote 99k records (42 MB),
#: 8 wrote 21k (53 MB).
BUCKET_AMPLIFICATION = 8
#: The largest bucket record a writer makes when the topic's limit is not given (Kafka's
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


def token_bucket(token: Any) -> int:
    """The bucket of a token (a str) or of a hashed model's bucket number (an int).

    >>> token_bucket("win"), token_bucket(5000)
    (886, 904)
    """
    if type(token) is int:
        return token % TOKEN_BUCKETS
    return zlib.crc32(token.encode("utf-8", "surrogatepass")) % TOKEN_BUCKETS


class _Buckets:
    """A writer's index of a model's tokens (those with counts) by bucket; kept up to date
    from the changed keys of each commit, rebuilt if the model's vocabulary size says it
    missed a change."""

    def __init__(self, model: Any):
        self.members: dict[int, set] = {}
        self.size = 0
        for key in model.stat_keys():
            if key[0] == "token":
                self.add(key[1], token_bucket(key[1]))

    def add(self, token: Any, bucket: int) -> None:
        """Note ``token`` (in ``bucket``, its :func:`token_bucket`) as having counts."""
        members = self.members.get(bucket)
        if members is None:
            members = self.members[bucket] = set()
        if token not in members:
            members.add(token)
            self.size += 1

    def discard(self, token: Any, bucket: int) -> None:
        members = self.members.get(bucket)
        if members is not None and token in members:
            members.discard(token)
            self.size -= 1


_BUCKETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _buckets_of(model: Any) -> _Buckets:
    buckets = _BUCKETS.get(model)
    if buckets is None:
        buckets = _BUCKETS[model] = _Buckets(model)
    return buckets


def _stat_values(model: Any, keys: list[tuple]) -> list[Any]:
    bulk = getattr(model, "stat_values", None)
    return bulk(keys) if bulk is not None else [model.stat_value(key) for key in keys]


def _bucket_record(bucket: int, tokens: list, values: list) -> tuple[bytes, bytes]:
    return (_dumps([FORMAT_VERSION, "tokens", bucket]),
            _dumps([[t, v] for t, v in zip(tokens, values, strict=True)]))


def _token_records(model: Any, changed: list[tuple], max_value_bytes: int,
                   whole: bool = False) -> Records:
    """The records of the token keys ``changed`` (all of them: ``whole``), grouped by bucket
    as the module docstring says.

    Values are keyed by token, and each changed token's bucket is computed once: for mail,
    whose commits write most of a large vocabulary's buckets whole, the index and tuple keys
    were a third of the time to make the records."""
    buckets = _buckets_of(model)
    values = dict(zip([key[1] for key in changed], _stat_values(model, changed), strict=True))
    by_bucket: dict[int, list] = {}
    add, discard = buckets.add, buckets.discard
    for token, value in values.items():
        bucket = token_bucket(token)
        if value is None:
            discard(token, bucket)
        else:
            add(token, bucket)
        tokens = by_bucket.get(bucket)
        if tokens is None:
            by_bucket[bucket] = [token]
        else:
            tokens.append(token)
    if buckets.size != getattr(model, "vocabulary_size", buckets.size):
        buckets = _BUCKETS[model] = _Buckets(model)  # a change went untracked: re-index
    # Which buckets are written whole; their other tokens' values are read in one call.
    plan = []
    unread: list = []
    for bucket in sorted(by_bucket):
        tokens = by_bucket[bucket]
        deleted = sorted(t for t in tokens if values[t] is None)
        held = buckets.members.get(bucket, ())
        if not whole and not deleted and len(held) > BUCKET_AMPLIFICATION * len(tokens):
            plan.append((bucket, sorted(tokens), None))
            continue
        members = sorted(held)
        unread.extend(t for t in members if t not in values)
        plan.append((bucket, members, deleted))
    values.update(zip(unread, _stat_values(model, [("token", t) for t in unread]),
                      strict=True))
    records: Records = []
    for bucket, members, deleted in plan:
        if deleted is None:  # the changed tokens' own records
            records.extend(_stat_record(("token", t), values[t]) for t in members)
            continue
        record = _bucket_record(bucket, members, [values[t] for t in members])
        records.extend(_stat_record(("token", t), None) for t in deleted)
        if len(record[1]) <= max_value_bytes:
            records.append(record)
            continue
        # Too large for one record: every token in its own record, and an empty bucket
        # record, so that no older bucket record of it outlives compaction.
        records.extend(_stat_record(("token", t), values[t]) for t in members)
        records.append(_bucket_record(bucket, [], []))
    return records


def _stat_records(model: Any, keys: Iterable[tuple], max_value_bytes: int,
                  whole: bool = False) -> Records:
    tokens, others = [], []
    for key in keys:
        (tokens if key[0] == "token" else others).append(key)
    records = _token_records(model, tokens, max_value_bytes, whole) if tokens else []
    records.extend(_stat_record(key, model.stat_value(key))
                   for key in sorted(others, key=_sort_key))
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


def changed_records(model: Any, store: FeedbackStore,
                    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> Records:
    """The records of every key of ``model`` and id of ``store`` changed since their
    ``mark_changes()``; the caller marks them again once the records are committed. No
    bucket record is larger than ``max_value_bytes`` (what the topic accepts with its key)."""
    with no_cyclic_gc():
        records = _stat_records(model, model.changed_keys(), max_value_bytes)
        records.extend(_feedback_records(store, store.changed_ids(), store.changed_runs()))
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
    if kind in ("token", "totals", "model"):
        return ("stat", tuple(parts[1:]), body)
    if kind == "entries" and len(parts) == 3 and type(parts[2]) is int:
        if body is not None and not (isinstance(body, list) and all(
                isinstance(item, list) and len(item) in (4, 5) and isinstance(item[0], str)
                and (item[1] is None or isinstance(item[1], str))
                and type(item[2]) is int and (len(item) == 4 or type(item[4]) is int)
                for item in body)):
            raise ChangelogError(f"{where}: corrupt feedback run {parts[2]}")
        return ("run", parts[2], body)
    if kind == "tokens" and len(parts) == 3 and type(parts[2]) is int:
        if not (isinstance(body, list) and all(
                isinstance(pair, list) and len(pair) == 2 for pair in body)):
            raise ChangelogError(f"{where}: corrupt token bucket record {parts[2]}")
        return ("bucket", parts[2], body)
    if kind == "slice" and len(parts) == 2:
        return ("slice", None, body)
    raise ChangelogError(f"{where}: unknown changelog record kind {kind!r:.40}")


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
    from_buckets: set[tuple] = set()  # keys whose latest value came from a bucket record
    count = 0
    for key, value in records:
        kind, name, body = decode(key, value, where)
        count += 1
        if kind == "slice":
            if body is not None and body != slice_identity(model):
                raise ChangelogError(
                    f"{where}: the changelog holds the counts of {body!r}, but this daemon's "
                    f"model is {slice_identity(model)!r}: use another group_id (a changelog "
                    "of its own), or the model it was written with")
            continue
        if kind == "bucket":
            for token, value in body:
                stats["token", token] = value
                from_buckets.add(("token", token))
            continue
        if kind == "stat":
            from_buckets.discard(name)
        if kind == "run":
            runs[name] = body
            continue
        (stats if kind == "stat" else feedback)[name] = body
    if from_buckets:
        # A bucket record also lists the tokens its commit did not change: those the model
        # already holds at that value are left out (setting them, and the global model's
        # follow-up, costs ten times as much as reading the values to compare).
        unchanged = list(from_buckets)
        for key, value in zip(unchanged, _stat_values(model, unchanged), strict=True):
            if value == stats[key]:
                del stats[key]
    if stats:
        _BUCKETS.pop(model, None)  # a writer's index is rebuilt from what the model holds
        if on_stat is not None:
            on_stat({key: (model.stat_value(key), value) for key, value in stats.items()})
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
            x_json = orjson.dumps(body["x"], option=orjson.OPT_SERIALIZE_NUMPY)
            store.put(msg_id, Entry(slice_key, body["label"], x_json, body["seq"],
                                    body.get("clock")))
        dumps, numpy = orjson.dumps, orjson.OPT_SERIALIZE_NUMPY
        for run, body in runs.items():
            store.put_run(run, None if body is None else [
                (msg_id, Entry(slice_key, label, dumps(x, option=numpy), seq,
                               clock[0] if clock else None, run))
                for msg_id, label, seq, x, *clock in body])
    return count
