"""Token expiry (``TextModel.expire``): the budget, the order, exactness, and the stamps that
travel with the state so every replica of a slice holds the same model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.models import BernoulliNB, MultinomialNB
from streamnb.models._keyed import TOTALS_KEY, replace_part

WORDS = st.sampled_from([f"w{i}" for i in range(14)])
MESSAGE = st.dictionaries(WORDS, st.integers(1, 3), min_size=1, max_size=5)
LABEL = st.sampled_from(["ham", "spam"])
# ("learn", x, y), ("relabel", i, y): relabel the i-th learned message, ("commit", budget, keep%)
STEP = st.one_of(
    st.tuples(st.just("learn"), MESSAGE, LABEL),
    st.tuples(st.just("relabel"), st.integers(0, 50), LABEL),
    st.tuples(st.just("commit"), st.integers(0, 10), st.sampled_from([50, 75, 100])),
)
STEPS = st.lists(STEP, max_size=40)

TEXT_MODELS = {
    "textbook": lambda: MultinomialNB(alpha=1.0, repeated_words="count", idf=False,
                                      length_norm=False, min_spread=0.0),
    "default": MultinomialNB,
    "hashed": lambda: MultinomialNB(n_buckets=7),
    "bernoulli": BernoulliNB,
}


def tracked(name):
    model = TEXT_MODELS[name]()
    model.track_last_seen()
    return model


def table(model) -> dict:
    return {key: model.stat_value(key) for key in model.stat_keys()}


def run(model, steps, on_commit=None):
    """Apply ``steps`` to ``model`` (marked), calling ``on_commit(records)`` with the changed
    keys' values after each commit's expiry, as the daemon writes them."""
    learned: list[list] = []
    model.mark_changes()
    for step in steps:
        if step[0] == "learn":
            _, x, y = step
            model.learn_one(x, y)
            learned.append([x, y])
        elif step[0] == "relabel" and learned:
            entry = learned[step[1] % len(learned)]
            if entry[1] != step[2]:
                model.unlearn_one(entry[0], entry[1])
                model.learn_one(entry[0], step[2])
                entry[1] = step[2]
        elif step[0] == "commit":
            _, budget, keep_percent = step
            model.expire(budget, budget * keep_percent // 100)
            assert model.vocabulary_size <= budget or budget == 0 and model.vocabulary_size == 0
            if on_commit is not None:
                on_commit({key: model.stat_value(key) for key in model.changed_keys()})
            model.mark_changes()


def assert_same_model(a, b, probe):
    assert a.to_state() == b.to_state()
    assert a.vocabulary_size == b.vocabulary_size
    got, want = a.predict_log_proba_one(probe), b.predict_log_proba_one(probe)
    assert got == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("name", TEXT_MODELS)
@given(steps=STEPS, probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_budget_holds_after_every_expiry_and_restored_state_equals_live(name, steps, probe):
    model = tracked(name)
    run(model, steps)
    restored = type(model).from_state(model.to_state())
    assert_same_model(restored, model, probe)
    assert restored.clock == model.clock


@pytest.mark.parametrize("name", TEXT_MODELS)
@given(steps=STEPS, budget=st.integers(0, 8), keep=st.integers(0, 8), probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_expiry_removes_the_documented_order_exactly(name, steps, budget, keep, probe):
    """The expired tokens are the first of (last seen, total count, token) ascending; the
    model afterwards equals one rebuilt from its state without them (the tokens' counts
    taken out of the totals too): every other count is untouched and Bernoulli's
    absent-word sums agree with a fresh computation."""
    keep = min(keep, budget)
    model = tracked(name)
    run(model, [s for s in steps if s[0] != "commit"])
    state = model.to_state()
    classes = state["classes"]
    entries = sorted(
        (seen, sum(column[i] for column in state["counts"]), token, i)
        for i, (token, seen) in enumerate(zip(state["vocabulary"], state["last_seen"],
                                              strict=True)))
    over = len(entries) > budget
    doomed = {e[2] for e in entries[: len(entries) - keep]} if over else set()
    assert model.expiry_order() == [e[2] for e in entries]

    model.mark_changes()
    before = model.expire(budget, keep)

    kept = [i for i, token in enumerate(state["vocabulary"]) if token not in doomed]
    removed = [i for i, token in enumerate(state["vocabulary"]) if token in doomed]
    expected = dict(state)
    expected["vocabulary"] = [state["vocabulary"][i] for i in kept]
    expected["last_seen"] = [state["last_seen"][i] for i in kept]
    expected["counts"] = [[column[i] for i in kept] for column in state["counts"]]
    expected["totals"] = [total - sum(column[i] for i in removed)
                          for total, column in zip(state["totals"], state["counts"],
                                                   strict=True)]
    reference = type(model).from_state(expected)
    assert model.vocabulary_size == (keep if over else len(entries))
    assert_same_model(model, reference, probe)
    assert len(classes) == len(model.to_state()["classes"])
    if over:
        assert {key[1] for key in model.changed_keys() if key != TOTALS_KEY} == doomed
        assert all(model.stat_value(("token", t)) is None for t in doomed)
        assert set(before) == {("token", t) for t in doomed} | {TOTALS_KEY}
    else:
        assert before == {} and model.changed_keys() == []


@pytest.mark.parametrize("name", TEXT_MODELS)
@given(steps=STEPS, probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_replicas_applying_the_same_records_hold_identical_state(name, steps, probe):
    """The owner writes each commit's changed keys (tombstones for expired tokens); two
    replicas applying those records, one of them also replaying them (idempotence) and one
    restored from a compacted log (the last value per key), equal the owner."""
    owner = tracked(name)
    first, second = tracked(name), tracked(name)
    compacted: dict = {}

    def commit(records):
        first.set_stat_values(records)
        second.set_stat_values(records)
        second.set_stat_values(records)
        compacted.update(records)

    run(owner, steps, commit)
    commit({key: owner.stat_value(key) for key in owner.changed_keys()})  # the last commit
    from_log = tracked(name)
    from_log.set_stat_values({k: v for k, v in compacted.items() if v is not None})
    for replica in (first, second, from_log):
        assert_same_model(replica, owner, probe)
        assert table(replica) == table(owner)


@pytest.mark.parametrize("name", ["default", "bernoulli"])
@given(steps=STEPS, probe=MESSAGE)
@settings(max_examples=40, deadline=None)
def test_a_relabel_after_expiry_unlearns_what_is_still_there(name, steps, probe):
    """Counts never go negative in a slice with expiry, and a relabel unlearns exactly
    ``unlearnable_part``: the model equals one that learned the unlearnable part under
    the new label's bookkeeping (checked through the counts staying >= 0 and totals equal to
    the column sums)."""
    model = tracked(name)
    run(model, steps)
    state = model.to_state()
    for column, total in zip(state["counts"], state["totals"], strict=True):
        assert min(column, default=0) >= 0
        assert sum(column) == total
    assert min(state["n_docs"], default=0) >= 0


def test_unlearnable_part_of_a_partly_expired_message():
    model = MultinomialNB(alpha=1.0, repeated_words="count", idf=False, length_norm=False,
                          min_spread=0.0)
    model.track_last_seen()
    model.learn_one({"old": 2, "new": 1}, "spam")
    model.learn_one({"new": 1, "other": 1}, "ham")
    model.expire(2, 2)  # "old" was seen last at step 1
    assert model.stat_value(("token", "old")) is None
    assert model.unlearnable_part({"old": 2, "new": 1}, "spam") == {"new": 1}
    model.unlearn_one({"old": 2, "new": 1}, "spam")
    assert model.to_state()["classes"] == ["ham"]
    assert model.stat_value(("token", "new")) == {"counts": {"ham": 1.0}, "seen": 3}
    assert model.stat_value(TOTALS_KEY) == {"n_docs": {"ham": 1.0}, "totals": {"ham": 2.0},
                                            "clock": 3}


@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB])
def test_a_relabel_in_a_slice_without_token_rows_unlearns_nothing_of_the_tokens(cls):
    """A slice restored from a changelog whose tokens had all expired holds class counts and
    no token row: the relabel that follows finds nothing of its message to unlearn (it
    indexed a row of the empty count array)."""
    model = cls()
    model.track_last_seen()
    model.set_stat_values({TOTALS_KEY: {"n_docs": {"ham": 1.0}, "totals": {"ham": 1.0},
                                        "clock": 1}})
    assert model.unlearnable_part({"win": 1}, "ham") == {}


@given(steps=STEPS, other=st.lists(st.tuples(MESSAGE, LABEL), max_size=10), probe=MESSAGE)
@settings(max_examples=40, deadline=None)
def test_a_sum_of_slices_follows_expiry_through_replace_part(steps, other, probe):
    """The global model (no stamps) follows a slice's expiry by replacing each changed key's
    part: it equals the sum of the slices afterwards."""
    part = tracked("bernoulli")
    run(part, [s for s in steps if s[0] != "commit"])
    neighbour = BernoulliNB()
    for x, y in other:
        neighbour.learn_one(x, y)
    total = BernoulliNB() + part + neighbour
    part.mark_changes()
    before = part.expire(3, 2)
    total.set_stat_values({key: replace_part(key, total.stat_value(key), old,
                                             part.stat_value(key))
                           for key, old in before.items()})
    assert_same_model(total, BernoulliNB() + part + neighbour, probe)


@given(batch=st.lists(st.tuples(MESSAGE, st.one_of(st.none(), LABEL)), max_size=20))
@settings(max_examples=40, deadline=None)
def test_the_batched_step_stamps_as_the_loop_does(batch):
    """MultinomialNB's vectorised prequential step advances the clock and stamps tokens as
    predicting then learning each message in turn does."""
    batched, looped = tracked("default"), tracked("default")
    xs, ys = [x for x, _ in batch], [y for _, y in batch]
    batched.prequential_many(xs, ys)
    looped._prequential_loop(xs, ys)
    assert batched.to_state() == looped.to_state()


@pytest.mark.parametrize("name", TEXT_MODELS)
@given(steps=STEPS, budget=st.integers(0, 8), keep=st.integers(0, 8), probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_an_expiry_without_old_values_removes_the_same_tokens(name, steps, budget, keep, probe):
    """``old_values=False`` (a slice that is the whole model: no sum to follow) expires the
    very tokens, to the same model and the same changed keys, and lists them with None; the
    tokens it takes are the start of ``expiry_order`` whatever ties the cut falls in."""
    keep = min(keep, budget)
    model, twin = tracked(name), tracked(name)
    learned = [s for s in steps if s[0] != "commit"]
    run(model, learned)
    run(twin, learned)
    order = model.expiry_order()
    for n in range(len(order) + 1):
        assert model._expiry_prefix(n) == order[:n]
    model.mark_changes()
    twin.mark_changes()
    before = model.expire(budget, keep)
    without = twin.expire(budget, keep, old_values=False)
    assert list(without) == list(before)
    assert all(value is None for value in without.values())
    assert dict(without) == dict.fromkeys(before) and len(without) == len(before)
    assert all(key in without for key in before)
    assert ("token", "never learned") not in without and ("nothing",) not in without
    assert_same_model(twin, model, probe)
    assert sorted(map(str, twin.changed_keys())) == sorted(map(str, model.changed_keys()))


# Tokens of any text: non-ASCII, NUL (inside and at the end), lone surrogates, prefixes of
# one another; the expiry sorts them by their UTF-8 bytes in numpy (``_key_ranks``).
ANY_TOKEN = st.one_of(
    st.text(max_size=6),
    st.text(alphabet=st.sampled_from(["a", "\x00", "é", "\ud800", "\U0001f600", "\uffff"]),
            max_size=4),
)


@given(messages=st.lists(st.tuples(st.dictionaries(ANY_TOKEN, st.integers(1, 3),
                                                   min_size=1, max_size=6), LABEL),
                         min_size=1, max_size=12),
       cut=st.integers(0, 40))
@settings(max_examples=200, deadline=None)
def test_the_expiry_order_sorts_any_tokens_as_python_does(messages, cut):
    """Ties of stamp and total count are broken by the token in Python's order of str, for
    any tokens, and an expiry of any size takes the start of that order."""
    model = MultinomialNB(alpha=1.0, repeated_words="count", idf=False, length_norm=False,
                          min_spread=0.0)
    model.track_last_seen()
    for x, y in messages:
        model.learn_one(x, y)
    state = model.to_state()
    entries = sorted(
        (seen, sum(column[i] for column in state["counts"]), token)
        for i, (token, seen) in enumerate(zip(state["vocabulary"], state["last_seen"],
                                              strict=True)))
    assert model.expiry_order() == [e[2] for e in entries]
    n = min(cut, len(entries))
    assert model._expiry_prefix(n) == [e[2] for e in entries[:n]]


def test_the_expiry_order_of_long_tokens_is_sorted_as_objects(monkeypatch):
    """Past the byte array's bound (a hostile token's length) the tokens are sorted as str
    objects, to the same order."""
    import streamnb.models._text as text

    model = MultinomialNB()
    model.track_last_seen()
    tokens = ["b" * 300, "a" * 299 + "c", "a", "é"]
    model.learn_one(dict.fromkeys(tokens, 1), "spam")
    want = sorted(tokens)
    assert model.expiry_order() == want
    monkeypatch.setattr(text, "_MAX_KEY_ARRAY_BYTES", 10)
    assert model.expiry_order() == want


@pytest.mark.parametrize("name", TEXT_MODELS)
@pytest.mark.parametrize("stamps", [True, False])
@given(steps=STEPS, budget=st.integers(0, 8))
@settings(max_examples=40, deadline=None)
def test_the_changed_token_count_and_the_vocabulary_table(name, stamps, steps, budget):
    """What a changelog's whole rewrite reads instead of listing the changed tokens and
    looking each up: the count of ``changed_tokens()``'s tokens (expired, relabelled to
    nothing, learned again after an expiry), the other changed keys, and every token's
    counts from the rows, ordered by last seen (stable over the rows) with stamps."""
    model = tracked(name) if stamps else TEXT_MODELS[name]()
    if not stamps:
        steps = [s for s in steps if s[0] != "commit"]
    run(model, steps)
    if stamps:
        model.expire(budget, budget // 2)
    tokens, others = model.changed_tokens()
    assert model.changed_token_count() == len(tokens) == len(set(tokens))
    assert model.changed_other_keys() == others
    vocabulary = [key[1] for key in model.stat_keys() if key[0] == "token"]
    got, labels, counts, seen = model.vocabulary_table()
    want_labels, want_counts, want_seen = model.token_table(vocabulary)
    order = (sorted(range(len(vocabulary)), key=want_seen.__getitem__) if stamps
             else list(range(len(vocabulary))))
    assert got == [vocabulary[i] for i in order]
    assert labels == want_labels
    assert counts.tolist() == want_counts[order].tolist()
    assert (seen is None) == (not stamps)
    if stamps:
        assert seen.tolist() == want_seen[order].tolist()


@pytest.mark.parametrize("name", TEXT_MODELS)
@given(steps=STEPS, more=st.lists(MESSAGE, max_size=6), probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_the_rows_an_expiry_frees_leave_the_index_consistent(name, steps, more, probe):
    """After expiries free rows (kept rows moved into freed ones), every indexed token is at
    its row, the key bytes are the keys', and learning more (new rows, the C batch step's
    table of the keys made again) gives the model a fresh one would be."""
    model = tracked(name)
    run(model, steps)
    assert len(model._index) == len(model._keys)
    assert all(model._keys[row] == token for token, row in model._index.items())
    if model.n_buckets is None:
        assert model._key_bytes == sum(map(len, model._keys))
    labels = [("ham", "spam")[i % 2] for i in range(len(more))]
    if hasattr(model, "prequential_many"):
        model.prequential_many(more, labels)
    else:
        for x, y in zip(more, labels, strict=True):
            model.learn_one(x, y)
    fresh = type(model).from_state(model.to_state())
    assert_same_model(fresh, model, probe)
