"""Decay (``half_life``): counts that forget, checked against hand-computed values and a
brute-force reference that recomputes Σ w·2^(-(t - t_i)/h) from the message history."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.models import BernoulliNB, MultinomialNB, make_model
from streamnb.models._keyed import TOTALS_KEY, token_key
from streamnb.models._text import DECAY_EPOCH_BITS
from streamnb.models.presets import MAIL

WORDS = ["a", "b", "c", "d", "e"]
LABELS = ["ham", "spam"]


def decayed_statistics(history, clock, half_life, presence):
    """{(token, label): Σ v·2^(-(clock - t)/h)}, {label: Σ 2^(..)}, {label: Σ_token ...} over
    ``history`` = [(x, label, t)], recomputed from scratch."""
    counts: dict = defaultdict(float)
    n_docs: dict = defaultdict(float)
    totals: dict = defaultdict(float)
    for x, label, t in history:
        weight = 2.0 ** (-(clock - t) / half_life)
        n_docs[label] += weight
        for token, value in x.items():
            counts[token, label] += (1 if presence else value) * weight
            totals[label] += (1 if presence else value) * weight
    return counts, n_docs, totals


def multinomial_reference(options, history, clock, half_life):
    """A model *without* decay holding the decayed counts: what decay must score like."""
    model = MultinomialNB(**options)
    counts, n_docs, totals = decayed_statistics(
        history, clock, half_life, presence=model.repeated_words == "binary")
    by_token: dict = defaultdict(dict)
    for (token, label), value in counts.items():
        by_token[token][label] = value
    values = {token_key(t): c for t, c in by_token.items()}
    values[TOTALS_KEY] = {"n_docs": dict(n_docs), "totals": dict(totals)}
    model.set_stat_values(values)
    return model


def bernoulli_log_joint(history, clock, half_life, alpha, x):
    """The Bernoulli model's log joint scores from the decayed counts, by its formula."""
    counts, n_docs, _ = decayed_statistics(history, clock, half_life, presence=True)
    vocabulary = {token for token, _ in counts}
    total = sum(n_docs.values())
    scores = {}
    for label, d_c in n_docs.items():
        score = math.log(d_c / total)
        for token in vocabulary:
            phi = (counts.get((token, label), 0.0) + alpha) / (d_c + 2 * alpha)
            score += math.log(phi) if token in x else math.log(1 - phi)
        scores[label] = score
    return scores


def normalised(scores):
    top = max(scores.values())
    log_total = top + math.log(sum(math.exp(s - top) for s in scores.values()))
    return {label: s - log_total for label, s in scores.items()}


def assert_close(got, want, tol=1e-9):
    assert set(got) == set(want)
    for label in want:
        assert got[label] == pytest.approx(want[label], abs=tol), (label, got, want)


# -- hand-computed ----------------------------------------------------------------------------
def test_multinomial_decay_by_hand():
    model = MultinomialNB(alpha=1.0, half_life=1)
    model.learn_one({"a": 1}, "spam")  # clock 1
    model.learn_one({"b": 1}, "ham")  # clock 2: the spam message now weighs 1/2
    # N_a,spam = 1/2, N_b,ham = 1, N_spam = 1/2, N_ham = 1, |V| = 2:
    # spam: (1/2)/(3/2) · (1/2 + 1)/(1/2 + 2) = 1/5; ham: 1/(3/2) · 1/(1 + 2) = 2/9
    assert model.predict_proba_one({"a": 1})["spam"] == pytest.approx(9 / 19, abs=1e-15)
    model.learn_one({"c": 1}, "ham")  # clock 3: spam 1/4, first ham 1/2
    # spam: (1/4)/(7/4) · (5/4)/(1/4 + 3) = 5/91; ham: (3/2)/(7/4) · 1/(3/2 + 3) = 4/21
    spam, ham = 5 / 91, 4 / 21
    assert model.predict_proba_one({"a": 1})["spam"] == pytest.approx(spam / (spam + ham),
                                                                      abs=1e-15)
    assert model.decay_clock == 3


def test_bernoulli_decay_by_hand():
    model = BernoulliNB(alpha=1.0, half_life=2)
    model.learn_one({"a": 1, "c": 1}, "spam")
    model.learn_one({"b": 1}, "ham")
    w = 2 ** -0.5  # the spam message, one message (half a half-life) old
    # φ = (D_jc + 1) / (D_c + 2); the message {a} holds a, lacks b and c
    spam = (w / (1 + w)) * ((w + 1) / (w + 2)) * (1 - 1 / (w + 2)) * (1 - (w + 1) / (w + 2))
    ham = (1 / (1 + w)) * (1 / 3) * (1 - 2 / 3) * (1 - 1 / 3)
    assert model.predict_proba_one({"a": 1})["spam"] == pytest.approx(spam / (spam + ham),
                                                                      abs=1e-15)


def test_relabel_keeps_the_message_age():
    model = MultinomialNB(half_life=4)
    model.learn_one({"a": 2}, "spam")
    model.learn_one({"b": 1}, "ham")
    model.unlearn_one({"a": 2}, "spam", learned_at=1)
    model.learn_one({"a": 2}, "ham", learned_at=1)
    reference = multinomial_reference({}, [({"b": 1}, "ham", 2), ({"a": 2}, "ham", 1)], 2, 4)
    assert_close(model.predict_log_proba_one({"a": 1, "b": 1}),
                 reference.predict_log_proba_one({"a": 1, "b": 1}), 1e-12)
    assert model.decay_clock == 2
    assert "spam" not in model.classes


def test_off_is_todays_model():
    xs = [{"a": 2, "b": 1}, {"c": 1}, {"a": 1, "d": 3}]
    ys = ["spam", "ham", "spam"]
    for kind in ("multinomial", "bernoulli"):
        plain, off = make_model(kind), make_model(kind, half_life=0)
        assert off.half_life is None and off.options() == plain.options()
        plain.learn_many(xs, ys)
        off.learn_many(xs, ys)
        assert off.to_state() == plain.to_state()
        assert off.predict_log_proba_one({"a": 1}) == plain.predict_log_proba_one({"a": 1})


def test_bad_half_life_and_learned_at():
    with pytest.raises(ValueError, match="half_life"):
        MultinomialNB(half_life=-1)
    with pytest.raises(ValueError, match="half_life"):
        BernoulliNB(half_life=1.5)
    model = MultinomialNB(half_life=3)
    model.learn_one({"a": 1}, "spam")
    with pytest.raises(ValueError, match="learned_at"):
        model.unlearn_one({"a": 1}, "spam", learned_at=2)
    with pytest.raises(ValueError, match="learned_at"):
        model.unlearn_many([{"a": 1}], ["spam"])


def test_models_of_different_half_lives_do_not_merge():
    a, b = MultinomialNB(half_life=3), MultinomialNB(half_life=4)
    with pytest.raises(ValueError, match="half_life"):
        a.merge(b)
    with pytest.raises(ValueError, match="half_life"):
        MultinomialNB().merge(b)


# -- against the brute-force reference -----------------------------------------------------------
messages = st.dictionaries(st.sampled_from(WORDS), st.integers(1, 3), min_size=1, max_size=4)
#: a step: learn (x, label), or unlearn the i-th message still learned (as an index)
steps = st.lists(st.one_of(st.tuples(st.just("learn"), messages, st.sampled_from(LABELS)),
                           st.tuples(st.just("unlearn"), st.integers(0, 50))),
                 min_size=1, max_size=40)
PRESETS = [{}, dict(MAIL), {"complement": True}, {"combining": "robinson"}, {"top_k": 2},
           {"tf": "log", "idf": True}]


def replay(model, steps):
    """Apply ``steps`` to ``model``; returns the messages still learned, [(x, label, t)]."""
    held = []
    for step in steps:
        if step[0] == "learn":
            _, x, label = step
            model.learn_one(x, label)
            held.append((x, label, model.decay_clock))
        elif held:
            x, label, t = held.pop(step[1] % len(held))
            model.unlearn_one(x, label, learned_at=t)
    return held


@settings(max_examples=60, deadline=None)
@given(steps=steps, half_life=st.integers(1, 6), preset=st.sampled_from(PRESETS),
       probe=messages)
def test_multinomial_equals_the_brute_force_reference(steps, half_life, preset, probe):
    model = MultinomialNB(**preset, half_life=half_life)
    held = replay(model, steps)
    reference = multinomial_reference(preset, held, model.decay_clock, half_life)
    assert model.classes == reference.classes
    assert model.vocabulary_size == reference.vocabulary_size
    if len(reference.classes) == 2:
        assert_close(model.predict_log_proba_one(probe), reference.predict_log_proba_one(probe))


@settings(max_examples=60, deadline=None)
@given(steps=steps, half_life=st.integers(1, 6), probe=messages)
def test_bernoulli_equals_the_brute_force_reference(steps, half_life, probe):
    model = BernoulliNB(half_life=half_life)
    held = replay(model, steps)
    if len({label for _, label, _ in held}) < 2:
        return
    want = normalised(bernoulli_log_joint(held, model.decay_clock, half_life, 1.0, probe))
    assert_close(model.predict_log_proba_one(probe), want)


@settings(max_examples=40, deadline=None)
@given(history=st.lists(st.tuples(messages, st.sampled_from(LABELS)), min_size=2, max_size=20),
       extra=messages, label=st.sampled_from(LABELS), half_life=st.integers(1, 5),
       kind=st.sampled_from(["multinomial", "bernoulli"]))
def test_learn_then_unlearn_removes_the_message(history, extra, label, half_life, kind):
    """Learning then unlearning a message leaves the counts of the others (aged by the one
    step the clock moved: unlearning does not turn the clock back) to 1e-12."""
    model = make_model(kind, half_life=half_life)
    model.learn_many([x for x, _ in history], [y for _, y in history])
    model.learn_one(extra, label)
    model.unlearn_one(extra, label)
    again = make_model(kind, half_life=half_life)
    again.learn_many([x for x, _ in history], [y for _, y in history])
    again.learn_one({}, label)  # the clock moves by one, as the extra message moved it
    again.unlearn_one({}, label)
    assert model.decay_clock == again.decay_clock
    assert model.stat_keys() == again.stat_keys() or sorted(model.stat_keys()) == sorted(
        again.stat_keys())
    for key in again.stat_keys():
        got, want = model.stat_value(key), again.stat_value(key)
        if key == TOTALS_KEY:
            assert got["decay_clock"] == want["decay_clock"]
            got = {**got["n_docs"], **{"t" + k: v for k, v in got["totals"].items()}}
            want = {**want["n_docs"], **{"t" + k: v for k, v in want["totals"].items()}}
        assert got.keys() == want.keys()
        for c in want:
            assert got[c] == pytest.approx(want[c], rel=1e-12, abs=1e-12 * model.decay_scale)


@settings(max_examples=40, deadline=None)
@given(steps=steps, half_life=st.integers(1, 4), kind=st.sampled_from(["multinomial",
                                                                      "bernoulli"]))
def test_restored_from_keyed_state_equals_live(steps, half_life, kind):
    live = make_model(kind, half_life=half_life)
    replay(live, steps)
    restored = make_model(kind, half_life=half_life)
    restored.set_stat_values({key: live.stat_value(key) for key in live.stat_keys()})
    assert restored.to_state() == live.to_state()
    assert type(live).from_state(live.to_state()).to_state() == live.to_state()
    if len(live.classes) == 2:
        probe = {"a": 1, "c": 2}
        assert restored.predict_log_proba_one(probe) == live.predict_log_proba_one(probe)


def test_a_new_epoch_rescales_every_key_exactly():
    """Every DECAY_EPOCH_BITS half-lives the counts are divided by 2**DECAY_EPOCH_BITS: the
    scores go on as the reference says, and every key is written (changed_keys)."""
    model = MultinomialNB(half_life=1)
    history = []
    for i in range(DECAY_EPOCH_BITS - 1):
        x = {WORDS[i % 5]: 1, "z": 1}
        model.learn_one(x, LABELS[i % 2])
        history.append((x, LABELS[i % 2], model.decay_clock))
    model.mark_changes()
    model.learn_one({"a": 1}, "spam")  # clock 64: a new epoch
    history.append(({"a": 1}, "spam", model.decay_clock))
    assert model.decay_scale == 1.0
    assert sorted(model.changed_keys()) == sorted(model.stat_keys())
    reference = multinomial_reference({}, history, model.decay_clock, 1)
    assert_close(model.predict_log_proba_one({"b": 1, "z": 1}),
                 reference.predict_log_proba_one({"b": 1, "z": 1}))
    model.mark_changes()
    model.learn_one({"b": 1}, "ham")  # within the epoch: only the message's keys
    assert sorted(model.changed_keys()) == [token_key("b"), TOTALS_KEY]


def test_counts_that_decay_below_the_float_range_leave_the_vocabulary():
    model = MultinomialNB(half_life=1)
    model.learn_one({"old": 1}, "spam")
    for _ in range(1200):  # 2**-1200 is below the smallest float
        model.learn_one({"new": 1}, "spam")
    assert model.vocabulary_size == 1 and model.stat_value(token_key("old")) is None


@settings(max_examples=40, deadline=None)
@given(a_steps=steps, b_steps=steps, half_life=st.integers(1, 4), probe=messages)
def test_merge_sums_at_the_later_clock(a_steps, b_steps, half_life, probe):
    """The sum of two models: each message weighs 2^(-(T - t_i)/h), t_i the clock of its own
    model when learned and T the later of the two clocks."""
    a, b = MultinomialNB(half_life=half_life), MultinomialNB(half_life=half_life)
    held = replay(a, a_steps) + replay(b, b_steps)
    clock = max(a.decay_clock, b.decay_clock)
    total = a + b
    assert total.decay_clock == clock
    reference = multinomial_reference({}, held, clock, half_life)
    assert total.vocabulary_size == reference.vocabulary_size
    if len(reference.classes) == 2:
        assert_close(total.predict_log_proba_one(probe), reference.predict_log_proba_one(probe))
