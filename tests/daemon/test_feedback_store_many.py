"""A run's feedback entries remembered at once (``FeedbackStore.remember_many``, the batch
step's path) leave the store of one ``remember`` each: entries, runs, bytes, evictions and the
changes the next commit writes."""

from __future__ import annotations

import tracemalloc

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.daemon.changelog import apply_records, changed_feedback_records
from streamnb.daemon.feedback import FeedbackStore, entry_cost, entry_costs
from streamnb.models import MultinomialNB


def state(store: FeedbackStore) -> dict:
    return {
        "entries": [(msg_id, e.slice, e.label, e.x_json, e.seq, e.clock, e.run)
                    for msg_id, e in store.items()],
        "runs": {run: list(members) for run, members in store._runs.items()},
        "run_bytes": dict(store._run_bytes),
        "nbytes": store.nbytes,
        "evicted": store.evicted,
        "next_seq": store._next_seq,
        "changed_runs": store.changed_runs() if store._changed_runs is not None else None,
        "changed_ids": store.changed_ids() if store._changed is not None else None,
    }


ids_ = st.sampled_from([f"m{i}" for i in range(12)] + ["é", "a\"b", "x" * 40])
entry_ = st.tuples(ids_, st.dictionaries(st.sampled_from(["win", "cash", "ok", "lunch" * 9]),
                                         st.integers(1, 5), max_size=4),
                   st.sampled_from([None, "ham", "spam", "a-much-longer-label"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(entry_, max_size=12), max_size=5), st.integers(1, 15),
       st.integers(300, 4000), st.integers(60, 600), st.booleans(), st.booleans())
def test_remember_many_leaves_the_store_of_one_remember_each(
        runs, max_ids, max_bytes, run_max_bytes, tracked, relabel):
    one = FeedbackStore(max_ids, max_bytes, run_max_bytes)
    many = FeedbackStore(max_ids, max_bytes, run_max_bytes)
    if tracked:
        one.mark_changes()
        many.mark_changes()
    for number, run in enumerate(runs):
        xs = [orjson.dumps(x) for _, x, _ in run]
        evicted = sum(one.remember(msg_id, "in:0", x, label)
                      for (msg_id, _, label), x in zip(run, xs, strict=True))
        assert many.remember_many("in:0", [m for m, _, _ in run], xs,
                                  [label for _, _, label in run]) == evicted
        if relabel and number % 2 and len(one):
            # a label arriving between runs (feedback) rewrites a run of both alike
            msg_id = next(iter(one.items()))[0]
            one.set_label(msg_id, "spam-after-all")
            many.set_label(msg_id, "spam-after-all")
        assert state(many) == state(one)


# A mail's token counts: about 7 KB of JSON, for which orjson's output carries a buffer of
# about 130 KB (it grows it 4x at a time).
MAILS = [{f"token-{m}-{i}": i % 7 + 1 for i in range(400)} for m in range(40)]


def _traced_growth(make):
    """What ``make()``'s result holds of the memory Python's allocators handed out."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = make()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("way", ["remember", "remember_many", "restored"])
def test_a_store_of_mails_holds_about_their_jsons_bytes(way):
    """Whichever way entries come in (an input, encode_x's bytes in a run, a changelog's
    records), the store holds each input's JSON in memory of about its size, not orjson's
    buffer: a store bounded at 64 MB of inputs would otherwise take 1 GB."""
    payload = sum(len(orjson.dumps(x)) for x in MAILS)

    def make():
        store = FeedbackStore()
        if way == "remember":
            for i, x in enumerate(MAILS):
                store.remember(f"m{i}", "in:0", x, "spam")
        elif way == "remember_many":
            store.remember_many("in:0", [f"m{i}" for i in range(len(MAILS))],
                                [FeedbackStore.encode_x(x) for x in MAILS], ["spam"] * len(MAILS))
        else:
            live = FeedbackStore()
            live.mark_changes()
            for i, x in enumerate(MAILS):
                live.remember(f"m{i}", "in:0", x, "spam")
            records = changed_feedback_records(live)
            del live
            apply_records(MultinomialNB(), store, "in:0", records)
            del records
        return store

    held, store = _traced_growth(make)
    assert len(store) == len(MAILS) and store.get("m3").x == MAILS[3]
    assert held < 2 * payload, f"{held} bytes held for {payload} bytes of JSON"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=12) | st.sampled_from(["m1", "a\"b", "\\", "\x01"]),
                          st.none() | st.text(max_size=6) | st.sampled_from(["ham", "spam"]),
                          st.binary(max_size=20)), max_size=20))
def test_a_batch_is_priced_as_each_entry_alone(entries):
    ids, labels, x_jsons = ([e[i] for e in entries] for i in range(3))
    assert entry_costs(ids, labels, x_jsons) == [
        entry_cost(msg_id, label, x_json) for msg_id, label, x_json in entries]


def test_an_id_orjson_cannot_write_fails_the_batch_as_it_fails_one_entry():
    with pytest.raises(orjson.JSONEncodeError):
        entry_cost("bad\ud800", None, b"{}")
    with pytest.raises(orjson.JSONEncodeError):
        entry_costs(["ok", "bad\ud800"], [None, None], [b"{}", b"{}"])
