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
    changed_feedback_records,
    changed_model_records,
    changed_records,
    decode,
    page_pairs,
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


def commit_log(model, store, commits, step=None, max_value_bytes=DEFAULT_MAX_VALUE_BYTES,
               on_commit=None, make_records=None):
    """``model`` and ``store`` after ``commits`` (each a list of events, applied with
    ``step``, by default :func:`run`), and the changelog their commits wrote (each commit's
    records made by ``make_records(model, store)``, by default :func:`changed_records`);
    ``on_commit(records, log)`` sees each commit's records and the log so far."""
    step = step or run
    model.mark_changes()
    store.mark_changes()
    log = []
    for events in commits:
        for event in events:
            step(model, store, event)
        records = (make_records(model, store) if make_records is not None
                   else changed_records(model, store, max_value_bytes))
        log.extend(records)
        model.mark_changes()
        store.mark_changes()
        if on_commit is not None:
            on_commit(records, log)
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
    """A commit holds all its records at once (a commit of a large vocabulary, tens of MB);
    orjson's output bytes carry a ~4 KiB buffer each, so the records are exact-size copies."""
    import gc
    import tracemalloc

    import streamnb.daemon.changelog as changelog

    model = make_model("multinomial")
    model.track_last_seen()
    model.mark_changes()
    model.learn_one({f"word{i}": 1 for i in range(5000)}, "spam")
    store = FeedbackStore()
    store.mark_changes()
    for i in range(500):
        store.remember(f"m{i}", "in:0", {"win": 1}, "spam")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = changed_records(model, store)
        del changelog._PAGES[model]  # the page index is not the records' memory
        gc.collect()  # and empties the free lists (of the key tuples made and dropped)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    payload = sum(len(key) + len(value or b"") for key, value in records) / len(records)
    per_record = held / len(records)  # the payload, the bytes and tuple headers, the list
    assert per_record < payload + 250, f"{per_record:.0f} bytes held per record"
    # and the expiry of every token is a handful of page tombstones, not one per token
    model.mark_changes()
    changed_records(model, store)  # the index again (the commit rewrites the whole slice)
    model.mark_changes()
    model.learn_one({f"new{i}": 1 for i in range(10)}, "ham")
    model.expire(10, 0)
    store.mark_changes()
    kinds = [orjson.loads(key)[1] for key, value in changed_records(model, store)
             if value is None]
    assert kinds == ["page"] * 3  # 5,000 tokens in pages of PAGE_ENTRIES = 2,048


# ---------------------------------------------------------------- token pages
# Layouts that force every way a commit writes pages: (values a page holds at most, the
# largest page record). The shipped one; a page per token; pages split by their bytes.
LAYOUTS = [(2048, DEFAULT_MAX_VALUE_BYTES), (1, DEFAULT_MAX_VALUE_BYTES), (3, 10_000),
           (2048, 60), (4, 150)]
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


def any_compaction(log, rng):
    """A log as Kafka's cleaner may leave it at any moment: the last record of each key kept,
    any of the records before it dropped, and a tombstone that is the last of its key dropped
    only once every record before it of its key is (the cleaner keeps a tombstone
    ``delete.retention.ms`` past the pass that removed what it superseded)."""
    last = {key: i for i, (key, _) in enumerate(log)}
    kept = [i == last[key] or rng.random() < 0.5 for i, (key, _) in enumerate(log)]
    earlier_kept = set()
    for i, (key, _) in enumerate(log):
        if kept[i] and i != last[key]:
            earlier_kept.add(key)
    for key, i in last.items():
        if log[i][1] is None and key not in earlier_kept and rng.random() < 0.5:
            kept[i] = False
    return [record for record, keep in zip(log, kept, strict=True) if keep]


def page_entries(log):
    """The values the live pages of a (compacted) log list, by page."""
    pages = {}
    for key, value in log:
        name = orjson.loads(key)
        if name[1] == "page":
            pages[name[2]] = None if value is None else page_pairs(orjson.loads(value))
    return {n: body for n, body in pages.items() if body is not None}


def restored_from(kind, records):
    model = expiring_model(kind)
    apply_records(model, FeedbackStore(max_ids=5), "in:0", records)
    return model


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
@given(commits=EXPIRING_COMMITS, seed=st.integers(0, 2**32), split=st.integers(0, 100))
@settings(max_examples=60, deadline=None)
def test_token_pages_restore_exactly_after_any_compaction(layout, kind, commits, seed, split):
    """Whatever pages, cleanings and tombstones the commits wrote (expiry and relabels
    removing tokens in between), any compaction of the log restores the live slice, a reader
    that replays a prefix again ends up the same, and the restored slice, as the new owner,
    writes on a log that stays exact."""
    import random

    import streamnb.daemon.changelog as changelog

    entries, max_value_bytes = layout
    rng = random.Random(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changelog, "PAGE_ENTRIES", entries)
        model, store, log = expiring_log(kind, commits, max_value_bytes)
        for records in (log, compact(log), any_compaction(log, rng), any_compaction(log, rng)):
            assert restored_from(kind, records).to_state() == model.to_state()
        replayed = expiring_model(kind)
        cut = split % (len(log) + 1)
        apply_records(replayed, FeedbackStore(max_ids=5), "in:0", log[:cut])
        apply_records(replayed, FeedbackStore(max_ids=5), "in:0", log)
        assert replayed.to_state() == model.to_state()
        # the slice restored from a compaction, now an owner, writes on that log records that
        # keep it exact (its page index is the one it read; a page number whose records are
        # all gone may be written again)
        log = any_compaction(log, rng)
        restored = restored_from(kind, log)
        restored.mark_changes()
        restored_store = FeedbackStore()
        restored_store.mark_changes()
        more = [("message", "n1", {"win": 1, "new": 2}, "ham"), ("expire", 2, None, None)]
        for event in more:
            run_expiring(model, store, event)
            run_expiring(restored, restored_store, event)
        log = log + changed_records(restored, restored_store, max_value_bytes)
        for records in (log, any_compaction(log, rng)):
            assert restored_from(kind, records).to_state() == model.to_state()


@pytest.mark.parametrize("layout", LAYOUTS)
@given(commits=EXPIRING_COMMITS)
@settings(max_examples=60, deadline=None)
def test_pages_fit_the_topic_and_the_live_pages_list_at_most_twice_the_vocabulary(
        layout, commits):
    import streamnb.daemon.changelog as changelog

    entries, max_value_bytes = layout
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changelog, "PAGE_ENTRIES", entries)
        model = expiring_model("multinomial")

        def check(records, log):
            for key, value in records:
                if orjson.loads(key)[1] == "page" and value is not None:
                    listed = len(page_pairs(orjson.loads(value)))
                    assert 1 <= listed <= entries
                    assert len(value) <= max_value_bytes or listed == 1
            live = page_entries(compact(log))
            home = {t: n for n in sorted(live) for t, _ in live[n]}  # the last page listing t
            for n, body in live.items():  # every live page is at least half live
                assert 2 * sum(home[t] == n for t, _ in body) >= len(body)
            listed = sum(len(body) for body in live.values())
            assert listed <= 2 * model.vocabulary_size
            assert {t for body in live.values() for t, _ in body} == {
                key[1] for key in model.stat_keys() if key[0] == "token"}

        commit_log(model, FeedbackStore(max_ids=5), commits, run_expiring, max_value_bytes,
                   on_commit=check)


def test_a_token_that_loses_its_counts_is_not_brought_back_by_an_older_page():
    """``a`` is written in page 0 beside ``b``, again in page 1 (page 0 still lists its older
    value, and is half live: not cleaned); when ``a`` loses its counts, page 0 is cleaned
    too, not only its home: once compaction has dropped page 1 and its tombstone, page 0
    would bring it back."""
    def step(model, store, event):
        getattr(model, event[0])(event[1], "ham")

    commits = [[("learn_one", {"a": 1, "b": 1})], [("learn_one", {"a": 1})],
               [("unlearn_one", {"a": 1}), ("unlearn_one", {"a": 1})]]
    model, _, log = commit_log(make_model("multinomial"), FeedbackStore(), commits, step)
    assert [key[1] for key in model.stat_keys() if key[0] == "token"] == ["b"]
    pages = [(orjson.loads(k)[2], v is None) for k, v in log if orjson.loads(k)[1] == "page"]
    assert pages == [(0, False), (1, False), (2, False), (0, True), (1, True)]
    survivors = [(k, v) for k, v in compact(log) if v is not None]
    restored = make_model("multinomial")
    apply_records(restored, FeedbackStore(), "in:0", survivors)
    assert restored.to_state() == model.to_state()


def test_a_commit_writes_its_changed_tokens_in_a_page_whatever_the_vocabulary():
    model = make_model("multinomial")
    store = FeedbackStore()
    model.mark_changes()
    store.mark_changes()
    model.learn_one({f"w{i}": 1 for i in range(20_000)}, "ham")
    first = changed_records(model, store)
    assert [orjson.loads(key)[1] for key, _ in first] == ["page"] * 10 + ["totals"]
    model.mark_changes()
    model.learn_one({"w1": 1, "w2": 1, "fresh": 1}, "spam")
    records = changed_records(model, store)
    assert [orjson.loads(key) for key, _ in records] == [[1, "page", 10], [1, "totals"]]
    assert sorted(t for t, _ in page_pairs(orjson.loads(records[0][1]))) == [
        "fresh", "w1", "w2"]
    # and the whole slice is its vocabulary in pages, numbered from 0
    whole = [orjson.loads(key) for key, _ in all_records(model, FeedbackStore())]
    assert whole == [[1, "page", n] for n in range(10)] + [[1, "totals"]]


def test_a_commit_that_changes_as_many_tokens_as_the_slice_holds_writes_it_whole():
    """An expiry of most of the vocabulary: the commit writes every token the slice still
    holds in new pages, in the order they were last seen, then tombstones every earlier page;
    the log, whole or compacted, restores the slice, and the writer's index goes on."""
    import random

    model = expiring_model("multinomial")
    store = FeedbackStore()
    model.mark_changes()
    store.mark_changes()
    log = []
    for i in range(3):
        model.learn_one({f"w{i}-{j}": 1 for j in range(3000)}, "ham")
        log += changed_records(model, store)
        model.mark_changes()
    model.learn_one({"late": 1, "w2-1": 1}, "spam")
    model.expire(2100, 2100)  # 9,001 tokens held, 6,901 expire
    records = changed_records(model, store)
    log += records
    pages = [(orjson.loads(key)[2], value) for key, value in records
             if orjson.loads(key)[1] == "page"]
    written = [pair for _, value in pages if value is not None
               for pair in page_pairs(orjson.loads(value))]
    assert {token for token, _ in written} == {
        key[1] for key in model.stat_keys() if key[0] == "token"}
    assert [value["seen"] for _, value in written] == sorted(
        value["seen"] for _, value in written)
    assert sorted(n for n, value in pages if value is None) == list(range(6))
    model.mark_changes()
    model.learn_one({"later": 1}, "ham")
    log += changed_records(model, store)
    rng = random.Random(5)
    for records in (log, compact(log), any_compaction(log, rng)):
        assert restored_from("multinomial", records).to_state() == model.to_state()


def test_a_model_that_learned_before_its_changes_were_marked_is_written_whole():
    """A change the page index never saw (here: learned before ``mark_changes``): the commit
    notices the vocabulary it does not know and writes the whole slice."""
    model = make_model("multinomial")
    model.learn_one({"early": 1}, "ham")
    model.mark_changes()
    model.learn_one({"late": 1}, "spam")
    store = FeedbackStore()
    store.mark_changes()
    records = changed_records(model, store)
    restored = make_model("multinomial")
    apply_records(restored, FeedbackStore(), "in:0", records)
    assert restored.to_state() == model.to_state()


# ------------------------------------------------ page formats: columns, and pairs before
def as_pairs_page(record):
    """A page record as the writer before columnar pages made it (format 1): its value the
    list of ``[token, value]`` pairs."""
    key, value = record
    if value is None or orjson.loads(key)[1] != "page":
        return record
    return key, orjson.dumps(page_pairs(orjson.loads(value)))


def test_a_page_written_before_columnar_pages_restores():
    """Records as the build before columnar pages wrote them (its bytes, with stamps),
    read by this one; and this build's own records of the same slice are columnar pages
    holding the same values."""
    old = [(b'[1,"page",0]', b'[["cash",{"counts":{"spam":1.0},"seen":1}],["win",{"counts"'
                             b':{"ham":1.0,"spam":2.0},"seen":2}],["lunch",{"counts":{"ham":'
                             b'1.0},"seen":2}]]'),
           (b'[1,"totals"]', b'{"n_docs":{"ham":1.0,"spam":1.0},"totals":{"ham":2.0,'
                             b'"spam":3.0},"clock":2}'),
           (b'[1,"entries",0]', b'[["m1","spam",0,{"win":2,"cash":1}]]')]
    model = expiring_model("multinomial")
    model.mark_changes()
    store = FeedbackStore()
    store.mark_changes()
    model.learn_one({"win": 2, "cash": 1}, "spam")
    model.learn_one({"lunch": 1, "win": 1}, "ham")
    store.remember("m1", "in:0", {"win": 2, "cash": 1}, "spam")
    restored, restored_store = expiring_model("multinomial"), FeedbackStore()
    apply_records(restored, restored_store, "in:0", old)
    assert restored.to_state() == model.to_state()
    assert restored_store.get("m1").x == {"win": 2, "cash": 1}
    new = changed_records(model, store)
    assert new[0] == old[2]  # the feedback store's records first (the commit's order)
    new = new[1:] + new[:1]  # then the model's, in the order the build before wrote them
    page = orjson.loads(new[0][1])  # (its tokens in the order of a set: any)
    columns = {token: (ham, spam, seen) for token, ham, spam, seen in zip(
        page["tokens"], *page["counts"], page["seen"], strict=True)}
    assert (page["format"], page["labels"]) == (2, ["ham", "spam"])
    assert columns == {"cash": (0.0, 1.0, 1), "win": (1.0, 2.0, 2), "lunch": (1.0, 0.0, 2)}
    assert sorted(page_pairs(page)) == sorted(orjson.loads(old[0][1]))
    assert [(k, v) for k, v in new[1:]] == old[1:]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
@given(commits=EXPIRING_COMMITS, seed=st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_a_log_of_both_page_formats_restores_exactly_after_any_compaction(
        layout, kind, commits, seed):
    """A changelog begun by the build before columnar pages and written on by this one (any
    page record of either format): it reads back to the live slice whole and after any
    compaction, and the slice read from it, as the new owner, writes on a log that stays
    exact."""
    import random

    import streamnb.daemon.changelog as changelog

    entries, max_value_bytes = layout
    rng = random.Random(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changelog, "PAGE_ENTRIES", entries)
        model, store, log = expiring_log(kind, commits, max_value_bytes)
        mixed = [as_pairs_page(r) if rng.random() < 0.5 else r for r in log]
        for records in (mixed, compact(mixed), any_compaction(mixed, rng)):
            assert restored_from(kind, records).to_state() == model.to_state()
        mixed = any_compaction(mixed, rng)
        owner = restored_from(kind, mixed)
        owner.mark_changes()
        owner_store = FeedbackStore()
        owner_store.mark_changes()
        for event in [("message", "n1", {"win": 1, "new": 2}, "spam"), ("expire", 3, None, None)]:
            run_expiring(model, store, event)
            run_expiring(owner, owner_store, event)
        mixed += changed_records(owner, owner_store, max_value_bytes)
        for records in (mixed, compact(mixed), any_compaction(mixed, rng)):
            assert restored_from(kind, records).to_state() == model.to_state()


TOKENS = st.one_of(st.text(max_size=6), st.integers(0, 2**40))
COUNTS = st.one_of(st.just(0.0), st.integers(-3, 50).map(float),
                   st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))


@given(labels=st.lists(st.text(min_size=1, max_size=5), unique=True, max_size=4),
       data=st.data(), stamped=st.booleans())
@settings(max_examples=200, deadline=None)
def test_a_columnar_page_reads_back_exactly_the_values_it_was_made_of(labels, data, stamped):
    """Any counts (decayed ones are any float; zero means the label is not counted) and
    stamps, encoded as a page's columns and decoded: the very values, bit for bit, a
    page of pairs holds."""
    import numpy as np

    from streamnb.daemon.changelog import _Columns

    labels = sorted(labels)
    tokens = data.draw(st.lists(TOKENS, unique=True, min_size=1, max_size=20))
    counts = np.array([[data.draw(COUNTS) for _ in labels] for _ in tokens]).reshape(
        len(tokens), len(labels))
    seen = (np.array([data.draw(st.integers(0, 2**53)) for _ in tokens], dtype=np.int64)
            if stamped else None)
    value = _Columns(labels, counts, seen).page(tokens, 0, len(tokens))
    kind, page, pairs = decode(b'[1,"page",7]', value, "test")
    expected = []
    for i, token in enumerate(tokens):
        held = {label: float(counts[i, c]) for c, label in enumerate(labels) if counts[i, c]}
        expected.append([token, {"counts": held, "seen": int(seen[i])} if stamped else held])
    assert (kind, page) == ("page", 7)
    assert pairs == expected
    assert orjson.dumps(pairs) == orjson.dumps(expected)  # -0.0 and every float's digits
    # and a page of pairs of those values decodes to the same
    assert decode(b'[1,"page",7]', orjson.dumps(expected), "test")[2] == expected


@pytest.mark.parametrize("value", [
    b'{"format":3,"labels":[],"tokens":[],"counts":[]}',
    b'{"format":2,"labels":["ham"],"tokens":["a","b"],"counts":[[1.0]]}',
    b'{"format":2,"labels":["ham"],"tokens":["a"],"counts":[[1.0],[2.0]]}',
    b'{"format":2,"labels":[1],"tokens":["a"],"counts":[[1.0]]}',
    b'{"format":2,"labels":["ham"],"tokens":[null],"counts":[[1.0]]}',
    b'{"format":2,"labels":["ham"],"tokens":["a"],"counts":[[1.0]],"seen":[]}',
    b'{"labels":["ham"],"tokens":["a"],"counts":[[1.0]]}',
])
def test_a_corrupt_columnar_page_stops_the_reader(value):
    with pytest.raises(ChangelogError, match="corrupt token page 3"):
        decode(b'[1,"page",3]', value, "test")


def test_a_model_without_token_arrays_writes_pages_of_pairs():
    """The pages of a model that has no ``token_table`` (only values by key) are lists of
    ``[token, value]`` pairs, which every build reads."""
    from tests.daemon.fakes import CountModel

    model = CountModel()
    model.mark_changes()
    store = FeedbackStore()
    store.mark_changes()
    model.learn_one({"win": 2, "cash": 1}, "spam")
    pages = [orjson.loads(v) for k, v in changed_records(model, store)
             if orjson.loads(k)[1] == "page"]
    assert len(pages) == 1
    assert sorted(pages[0]) == [["cash", {"spam": 1.0}], ["win", {"spam": 2.0}]]
    restored = CountModel()
    apply_records(restored, FeedbackStore(), "in:0", changed_records(model, store))
    assert restored.tokens == model.tokens


# ------------------------------------------------------- the layout before pages, read on
def legacy_token_records(model, changed, n_buckets, rng):
    """What the writer before token pages made of a commit's changed tokens: a bucket
    (crc32 mod ``n_buckets``) written whole, listing every token of it with counts, or the
    changed tokens' own records (chosen at random here, as its amplification rule did by
    size); a token that lost its counts: its own tombstone, then its bucket whole."""
    import zlib

    def bucket(t):
        return (t if type(t) is int else zlib.crc32(t.encode("utf-8", "surrogatepass"))
                ) % n_buckets

    members = {}
    for key in model.stat_keys():
        if key[0] == "token":
            members.setdefault(bucket(key[1]), []).append(key[1])
    by_bucket = {}
    for token in changed:
        by_bucket.setdefault(bucket(token), []).append(token)
    records = []
    for b, tokens in sorted(by_bucket.items()):
        deleted = [t for t in tokens if model.stat_value(("token", t)) is None]
        if not deleted and rng.random() < 0.5:
            records += [(orjson.dumps([1, "token", t]), orjson.dumps(model.stat_value(
                ("token", t)))) for t in tokens]
            continue
        records += [(orjson.dumps([1, "token", t]), None) for t in deleted]
        records.append((orjson.dumps([1, "tokens", b]), orjson.dumps(
            [[t, model.stat_value(("token", t))] for t in sorted(members.get(b, []))])))
    return records


def legacy_log(kind, commits, n_buckets, rng):
    """An owner's slice and store after ``commits``, and the changelog the writer before
    token pages made of them."""
    from streamnb.daemon.changelog import _feedback_records, _stat_record

    def legacy_records(model, store):
        changed = model.changed_keys()
        return (legacy_token_records(model, [k[1] for k in changed if k[0] == "token"],
                                     n_buckets, rng)
                + [_stat_record(k, model.stat_value(k)) for k in changed if k[0] != "token"]
                + _feedback_records(store, store.changed_ids(), store.changed_runs()))

    return commit_log(expiring_model(kind), FeedbackStore(max_ids=5), commits, run_expiring,
                      make_records=legacy_records)


@pytest.mark.parametrize("kind", KINDS)
@given(before=EXPIRING_COMMITS, after=EXPIRING_COMMITS, n_buckets=st.sampled_from([1, 3, 1024]),
       seed=st.integers(0, 2**32))
@settings(max_examples=80, deadline=None)
def test_a_changelog_of_buckets_and_own_records_is_read_and_moved_into_pages(
        kind, before, after, n_buckets, seed):
    """A slice written in the layout before pages, read back (compacted or not) by a new
    owner that goes on in pages: its first commit moves every token into pages and tombstones
    the earlier keys, and any compaction of the whole log restores the live slice."""
    import random

    rng = random.Random(seed)
    model, store, log = legacy_log(kind, before, n_buckets, rng)
    # (not any compaction: in that layout a tombstone of a token's own record could go while
    # an older record of its bucket listing it stays; the first commit of pages, whose bucket
    # tombstones remove what a bucket still holds, closes that too)
    for records in (log, compact(log)):
        assert restored_from(kind, records).to_state() == model.to_state()
    owner = restored_from(kind, compact(log))
    owner_store = FeedbackStore(max_ids=5)
    apply_records(make_model(kind), owner_store, "in:0", log)
    owner_store.order_by_arrival()
    _, _, more = commit_log(owner, owner_store, [[], *after], run_expiring)
    for event in (e for events in after for e in events):
        run_expiring(model, store, event)
    assert owner.to_state() == model.to_state()
    log += more
    for records in (log, compact(log), any_compaction(log, rng)):
        assert restored_from(kind, records).to_state() == model.to_state()
    # no record of the earlier layout outlives compaction once the owner has committed
    kinds = {orjson.loads(key)[1] for key, value in compact(log) if value is not None}
    assert not kinds & {"token", "tokens"}


@given(slices=st.lists(EXPIRING_COMMITS, min_size=2, max_size=3), legacy=st.booleans(),
       seed=st.integers(0, 2**32))
@settings(max_examples=40, deadline=None)
def test_the_global_model_follows_pages_cleanings_and_expiry_exactly(slices, legacy, seed):
    """A daemon owning none of the partitions, tailing every changelog in polls of a few
    records, holds exactly the sum of the owners' slices (each log possibly begun in the
    layout before pages)."""
    import random

    rng = random.Random(seed)
    reader = Partitions(lambda: expiring_model("multinomial"),
                        lambda key: FeedbackStore(max_ids=5), lambda: make_model("multinomial"))
    owners = []
    for commits in slices:
        half = len(commits) // 2
        model, store, log = (legacy_log("multinomial", commits[:half], 2, rng) if legacy
                             else (expiring_model("multinomial"), FeedbackStore(max_ids=5), []))
        if legacy:  # the same slice, read back by its next owner, goes on in pages
            owner = restored_from("multinomial", log)
            _, _, more = commit_log(owner, store, [[], *commits[half:]], run_expiring)
            model = owner
        else:
            _, _, more = commit_log(model, store, commits, run_expiring)
        owners.append((model, log + more))
    for p, (_, log) in enumerate(owners):
        for i in range(0, len(log), 3):
            reader.apply_remote(f"in:{p}", log[i:i + 3])
    total = make_model("multinomial")
    for model, _ in owners:
        total += model

    def counts(model):  # (a single slice is the live model itself, stamps and all)
        return {k: v for k, v in model.to_state().items() if k not in ("clock", "last_seen")}

    assert counts(reader.live) == counts(total)


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


class KeysOnly:
    """A model seen through the keyed protocol alone (``changed_keys``, ``stat_keys``,
    ``stat_value``): what the changelog falls back to for a model without
    ``changed_tokens`` / ``token_values`` and their array forms (the tokens' values a
    ``stat_value`` each)."""

    _HIDDEN = ("changed_tokens", "token_values", "stat_values", "changed_table",
               "changed_token_count", "vocabulary_table")

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name in self._HIDDEN:
            raise AttributeError(name)
        return getattr(self._model, name)


FAST_PATH_LABEL = st.sampled_from(["ham", "spam", "promo"])
FAST_PATH_EVENT = st.one_of(
    st.tuples(st.just("message"), IDS, MESSAGE, st.one_of(st.none(), FAST_PATH_LABEL)),
    st.tuples(st.just("feedback"), IDS, st.just(None), FAST_PATH_LABEL),
    st.tuples(st.just("expire"), st.integers(0, 5), st.just(None), st.just(None)),
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("options", [{}, {"n_buckets": 16}, {"half_life": 3}])
@pytest.mark.parametrize("expiry", [False, True])
@pytest.mark.parametrize("rows_per_pattern", [1, 16])
@given(commits=st.lists(st.lists(FAST_PATH_EVENT, max_size=12), max_size=6),
       labels=st.integers(1, 3))
@settings(max_examples=25, deadline=None)
def test_the_fast_token_path_writes_the_records_of_the_keyed_protocol(
        kind, options, expiry, rows_per_pattern, commits, labels):
    """A text model's commit records made from its rows (``changed_tokens``,
    ``token_values``) are byte for byte those made from its keys and ``stat_value``, for
    every model kind and counting option, with and without expiry's stamps; and so is the
    whole slice (``all_records``)."""
    import streamnb.models._keyed as keyed

    allowed = ["ham", "spam", "promo"][:labels]
    commits = [[event for event in events if event[0] != "expire" or expiry]
               for events in commits]
    commits = [[(k, i, x, label if label in allowed or label is None else allowed[0])
                for k, i, x, label in events] for events in commits]
    fast, slow = make_model(kind, **options), make_model(kind, **options)
    if expiry:
        fast.track_last_seen()
        slow.track_last_seen()
    stores = FeedbackStore(max_ids=5), FeedbackStore(max_ids=5)
    keyed_slow = KeysOnly(slow)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyed, "_ROWS_PER_PATTERN", rows_per_pattern)
        for model in (fast, slow):
            model.mark_changes()
        for store in stores:
            store.mark_changes()
        for events in commits:
            for event in events:
                if event[0] == "expire" and event[1] == 0:
                    event = ("expire", 1, None, None)
                for model, store in ((fast, stores[0]), (slow, stores[1])):
                    run_expiring(model, store, event)
            tokens = fast.changed_tokens()[0]
            assert fast.token_values(tokens + ["absent" if options.get("n_buckets") is None
                                               else 15]) == [
                slow.stat_value(("token", token))
                for token in tokens + ["absent" if options.get("n_buckets") is None else 15]]
            assert changed_records(fast, stores[0]) == changed_records(keyed_slow, stores[1])
            for model in (fast, slow):
                model.mark_changes()
            for store in stores:
                store.mark_changes()
        assert all_records(fast, stores[0]) == all_records(keyed_slow, stores[1])


def model_records_first(model, store):
    """A commit's records in the order the build before sent them: the model's, then the
    feedback store's."""
    return changed_model_records(model) + changed_feedback_records(store)


@pytest.mark.parametrize("kind", KINDS)
@given(commits=COMMITS, max_ids=st.integers(2, 6), cut=st.integers(0, 200))
@settings(max_examples=60, deadline=None)
def test_the_feedback_records_first_restore_what_the_model_records_first_did(
        kind, commits, max_ids, cut):
    """A commit sends the store's records before the model's (``changed_records``); a log
    written so, read in two polls split anywhere, restores the slice a log of the earlier
    order restores, and both the live slice."""
    model, store, log = owner_log(kind, commits, max_ids)
    _, _, earlier = commit_log(make_model(kind), FeedbackStore(max_ids=max_ids), commits,
                               make_records=model_records_first)
    assert sorted(log, key=repr) == sorted(earlier, key=repr)  # the same records
    restored = []
    for written in (log, earlier):
        slice_, slice_store = make_model(kind), FeedbackStore(max_ids=max_ids)
        at = min(cut, len(written))
        apply_records(slice_, slice_store, "in:0", written[:at])
        apply_records(slice_, slice_store, "in:0", written[at:])
        slice_store.order_by_arrival()
        restored.append((slice_, slice_store))
    (new, new_store), (old, old_store) = restored
    assert new.to_state() == old.to_state() == model.to_state()
    assert same_store(new_store, old_store) and same_store(new_store, store)


def test_changed_records_put_the_feedback_store_before_the_model():
    model, store = make_model("multinomial"), FeedbackStore()
    model.mark_changes()
    store.mark_changes()
    model.learn_one({"win": 2}, "spam")
    store.remember("m1", "in:0", {"win": 2}, "spam")
    kinds = [orjson.loads(key)[1] for key, _ in changed_records(model, store)]
    assert kinds[0] == "entries" and "entries" not in kinds[1:]
    assert set(kinds[1:]) >= {"page", "totals"}
