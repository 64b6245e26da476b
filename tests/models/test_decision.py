"""The decision option ``class_offsets``: the label is the class of highest log-posterior plus
its offset; the probabilities, the counts, merging and restoring are those of the model
without it, and a model without it is the model of before, to the bit."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.models import GDA, BernoulliNB, MultinomialNB, make_model, model_from_state
from streamnb.models.presets import MAIL

TRAIN = [({"cheap": 2, "pills": 1}, "spam"), ({"meeting": 1, "notes": 1}, "ham")]


def learned(model, stream):
    for x, y in stream:
        model.learn_one(x, y)
    return model


def argmax_with_offsets(log_proba, offsets):
    """The decision written out: highest log P + offset, ties to the first label in order."""
    if not log_proba:
        return None
    best = max(log_proba[c] + offsets.get(c, 0.0) for c in log_proba)
    return sorted(c for c in log_proba if log_proba[c] + offsets.get(c, 0.0) == best)[0]


# -- hand-worked cases ---------------------------------------------------------------------

def test_two_classes_an_offset_on_spam_is_a_probability_threshold():
    # Textbook model, |V| = 4: P(spam | cheap) = (3/7) / (3/7 + 1/6) = 0.72, log-odds
    # ln(0.72 / 0.28) = 0.944. An offset b on spam labels spam iff 0.944 + b > 0, that is iff
    # P(spam) > 1 / (1 + e^b): b = -0.9 asks for 0.711 (spam), b = -1 for 0.731 (ham).
    plain = learned(MultinomialNB(), TRAIN)
    assert plain.predict_proba_one({"cheap": 1})["spam"] == pytest.approx(0.72)
    assert plain.predict_one({"cheap": 1}) == "spam"
    for offsets, label in [({"spam": -0.9}, "spam"), ({"spam": -1.0}, "ham"),
                           ({"ham": 1.0}, "ham"), ({"ham": 0.9}, "spam"),
                           ({"ham": 0.5, "spam": -0.5}, "ham")]:
        model = learned(MultinomialNB(class_offsets=offsets), TRAIN)
        assert model.predict_one({"cheap": 1}) == label, offsets
        # the probabilities stay the posterior's
        assert model.predict_proba_one({"cheap": 1}) == plain.predict_proba_one({"cheap": 1})
    # a threshold of 0.9 is the offset ln((1 - 0.9) / 0.9) = ln(1/9)
    strict = learned(MultinomialNB(class_offsets={"spam": math.log(1 / 9)}), TRAIN)
    assert [strict.predict_one(x) for x in ({"cheap": 1}, {"cheap": 3, "pills": 2})] == [
        "ham", "spam"]  # P(spam) 0.72 and 0.995
    assert strict.predict_proba_one({"cheap": 3, "pills": 2})["spam"] > 0.9


def test_three_classes_the_offsets_move_the_argmax():
    # One message per class, one token each, α = 1, |V| = 3: θ_x|a = 2/4, θ_x|b = θ_x|c = 1/4,
    # equal priors, so P(· | x) = (1/2, 1/4, 1/4).
    stream = [({"x": 1}, "a"), ({"y": 1}, "b"), ({"z": 1}, "c")]
    plain = learned(MultinomialNB(), stream)
    assert plain.predict_proba_one({"x": 1}) == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})
    cases = [
        ({}, "a"),
        ({"c": math.log(2) + 0.01}, "c"),      # ln 1/4 + ln 2 + 0.01 > ln 1/2
        ({"c": math.log(2) - 0.01}, "a"),
        ({"a": -1.0}, "b"),                    # ln 1/2 − 1 < ln 1/4 = ln 1/4: b before c
        ({"a": -1.0, "c": 0.001}, "c"),
        ({"a": 5.0, "b": 5.0, "c": 5.0}, "a"),  # only differences count
    ]
    for offsets, label in cases:
        model = learned(MultinomialNB(class_offsets=offsets), stream)
        assert model.predict_one({"x": 1}) == label, offsets
        assert model.explain({"x": 1})["prediction"] == label


def test_every_model_kind_decides_with_its_offsets():
    bernoulli = learned(BernoulliNB(class_offsets={"spam": -50.0}), TRAIN)
    assert bernoulli.predict_log_proba_one({"cheap": 1}) == learned(
        BernoulliNB(), TRAIN).predict_log_proba_one({"cheap": 1})
    assert learned(BernoulliNB(), TRAIN).predict_one({"cheap": 1}) == "spam"
    assert bernoulli.predict_one({"cheap": 1}) == "ham"
    points = [([0.0, 0.0], "a"), ([0.2, 0.1], "a"), ([1.0, 1.0], "b"), ([1.1, 0.9], "b")]
    gda, shifted = GDA(), GDA(class_offsets={"b": 1e6})
    for x, y in points:
        gda.learn_one(x, y)
        shifted.learn_one(x, y)
    assert gda.predict_one([0.1, 0.0]) == "a"
    assert shifted.predict_one([0.1, 0.0]) == shifted.explain([0.1, 0.0])["prediction"] == "b"
    assert shifted.predict_log_proba_one([0.1, 0.0]) == gda.predict_log_proba_one([0.1, 0.0])


def test_offsets_for_classes_the_model_does_not_know_change_nothing():
    model = learned(MultinomialNB(class_offsets={"newsletter": 9.0}), TRAIN)
    assert model.predict_one({"cheap": 1}) == "spam"
    assert MultinomialNB(class_offsets={"spam": -3.0}).predict_one({"cheap": 1}) is None


def test_explanation_names_the_decided_label_and_the_offset():
    x = {"cheap": 1}
    plain = learned(MultinomialNB(), TRAIN).explain_log_odds(x)
    assert "offset" not in plain and plain["label"] == "spam"
    why = learned(MultinomialNB(class_offsets={"spam": -1.0}), TRAIN).explain_log_odds(x)
    assert (why["label"], why["versus"], why["offset"]) == ("ham", "spam", 1.0)
    assert why["log_odds"] == pytest.approx(-plain["log_odds"])  # ham is the less probable
    assert why["log_odds"] + why["offset"] >= 0
    parts = why["prior"] + sum(c for _, c in why["tokens"]) + why["rest"]
    assert parts == pytest.approx(why["log_odds"], abs=1e-12)


# -- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [3, "spam", ["spam"], {"spam": "high"}, {"spam": float("nan")},
                                 {"spam": float("inf")}, {"spam": True}, {"": 1.0},
                                 {1: 1.0}, {"spam": None}])
@pytest.mark.parametrize("kind", ["multinomial", "bernoulli", "gda"])
def test_a_bad_offset_table_is_refused_naming_the_option(kind, bad):
    with pytest.raises(ValueError, match="option 'class_offsets'"):
        make_model(kind, class_offsets=bad)


# -- unset: the model of before --------------------------------------------------------------

@pytest.mark.parametrize("unset", [None, {}, {"spam": 0}, {"spam": 0.0, "ham": -0.0}])
@pytest.mark.parametrize("kind", ["multinomial", "bernoulli", "gda"])
def test_unset_or_zero_offsets_are_the_model_without_the_option(kind, unset):
    preset = {"preset": "mail"} if kind == "multinomial" else {}
    base = make_model(kind, **preset)
    model = make_model(kind, **preset, class_offsets=unset)
    assert "class_offsets" not in model.options()
    assert model.options() == base.options() and repr(model) == repr(base)
    assert model.to_state() == base.to_state()


# -- properties ------------------------------------------------------------------------------

WORDS = st.sampled_from(["cash", "win", "free", "lunch", "notes", "today", "meet", "pills"])
MESSAGE = st.dictionaries(WORDS, st.integers(1, 4), min_size=0, max_size=6)
LABELS = ["ham", "spam", "work"]
STREAM = st.lists(st.tuples(MESSAGE, st.sampled_from(LABELS)), max_size=12)
OFFSETS = st.dictionaries(st.sampled_from([*LABELS, "unknown"]),
                          st.floats(-8, 8, allow_nan=False), max_size=4)
PROBES = [{}, {"cash": 1}, {"lunch": 2, "win": 1}, {"free": 1, "notes": 1, "today": 3},
          {"meet": 1, "pills": 1, "unseen": 2}]
KINDS = st.sampled_from([("multinomial", {}), ("multinomial", dict(MAIL)),
                         ("bernoulli", {"alpha": 0.5})])


@settings(max_examples=60, deadline=None)
@given(kind=KINDS, offsets=OFFSETS, a=STREAM, b=STREAM)
def test_label_is_the_argmax_of_log_posterior_plus_offsets_and_nothing_else_moves(
        kind, offsets, a, b):
    name, options = kind
    plain = learned(make_model(name, **options), a + b)
    model = learned(make_model(name, **options, class_offsets=offsets), a + b)
    for x in PROBES:
        log_proba = model.predict_log_proba_one(x)
        assert log_proba == plain.predict_log_proba_one(x)  # the posterior, to the bit
        assert model.predict_one(x) == argmax_with_offsets(log_proba, offsets)
        assert model.decide_proba(model.predict_proba_one(x)) == model.predict_one(x) or \
            _near_a_tie(log_proba, offsets)
    # the counts are the model's without offsets
    state, plain_state = model.to_state(), plain.to_state()
    assert state.pop("options").pop("class_offsets", {}) == {
        k: float(v) for k, v in sorted(offsets.items()) if v != 0}
    plain_state.pop("options")
    assert state == plain_state
    # merged slices (with or without offsets) predict as one stream; the left side's offsets
    merged = learned(make_model(name, **options, class_offsets=offsets), a)
    merged += learned(make_model(name, **options), b)
    restored = model_from_state(json.loads(json.dumps(model.to_state())))
    assert restored.class_offsets == model.class_offsets
    for x in PROBES:
        assert merged.predict_log_proba_one(x) == model.predict_log_proba_one(x)
        assert merged.predict_one(x) == restored.predict_one(x) == model.predict_one(x)
    # and unlearning b gives back the model of a, offsets kept
    for x, y in b:
        model.unlearn_one(x, y)
    only_a = learned(make_model(name, **options, class_offsets=offsets), a)
    assert [model.predict_one(x) for x in PROBES] == [only_a.predict_one(x) for x in PROBES]


def _near_a_tie(log_proba, offsets):
    """Whether two classes' adjusted scores are within rounding (the probability path takes
    log(exp(lp)), which may move lp by an ulp)."""
    scores = sorted((lp + offsets.get(c, 0.0) for c, lp in log_proba.items()), reverse=True)
    return len(scores) > 1 and scores[0] - scores[1] < 1e-9


@settings(max_examples=30, deadline=None)
@given(offsets=OFFSETS, stream=STREAM)
def test_the_batch_step_returns_the_posterior_and_predict_one_decides_on_it(offsets, stream):
    xs, ys = [x for x, _ in stream], [y for _, y in stream]
    with_offsets = MultinomialNB(**MAIL, class_offsets=offsets)
    plain = MultinomialNB(**MAIL)
    assert with_offsets.prequential_many(xs, ys) == plain.prequential_many(xs, ys)
    assert with_offsets.to_state()["counts"] == plain.to_state()["counts"]
