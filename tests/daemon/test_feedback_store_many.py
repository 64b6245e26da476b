"""A run's feedback entries remembered at once (``FeedbackStore.remember_many``, the batch
step's path) leave the store of one ``remember`` each: entries, runs, bytes, evictions and the
changes the next commit writes."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.daemon.feedback import FeedbackStore


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


def test_remember_many_copies_each_input_to_its_own_size():
    """orjson hands back a buffer far larger than its JSON: the store keeps exact copies."""
    store = FeedbackStore()
    x_json = orjson.dumps({"win": 1})
    store.remember_many("in:0", ["a"], [x_json], ["spam"])
    kept = store.get("a").x_json
    assert kept == x_json and kept is not x_json
