"""A slice <-> its changelog records: the properties failover and the global model rely on."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.daemon.changelog import (
    DEFAULT_MAX_VALUE_BYTES,
    ChangelogError,
    all_records,
    apply_records,
    changed_records,
    decode,
    slice_record,
)
from streamnb.daemon.feedback import FeedbackStore, decide
from streamnb.daemon.partitions import Partitions
from streamnb.models import make_model

WORDS = st.sampled_from(["win", "cash", "lunch", "today", "prize", "hi", "meet", "x"])
MESSAGE = st.dictionaries(WORDS, st.integers(1, 3), max_size=5)
LABEL = st.sampled_from(["ham", "spam"])
IDS = st.sampled_from([f"m{i}" for i in range(12)])
# What a partition's owner does: a message (labelled or not) or feedback for an id.
EVENT = st.one_of(
    st.tuples(st.just("message"), IDS, MESSAGE, st.one_of(st.none(), LABEL)),
    st.tuples(st.just("feedback"), IDS, st.just(None), LABEL),
)
# Events in commits: each inner list is applied, then its changed keys are committed.
COMMITS = st.lists(st.lists(EVENT, max_size=8), max_size=8)
KINDS = ["multinomial", "bernoulli"]


def run(model, store, event) -> None:
    """The daemon's processing of one event, as far as the slice is concerned."""
    kind, msg_id, x, label = event
    entry = store.get(msg_id)
    if kind == "message" and entry is None:
        if label is not None:
            model.learn_one(x, label)
        store.remember(msg_id, "in:0", x, label)
        return
    if entry is None or label is None:
        return
    outcome = decide(entry, label)
    if outcome == "relabelled":
        model.unlearn_one(entry.x, entry.label)
    if outcome in ("learned", "relabelled"):
        model.learn_one(entry.x, label)
        store.set_label(msg_id, label)


def commit_log(model, store, commits, step=None, max_value_bytes=DEFAULT_MAX_VALUE_BYTES):
    """``model`` and ``store`` after ``commits`` (each a list of events, applied with
    ``step``, by default :func:`run`), and the changelog their commits wrote."""
    step = step or run
    model.mark_changes()
    store.mark_changes()
    log = []
    for events in commits:
        for event in events:
            step(model, store, event)
        log.extend(changed_records(model, store, max_value_bytes))
        model.mark_changes()
        store.mark_changes()
    return model, store, log


def owner_log(kind: str, commits, max_ids: int):
    """The live slice after ``commits``, and the changelog its commits wrote."""
    return commit_log(make_model(kind), FeedbackStore(max_ids=max_ids), commits)


def compact(log):
    """What log compaction keeps: the last record of each key, in log order (tombstones may
    be kept or dropped; both are tried)."""
    last = {key: i for i, (key, _) in enumerate(log)}
    return [record for i, record in enumerate(log) if last[record[0]] == i]


def same_store(a: FeedbackStore, b: FeedbackStore) -> bool:
    """The same entries, in the same order, grouped in the same changelog runs."""
    return (orjson.dumps(a.to_state()["entries"]) == orjson.dumps(b.to_state()["entries"])
            and [e.run for _, e in a.items()] == [e.run for _, e in b.items()])


@pytest.mark.parametrize("kind", KINDS)
@given(commits=COMMITS, max_ids=st.integers(2, 6), drop_tombstones=st.booleans())
@settings(max_examples=80, deadline=None)
def test_a_slice_restored_from_the_compacted_log_equals_the_live_slice(
        kind, commits, max_ids, drop_tombstones):
    model, store, log = owner_log(kind, commits, max_ids)
    compacted = compact(log)
    if drop_tombstones:
        compacted = [(k, v) for k, v in compacted if v is not None]
    restored, restored_store = make_model(kind), FeedbackStore(max_ids=max_ids)
    apply_records(restored, restored_store, "in:0", compacted)
    restored_store.order_by_arrival()
    assert restored.to_state() == model.to_state()
    assert same_store(restored_store, store)
    # and the restored slice goes on exactly as the live one: same evictions, same learning
    more = [("message", f"n{i}", {"hi": 1}, "ham") for i in range(3)]
    for event in more:
        run(model, store, event)
        run(restored, restored_store, event)
    assert same_store(restored_store, store) and restored.to_state() == model.to_state()


@pytest.mark.parametrize("kind", KINDS)
@given(commits=COMMITS, split=st.integers(0, 100))
@settings(max_examples=80, deadline=None)
def test_applying_the_same_records_twice_equals_once(kind, commits, split):
    model, store, log = owner_log(kind, commits, 5)
    once, once_store = make_model(kind), FeedbackStore(max_ids=5)
    apply_records(once, once_store, "in:0", log)
    twice, twice_store = make_model(kind), FeedbackStore(max_ids=5)
    cut = split % (len(log) + 1)
    # a reader that replays a prefix again (it crashed after applying it) then reads on
    apply_records(twice, twice_store, "in:0", log[:cut])
    apply_records(twice, twice_store, "in:0", log)
    apply_records(twice, twice_store, "in:0", log)
    for reader, reader_store in ((once, once_store), (twice, twice_store)):
        reader_store.order_by_arrival()
        assert reader.to_state() == model.to_state()
        assert same_store(reader_store, store)


@pytest.mark.parametrize("kind", KINDS + ["gda"])
def test_slice_to_records_and_back(kind):
    model, store = make_model(kind), FeedbackStore()
    x = [1.0, 2.0] if kind == "gda" else {"win": 2, "cash": 1}
    y = [0.5, 1.0] if kind == "gda" else {"lunch": 1}
    model.learn_one(x, "spam")
    model.learn_one(y, "ham")
    store.remember("a", "in:0", x, "spam")
    store.remember("b", "in:0", y, None)
    copy, copy_store = make_model(kind), FeedbackStore()
    apply_records(copy, copy_store, "in:0", all_records(model, store))
    assert copy.to_state() == model.to_state()
    assert same_store(copy_store, store)


@given(slices=st.lists(COMMITS, min_size=2, max_size=3))
@settings(max_examples=40, deadline=None)
def test_the_global_model_is_the_sum_of_slices_read_from_their_changelogs(slices):
    """A daemon owning none of the partitions, tailing every changelog commit by commit,
    holds exactly the sum of the owners' slices."""
    reader = Partitions(lambda: make_model("multinomial"), lambda key: FeedbackStore(max_ids=5))
    owners = [owner_log("multinomial", commits, 5) for commits in slices]
    for p, (_, _, log) in enumerate(owners):
        for i in range(0, len(log), 3):  # in polls of a few records
            reader.apply_remote(f"in:{p}", log[i:i + 3])
    total = make_model("multinomial")
    for model, _, _ in owners:
        total += model
    assert reader.live.to_state() == total.to_state()


@pytest.mark.parametrize(
    "key, value, message",
    [
        (b"not json", b"{}", "undecodable changelog record"),
        (b'[2,"token","a"]', b"{}", "not a streamnb changelog key of format 1"),
        (b'[1,"vector","a"]', b"{}", "unknown changelog record kind"),
        (b'[1,"feedback","m"]', b'{"label": 3}', "corrupt feedback entry"),
        (b'[1,"token","a"]', b'{"spam": "x"}', "cannot be applied"),
        (b'[1,"token","a"]', b"\xff", "undecodable changelog record"),
    ],
)
def test_an_undecodable_record_is_an_error_naming_where(key, value, message):
    with pytest.raises(ChangelogError, match=message) as error:
        apply_records(make_model("multinomial"), FeedbackStore(), "in:0", [(key, value)],
                      where="changelog in-changelog:0 offset 7")
    assert "in-changelog:0 offset 7" in str(error.value)


@pytest.mark.parametrize("other", [("bernoulli", {}), ("multinomial", {"n_buckets": 64}),
                                   ("multinomial", {"repeated_words": "binary"})])
def test_a_changelog_of_counts_that_mean_something_else_is_refused(other):
    kind, options = other
    writer = make_model(kind, **options)
    writer.learn_one({"win": 1}, "spam")
    records = [*all_records(writer, FeedbackStore()), slice_record(writer)]
    with pytest.raises(ChangelogError, match="the changelog holds the counts of"):
        apply_records(make_model("multinomial"), FeedbackStore(), "in:0", records)
    same = make_model(kind, **options)  # and the model it was written with reads it
    apply_records(same, FeedbackStore(), "in:0", records)
    assert same.to_state() == writer.to_state()


def test_decode_tells_stats_from_feedback():
    assert decode(b'[1,"totals"]', None, "x") == ("stat", ("totals",), None)
    assert decode(b'[1,"feedback","m1"]', None, "x") == ("feedback", "m1", None)


def test_a_commit_holds_its_records_at_about_their_length():
    """A commit holds all its records at once (an expiring one: a tombstone per expired token);
    orjson's output bytes carry a ~4 KiB buffer each, so the records are exact-size copies."""
    import tracemalloc

    model = make_model("multinomial")
    model.track_last_seen()
    model.learn_one({f"word{i}": 1 for i in range(5000)}, "spam")
    model.mark_changes()
    model.learn_one({f"new{i}": 1 for i in range(10)}, "ham")
    model.expire(10, 0)  # every token goes: 5,010 tombstones
    store = FeedbackStore()
    store.mark_changes()
    for i in range(500):
        store.remember(f"m{i}", "in:0", {"win": 1}, "spam")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = changed_records(model, store)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert sum(value is None for _, value in records) >= 5010  # a tombstone per token
    payload = sum(len(key) + len(value or b"") for key, value in records) / len(records)
    per_record = held / len(records)  # the payload, the bytes and tuple headers, the list
    assert per_record < payload + 250, f"{per_record:.0f} bytes held per record"
# ---------------------------------------------------------------- token bucket records
# Layouts that force every way a commit writes tokens: (buckets, amplification, the largest
# bucket record). The shipped one writes small buckets whole; amplification 0 writes a bucket
# whole only when a token of it loses its counts; a tiny record limit dissolves buckets.
LAYOUTS = [(1024, 4, 1_000_000), (2, 0, 1_000_000), (1, 1, 60), (3, 2, 200), (1, 1, 10_000)]
EXPIRING_EVENT = st.one_of(
    EVENT, st.tuples(st.just("expire"), st.integers(0, 5), st.just(None), st.just(None)))
EXPIRING_COMMITS = st.lists(st.lists(EXPIRING_EVENT, max_size=8), max_size=8)


def expiring_model(kind):
    model = make_model(kind)
    model.track_last_seen()
    return model


def run_expiring(model, store, event) -> None:
    """:func:`run`, with token expiry (what ``Partitions.expire`` and ``Partitions.learn`` do
    to an owned slice)."""
    kind, msg_id, x, label = event
    if kind == "expire":
        model.expire(msg_id, msg_id)
        return
    entry = store.get(msg_id)
    if kind == "feedback" and entry is not None and decide(entry, label) == "relabelled":
        model.unlearn_one(model.unlearnable_part(entry.x, entry.label), entry.label)
        model.learn_one(entry.x, label)
        store.set_label(msg_id, label)
        return
    run(model, store, event)


def expiring_log(kind, commits, max_value_bytes):
    return commit_log(expiring_model(kind), FeedbackStore(max_ids=5), commits, run_expiring,
                      max_value_bytes)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
@given(commits=EXPIRING_COMMITS, drop_tombstones=st.booleans(), split=st.integers(0, 100))
@settings(max_examples=60, deadline=None)
def test_token_records_in_buckets_restore_exactly_after_compaction(
        layout, kind, commits, drop_tombstones, split):
    """Whatever mix of bucket records, own records, tombstones and dissolved buckets the
    commits wrote (expiry removing tokens in between), the compacted log restores the live
    slice, and a reader that replays a prefix again ends up the same."""
    import streamnb.daemon.changelog as changelog

    n_buckets, amplification, max_value_bytes = layout
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changelog, "TOKEN_BUCKETS", n_buckets)
        patch.setattr(changelog, "BUCKET_AMPLIFICATION", amplification)
        model, store, log = expiring_log(kind, commits, max_value_bytes)
        compacted = compact(log)
        if drop_tombstones:
            compacted = [(k, v) for k, v in compacted if v is not None]
        restored = expiring_model(kind)
        apply_records(restored, FeedbackStore(max_ids=5), "in:0", compacted)
        assert restored.to_state() == model.to_state()
        replayed = expiring_model(kind)
        cut = split % (len(log) + 1)
        apply_records(replayed, FeedbackStore(max_ids=5), "in:0", log[:cut])
        apply_records(replayed, FeedbackStore(max_ids=5), "in:0", log)
        assert replayed.to_state() == model.to_state()
        # the restored slice, now an owner, writes records that keep the log exact
        restored.mark_changes()
        restored_store = FeedbackStore()
        restored_store.mark_changes()
        more = [("message", "n1", {"win": 1, "new": 2}, "ham"), ("expire", 2, None, None)]
        for event in more:
            run_expiring(model, store, event)
            run_expiring(restored, restored_store, event)
        log = compact(log + changed_records(restored, restored_store, max_value_bytes))
        again = expiring_model(kind)
        apply_records(again, FeedbackStore(), "in:0", log)
        assert again.to_state() == model.to_state()


@pytest.mark.parametrize("kind", KINDS)
@given(messages=st.lists(st.tuples(MESSAGE, LABEL), max_size=12), expired=st.integers(0, 6))
@settings(max_examples=60, deadline=None)
def test_stat_values_in_bulk_equal_one_by_one(kind, messages, expired):
    for model in (make_model(kind), expiring_model(kind)):
        for x, label in messages:
            model.learn_one(x, label)
        if model.tracks_last_seen:
            model.expire(expired, expired)
        keys = [*model.stat_keys(), ("token", "never-seen"), ("totals",)]
        assert model.stat_values(keys) == [model.stat_value(key) for key in keys]


def test_a_commit_of_few_changes_in_a_large_vocabulary_writes_each_token_alone():
    model = make_model("multinomial")
    model.learn_one({f"w{i}": 1 for i in range(20_000)}, "ham")
    model.mark_changes()
    model.learn_one({"w1": 1, "w2": 1, "fresh": 1}, "spam")
    store = FeedbackStore()
    store.mark_changes()
    kinds = [orjson.loads(key)[1] for key, _ in changed_records(model, store)]
    assert sorted(kinds) == ["token", "token", "token", "totals"]
    # and the whole slice is one record per bucket
    whole = [orjson.loads(key)[1] for key, _ in all_records(model, FeedbackStore())]
    assert whole.count("tokens") == 1024 and "token" not in whole


def test_a_token_that_loses_its_counts_is_not_brought_back_by_an_older_bucket_record():
    """Its bucket was written whole, then later commits wrote tokens alone; when the token
    expires, the bucket is written again without it (a tombstone alone would leave the older
    bucket record listing it once compaction drops the tombstone)."""
    import streamnb.daemon.changelog as changelog

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changelog, "TOKEN_BUCKETS", 1)
        patch.setattr(changelog, "BUCKET_AMPLIFICATION", 1)
        commits = [[("message", "m1", {"a": 1, "b": 1}, "ham")],
                   [("message", "m2", {"c": 1, "d": 1, "e": 1}, "spam")],
                   [("expire", 4, None, None)]]
        model, _, log = expiring_log("multinomial", commits, 10_000)
        assert model.vocabulary_size == 4
        survivors = [(k, v) for k, v in compact(log) if v is not None]
        restored = expiring_model("multinomial")
        apply_records(restored, FeedbackStore(), "in:0", survivors)
        assert restored.to_state() == model.to_state()


def test_feedback_entries_travel_in_runs_of_consecutive_arrivals():
    store = FeedbackStore(run_max_bytes=2000)
    store.mark_changes()
    for i in range(300):
        store.remember(f"m{i}", "in:0", {"w": 1}, None)
    model = make_model("multinomial")
    model.mark_changes()
    records = changed_records(model, store)
    # 300 short entries (41 bytes at most each) in runs of at most 128 entries and 2000 bytes
    assert 300 / 128 <= len(records) <= 300 / 40
    assert all(len(value) <= 2000 for _, value in records)
    restored = FeedbackStore(run_max_bytes=2000)
    apply_records(make_model("multinomial"), restored, "in:0", records)
    assert same_store(restored, store)


def test_a_changelog_with_a_record_per_entry_is_read_and_rewritten_into_runs():
    """The layout before runs (a record per entry, keyed by id) is read, and an entry of it
    that changes is tombstoned under its own key, so the compacted log stays exact."""
    from streamnb.daemon.changelog import _feedback_record
    from streamnb.daemon.feedback import Entry

    model = make_model("multinomial")
    model.learn_one({"win": 1}, "spam")
    old = [_feedback_record(f"m{i}", Entry("in:0", "spam" if i else None, b'{"win":1}', i))
           for i in range(4)]
    log = [*all_records(model, FeedbackStore()), *old]
    live, store = make_model("multinomial"), FeedbackStore(max_ids=4)
    apply_records(live, store, "in:0", log)
    live.mark_changes()
    store.mark_changes()
    run(live, store, ("feedback", "m0", None, "ham"))  # learned: m0's own record rewritten
    run(live, store, ("message", "m9", {"cash": 1}, "spam"))  # evicts m1 (tombstone)
    log += changed_records(live, store)
    for records in (log, [(k, v) for k, v in compact(log) if v is not None]):
        restored, restored_store = make_model("multinomial"), FeedbackStore(max_ids=4)
        apply_records(restored, restored_store, "in:0", records)
        restored_store.order_by_arrival()
        assert restored.to_state() == live.to_state()
        assert same_store(restored_store, store)
