"""The keyed view of the statistics (streamnb.models._keyed): what the changelog relies on.

A slice is written to Kafka as the values of the keys it changed since the last commit, and
rebuilt, or kept up to date, by setting those values. These tests hold the three properties
that makes exact: the changed keys cover every key whose value changed; setting every key's
value rebuilds the model (counts and predictions); setting values is idempotent.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.models import GDA, BernoulliNB, MultinomialNB, StateError, make_model
from streamnb.models._keyed import TOTALS_KEY, replace_part

WORDS = st.sampled_from(["win", "cash", "lunch", "today", "prize", "hi", "meet", "x", "€"])
MESSAGE = st.dictionaries(WORDS, st.integers(1, 3), max_size=6)
LABEL = st.sampled_from(["ham", "spam"])
# learn (True) or unlearn (False) a message; unlearning what was never learned is allowed in
# a slice (its counts go negative).
OPS = st.lists(st.tuples(st.booleans(), MESSAGE, LABEL), max_size=25)

TEXT_MODELS = [
    lambda: MultinomialNB(alpha=1.0, repeated_words="count", idf=False, length_norm=False,
                          min_spread=0.0),
    lambda: MultinomialNB(),
    lambda: MultinomialNB(n_buckets=7),
    lambda: BernoulliNB(),
]


def apply(model, ops):
    for learn, x, y in ops:
        (model.learn_one if learn else model.unlearn_one)(x, y)


def scores(model, x):
    """The log-probabilities of ``x``, or the error a state that cannot be scored raises (a
    slice whose own counts went negative through unlearning)."""
    try:
        return model.predict_log_proba_one(x)
    except ValueError as error:
        return type(error)


def assert_same_scores(a, b, x):
    got, want = scores(a, x), scores(b, x)
    if isinstance(want, dict) and isinstance(got, dict):
        assert got == pytest.approx(want, abs=1e-12)
    else:
        assert got == want


def table(model) -> dict:
    return {key: model.stat_value(key) for key in model.stat_keys()}


def counts(model) -> dict:
    state = model.to_state()
    state.pop("options")
    return state


@pytest.mark.parametrize("new", TEXT_MODELS, ids=["textbook", "default", "hashed", "bernoulli"])
@given(before=OPS, after=OPS)
@settings(max_examples=60, deadline=None)
def test_changed_keys_cover_every_key_whose_value_changed(new, before, after):
    model = new()
    apply(model, before)
    old = table(model)
    model.mark_changes()
    apply(model, after)
    now = table(model)
    changed = set(model.changed_keys())
    for key in old.keys() | now.keys():
        if old.get(key) != now.get(key):
            assert key in changed, key


@pytest.mark.parametrize("new", TEXT_MODELS, ids=["textbook", "default", "hashed", "bernoulli"])
@given(ops=OPS, probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_setting_every_keys_value_rebuilds_the_model(new, ops, probe):
    model = new()
    apply(model, ops)
    rebuilt = new()
    rebuilt.set_stat_values(table(model))
    assert counts(rebuilt) == counts(model)
    assert rebuilt.vocabulary_size == model.vocabulary_size
    assert_same_scores(rebuilt, model, probe)


@pytest.mark.parametrize("new", TEXT_MODELS, ids=["textbook", "default", "hashed", "bernoulli"])
@given(first=OPS, second=OPS, probe=MESSAGE)
@settings(max_examples=60, deadline=None)
def test_applying_the_changed_keys_twice_equals_once(new, first, second, probe):
    """A reader holding the model as of the mark catches up with the changed keys' values;
    applying them again (a replay) changes nothing."""
    model = new()
    apply(model, first)
    reader = new()
    reader.set_stat_values(table(model))
    model.mark_changes()
    apply(model, second)
    changes = {key: model.stat_value(key) for key in model.changed_keys()}
    reader.set_stat_values(changes)
    once = counts(reader)
    reader.set_stat_values(changes)
    assert counts(reader) == once == counts(model)
    assert_same_scores(reader, model, probe)


@given(slices=st.lists(OPS, min_size=2, max_size=4), more=OPS, which=st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_a_sum_of_slices_follows_one_slices_changes_with_replace_part(slices, more, which):
    """The global model is the sum of every slice; when a slice's key goes from ``old`` to
    ``new``, adding ``new - old`` to the sum's key gives the sum of the slices again."""
    parts = []
    for ops in slices:
        part = BernoulliNB()
        apply(part, ops)
        parts.append(part)
    total = BernoulliNB()
    for part in parts:
        total += part
    part = parts[which % len(parts)]
    old = table(part)
    part.mark_changes()
    apply(part, more)
    total.set_stat_values({
        key: replace_part(key, total.stat_value(key), old.get(key), part.stat_value(key))
        for key in part.changed_keys()
    })
    expected = BernoulliNB()
    for p in parts:
        expected += p
    assert counts(total) == counts(expected)


def test_the_prequential_batch_step_reports_its_changes():
    model = MultinomialNB()
    model.mark_changes()
    model.prequential_many([{"win": 1}, {"lunch": 2}, {"meet": 1}], ["spam", None, "ham"])
    assert sorted(model.changed_keys()) == [("token", "meet"), ("token", "win"), TOTALS_KEY]


def test_gda_is_one_key_holding_its_whole_state():
    model = make_model("gda")
    model.mark_changes()
    assert model.changed_keys() == []
    model.learn_one([1.0, 2.0], "a")
    model.learn_one([2.0, 0.0], "b")
    assert model.changed_keys() == [("model",)]
    copy = GDA()
    copy.set_stat_values(table(model))
    assert copy.to_state() == model.to_state()
    copy.set_stat_values({("model",): None})
    assert copy.n_updates == 0 and copy.stat_keys() == []


@pytest.mark.parametrize(
    "values, message",
    [
        ({("token", 3): {"spam": 1}}, "is not a str"),
        ({("token", "a"): {"spam": "many"}}, "is not a number"),
        ({("token", "a"): [1, 2]}, "expected {label: count}"),
        ({("tokens", "a"): {}}, "unknown statistics key"),
    ],
)
def test_a_corrupt_value_is_refused_naming_what_is_wrong(values, message):
    with pytest.raises(StateError, match=message):
        MultinomialNB().set_stat_values(values)


def test_changed_keys_without_a_mark_is_an_error():
    with pytest.raises(RuntimeError, match="mark_changes"):
        MultinomialNB().changed_keys()


@pytest.mark.parametrize("probe", [{}, {"win": 1}])
def test_a_slice_with_a_token_in_more_messages_than_its_class_is_refused_not_scored_nan(probe):
    # Unlearning spam that was never learned, then learning it: no count is negative, but
    # "win" is in 3 spam of a class of 1 message. Bernoulli's log(n_c - k + alpha) has no
    # value there; both scoring paths refuse the state instead of returning NaN.
    model = BernoulliNB()
    apply(model, [(True, {"win": 1}, "ham"), (False, {}, "spam"), (False, {}, "spam"),
                  (True, {"win": 1}, "spam"), (True, {"win": 1}, "spam"),
                  (True, {"win": 1}, "spam")])
    with pytest.raises(ValueError, match="only a sum of slices"):
        model.predict_log_proba_one(probe)
