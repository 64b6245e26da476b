"""The protocol the daemon and the evaluator call, and the errors bad input gets."""

from __future__ import annotations

import copy
import json
import math
from functools import partial

import pytest

from streamnb.models import (
    GDA,
    TEXTBOOK_OPTIONS,
    BernoulliNB,
    ModelInputError,
    StateError,
    make_model,
    model_from_state,
)
from streamnb.models import MultinomialNB as _MultinomialNB

# These tests count tokens by hand: pin the textbook multinomial whatever the defaults are.
MultinomialNB = partial(_MultinomialNB, **TEXTBOOK_OPTIONS)

KINDS = ["multinomial", "bernoulli", "gda"]


def example(kind, i=0):
    if kind == "gda":
        return [float(i), float(i % 3), 1.0 + i * i]
    return {"win": 1 + i % 2, f"w{i}": 1}


def trained(kind, n=6, **options):
    if kind == "multinomial":
        options = {**TEXTBOOK_OPTIONS, **options}
    model = make_model(kind, **options)
    for i in range(n):
        model.learn_one(example(kind, i), "spam" if i % 2 else "ham")
    return model


@pytest.mark.parametrize("kind", KINDS)
def test_empty_model_predicts_nothing(kind):
    model = make_model(kind)
    assert model.predict_log_proba_one(example(kind)) == {}
    assert model.predict_proba_one(example(kind)) == {}
    assert model.predict_one(example(kind)) is None
    assert model.classes == [] and model.n_updates == 0
    assert model.numeric_input is (kind == "gda")


@pytest.mark.parametrize("kind", KINDS)
def test_predictions_are_normalised_and_classes_are_sorted(kind):
    model = trained(kind)
    model.learn_one(example(kind, 9), "eggs")
    assert model.classes == ["eggs", "ham", "spam"]
    assert model.n_updates == 7
    proba = model.predict_proba_one(example(kind, 2))
    assert set(proba) == {"eggs", "ham", "spam"}
    assert math.fsum(proba.values()) == pytest.approx(1.0, abs=1e-12)
    assert model.predict_one(example(kind, 2)) == max(proba, key=proba.get)
    assert model.predict_proba_many([example(kind, 2)]) == [proba]


def test_make_model_names_unknown_kinds_and_options():
    with pytest.raises(ValueError, match="'svm'"):
        make_model("svm")
    with pytest.raises(ValueError, match="'smoothing'"):
        make_model("multinomial", smoothing=1.0)
    with pytest.raises(ValueError, match="'repeated_words'"):
        make_model("multinomial", repeated_words="twice")
    with pytest.raises(ValueError, match="'alpha'"):
        make_model("bernoulli", alpha=0)
    with pytest.raises(ValueError, match="'covariance'"):
        make_model("gda", covariance="full")
    with pytest.raises(ValueError, match="'n_buckets'"):
        make_model("multinomial", n_buckets=0)
    assert isinstance(make_model("gda", shrinkage=0.1), GDA)


@pytest.mark.parametrize("kind", KINDS)
def test_state_is_plain_json_with_kind_and_version(kind):
    state = trained(kind).to_state()
    assert json.loads(json.dumps(state)) == state
    assert state["model"] == kind and state["version"] == 1
    restored = model_from_state(state)
    assert type(restored) is type(make_model(kind))
    assert restored.predict_proba_one(example(kind, 3)) == \
        trained(kind).predict_proba_one(example(kind, 3))


def test_a_state_saved_with_the_old_tuned_defaults_keeps_its_options():
    """States carry every option: one saved when MultinomialNB() was the tuned mail scoring
    (what the "mail" preset now gives) loads with those options, not today's defaults."""
    mail = _MultinomialNB(alpha=0.2, repeated_words="binary", idf=True, length_norm=True,
                          min_spread=0.5)
    for i in range(8):
        mail.learn_one({"win": 1 + i % 3, f"w{i % 4}": 2, "cash": i % 2 + 1},
                       "spam" if i % 3 else "ham")
    state = json.loads(json.dumps(mail.to_state()))
    restored = model_from_state(state)
    assert restored.options() == mail.options() == {
        # the preset's before its α was 0.15, then 0.12 with spread_weight 0.7
        **make_model("multinomial", preset="mail").options(), "alpha": 0.2, "spread_weight": 0.0
    }
    query = {"win": 2, "w1": 1, "cash": 1}
    assert restored.predict_log_proba_one(query) == mail.predict_log_proba_one(query)
    assert restored.predict_log_proba_one(query) != _MultinomialNB.from_state(
        {**state, "options": {}}).predict_log_proba_one(query)


def test_a_state_without_the_scoring_options_loads_as_the_textbook_model():
    """States written before the scoring options existed hold only alpha, repeated_words,
    top_k and n_buckets: the model they were saved from scored like the textbook model."""
    model = MultinomialNB()
    model.learn_many([{"win": 2, "cash": 1}, {"lunch": 1}], ["spam", "ham"])
    state = model.to_state()
    old = {**state, "options": {k: state["options"][k]
                                for k in ("alpha", "repeated_words", "top_k", "n_buckets")}}
    assert model_from_state(old).options() == model.options()


@pytest.mark.parametrize("kind", KINDS)
def test_unusable_states_are_refused_with_a_clear_error(kind):
    state = trained(kind).to_state()
    with pytest.raises(StateError, match="version 99"):
        model_from_state({**state, "version": 99})
    with pytest.raises(StateError, match="unknown model kind"):
        model_from_state({**state, "model": "perceptron"})
    with pytest.raises(StateError, match="must be a dict"):
        model_from_state([state])
    with pytest.raises(StateError, match="missing field"):
        model_from_state({k: v for k, v in state.items() if k not in ("counts", "outer")})
    truncated = json.loads(json.dumps(state))
    key = "outer" if kind == "gda" else "counts"
    truncated[key][0] = truncated[key][0][:-1]
    with pytest.raises(StateError, match=key):  # ragged
        model_from_state(truncated)
    reshaped = json.loads(json.dumps(state))
    reshaped[key] = reshaped[key][:1]
    with pytest.raises(StateError, match="shape"):
        model_from_state(reshaped)
    with pytest.raises(StateError):
        model_from_state({**state, "options": {**state["options"], "colour": "red"}})
    with pytest.raises(ValueError):  # StateError is a ValueError
        type(make_model(kind)).from_state({**state, "classes": "ham"})


def test_other_kinds_state_is_refused_by_a_class():
    with pytest.raises(StateError, match="'multinomial', not 'bernoulli'"):
        BernoulliNB.from_state(trained("multinomial").to_state())


@pytest.mark.parametrize("bad", [["win"], "win", {"win": -1}, {"win": math.nan},
                                 {"win": math.inf}, {"win": "two"}, {3: 1}])
def test_text_models_reject_bad_messages(bad):
    model = trained("multinomial")
    before = model.to_state()
    with pytest.raises(ModelInputError):
        model.learn_one(bad, "spam")
    with pytest.raises((TypeError, ValueError)):
        model.predict_one(bad) if not isinstance(bad, dict) or 3 not in bad else \
            model.learn_one(bad, "ham")
    assert model.to_state() == before


@pytest.mark.parametrize("bad", [{"a": 1.0}, [1.0, 2.0], [1.0, math.nan, 0], "abc",
                                 [[1.0, 2.0, 3.0]]])
def test_gda_rejects_bad_vectors(bad):
    model = trained("gda")
    with pytest.raises(ModelInputError):
        model.learn_one(bad, "spam")
    with pytest.raises(ModelInputError):
        model.predict_one(bad)


@pytest.mark.parametrize("kind", KINDS)
def test_labels_must_be_strings(kind):
    with pytest.raises(ModelInputError, match="str"):
        make_model(kind).learn_one(example(kind), 1)
    with pytest.raises(ModelInputError):
        make_model(kind).learn_many([example(kind)], [])


@pytest.mark.parametrize("kind", KINDS)
def test_copies_are_independent(kind):
    model = trained(kind)
    for duplicate in (model.copy(), copy.deepcopy(model)):
        duplicate.learn_one(example(kind, 1), "eggs")
        assert "eggs" not in model.classes and "eggs" in duplicate.classes


def test_models_of_different_kinds_or_counting_do_not_merge():
    with pytest.raises(TypeError):
        trained("multinomial").merge(trained("bernoulli"))
    with pytest.raises(ValueError, match="n_buckets"):
        trained("multinomial", n_buckets=8).merge(trained("multinomial"))
    with pytest.raises(ValueError, match="counts_occurrences"):
        trained("multinomial", repeated_words="binary").merge(trained("multinomial"))
    # counting every occurrence is the same statistic for "count" and "mixed"
    merged = trained("multinomial", repeated_words="mixed") + trained("multinomial")
    assert merged.n_updates == 12


def test_a_negative_slice_is_kept_but_not_scored():
    part = MultinomialNB()
    part.learn_one({"a": 1}, "ham")
    part.learn_one({"a": 1}, "ham")
    part.unlearn_one({"b": 2}, "ham")  # learned in another slice
    assert part.to_state()["counts"] == [[2, -2]]
    with pytest.raises(ValueError, match="negative counts"):
        part.predict_one({"b": 1})
    other = MultinomialNB()
    other.learn_one({"b": 2}, "ham")
    assert (part + other).predict_proba_one({"a": 1}) == {"ham": 1.0}


def test_hashing_bounds_the_vocabulary_and_state():
    exact, hashed = MultinomialNB(), MultinomialNB(n_buckets=64)
    for i in range(2000):
        message = {f"token{i}": 1, f"other{i}": 2}
        exact.learn_one(message, "ham" if i % 3 else "spam")
        hashed.learn_one(message, "ham" if i % 3 else "spam")
    assert exact.vocabulary_size == 4000
    assert hashed.vocabulary_size <= 64
    assert hashed.state_nbytes() < exact.state_nbytes() / 20
    weights = hashed.weights("spam", "ham")
    assert all(isinstance(k, int) and 0 <= k < 64 for k in weights)
    tokens = hashed.explain({"token5": 1, "never-seen-before": 1})["tokens"]
    assert "token5" in tokens or any("token5" in name for name in tokens)


def test_state_size_grows_with_the_vocabulary():
    model = BernoulliNB()
    sizes = []
    for n in (10, 100, 1000):
        model.learn_one({f"w{i}": 1 for i in range(n)}, "ham")
        sizes.append(model.state_nbytes())
    assert sizes[0] < sizes[1] < sizes[2]
    assert model.vocabulary_size == 1000


def test_weights_need_known_classes():
    with pytest.raises(ValueError, match="'eggs'"):
        trained("multinomial").weights("eggs", "ham")


def test_gda_says_when_the_ridge_was_needed():
    model = GDA(ridge=1e-3)
    model.learn_one([1.0, 2.0, 3.0], "a")
    model.learn_one([2.0, 2.0, 5.0], "b")  # 2 points in 3-D: Σ is singular
    explained = model.explain([1.5, 2.0, 4.0])
    assert explained["regularized"] and explained["ridge"] > 0 and model.regularized
    assert set(explained["log_proba"]) == {"a", "b"}
    for i in range(30):
        model.learn_one([i * 0.7, (i * i) % 7, math.sin(i)], "a" if i % 2 else "b")
    assert not model.regularized and not model.explain([0.0, 1.0, 0.0])["regularized"]


def test_gda_shrinkage_moves_towards_the_identity():
    plain, shrunk = GDA(), GDA(shrinkage=1.0)
    for model in (plain, shrunk):
        model.learn_many([[0, 0], [2, 1], [1, 3], [5, 5], [6, 7], [7, 6]], list("aaabbb"))
    # with λ = 1 the covariance used is (tr Σ / d) I: the posterior only sees distances
    x = [3.5, 3.0]
    assert shrunk.predict_proba_one(x) != plain.predict_proba_one(x)
    assert MultinomialNB(top_k=3).top_k == 3
