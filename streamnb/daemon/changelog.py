"""The changelog's records: a partition's slice as keyed full values, and back.

Each input partition's state (its model slice and its feedback store) lives in partition p of a
compacted changelog topic. A record is the **full current value** of one key, never an
increment, so applying a record twice is applying it once, and compaction (which keeps the last
record per key) keeps exactly what a reader needs:

=============================  ===============================================================
record key (JSON)              record value (JSON; ``null`` value = tombstone: the key is gone)
=============================  ===============================================================
``[1, "token", t]``            ``{label: count}``, token (or hash bucket) t's counts
``[1, "totals"]``              ``{"n_docs": {label: n}, "totals": {label: s}}``
``[1, "model"]``               a model without finer keys (GDA): its whole ``to_state()``
``[1, "feedback", id]``        ``{"label": l | null, "seq": n, "x": model input}``
``[1, "slice"]``               ``{"kind": k, "counting": {option: value}}``: what the counts are
=============================  ===============================================================

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
[b'[1,"token","win"]', b'[1,"totals"]', b'[1,"feedback","m1"]']
>>> copy, copy_store = make_model("bernoulli"), FeedbackStore()
>>> apply_records(copy, copy_store, "mail:0", records)
3
>>> copy.to_state() == model.to_state(), copy_store.get("m1").label
(True, 'spam')
"""

from __future__ import annotations

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
    "slice_record",
]

FORMAT_VERSION = 1

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
    key = _dumps([FORMAT_VERSION, "feedback", msg_id])
    if entry is None:
        return key, None
    body = {"label": entry.label, "seq": entry.seq, "x": orjson.Fragment(entry.x_json)}
    if entry.clock is not None:  # decay: the clock its label was learned at
        body["clock"] = entry.clock
    return key, _dumps(body)


def slice_record(model: Any) -> tuple[bytes, bytes]:
    """The record saying what the slice's counts are (model kind, counting options)."""
    return orjson.dumps([FORMAT_VERSION, "slice"]), orjson.dumps(slice_identity(model))


def slice_identity(model: Any) -> dict:
    counting = {name: getattr(model, name) for name in getattr(model, "_COUNTING_OPTIONS", ())}
    if counting.get("half_life", 0) is None:
        del counting["half_life"]  # no decay: the identity changelogs written before it had
    return {"kind": getattr(model, "kind", type(model).__name__), "counting": counting}


def changed_records(model: Any, store: FeedbackStore) -> Records:
    """The records of every key of ``model`` and id of ``store`` changed since their
    ``mark_changes()``; the caller marks them again once the records are committed."""
    records = [_stat_record(key, model.stat_value(key)) for key in sorted(
        model.changed_keys(), key=_sort_key)]
    records.extend(_feedback_record(i, store.get(i)) for i in store.changed_ids())
    return records


def all_records(model: Any, store: FeedbackStore) -> Records:
    """Every key's record: the whole slice (what a compacted changelog converges to)."""
    records = [_stat_record(key, model.stat_value(key))
               for key in sorted(model.stat_keys(), key=_sort_key)]
    records.extend(_feedback_record(msg_id, entry) for msg_id, entry in store.items())
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
        (stats if kind == "stat" else feedback)[name] = body
    if stats:
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
    return count
