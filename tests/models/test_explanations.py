"""explain_log_odds: the contributions add up to the log-odds the model predicts with."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.models import make_model

WORDS = [f"w{i}" for i in range(90)]
message = st.dictionaries(st.sampled_from(WORDS), st.integers(1, 4), max_size=80)
# The query may hold words the model never learned (they are ignored, contributing nothing).
query = st.dictionaries(st.sampled_from(WORDS + ["unseen", "other"]), st.integers(1, 4),
                        max_size=85)
CONFIGS = {
    "multinomial": ("multinomial", {}),
    "mail": ("multinomial", {"preset": "mail"}),
    "bernoulli": ("bernoulli", {}),
    "mail, top_k and temperature": ("multinomial", {"preset": "mail", "top_k": 5,
                                                    "temperature": 2.5}),
    "complement, log tf": ("multinomial", {"complement": True, "tf": "log"}),
    "hashed": ("multinomial", {"n_buckets": 16}),
    "bernoulli, top_k": ("bernoulli", {"alpha": 0.3, "top_k": 4, "temperature": 0.5}),
}


def trained(config, stream):
    kind, options = CONFIGS[config]
    model = make_model(kind, **options)
    for x, y in stream:
        model.learn_one(x, y)
    return model


def parts(why):
    return [why["prior"], why.get("absent_words", 0.0), *(c for _, c in why["tokens"]),
            why["rest"]]


def close(a, b, scale):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * max(1.0, scale))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(sorted(CONFIGS)),
       stream=st.lists(st.tuples(message, st.sampled_from(["ham", "spam", "work"])),
                       max_size=25),
       x=query, k=st.integers(0, 12))
def test_the_contributions_add_up_to_the_predicted_log_odds(config, stream, x, k):
    model = trained(config, stream)
    why = model.explain_log_odds(x, k)
    log_proba = model.predict_log_proba_one(x)  # the prediction path, not explain's
    if len(log_proba) < 2:
        assert why is None
        return
    label, versus = why["label"], why["versus"]
    assert label == model.predict_one(x)
    assert versus != label
    assert log_proba[versus] == max(v for c, v in log_proba.items() if c != label)
    terms = parts(why)
    scale = sum(map(abs, terms))
    assert close(math.fsum(terms), why["log_odds"], scale)
    assert close(why["log_odds"], log_proba[label] - log_proba[versus], scale)
    # the k strongest, strongest first; the rest is the sum of the others
    shown = [c for _, c in why["tokens"]]
    assert len(shown) == min(k, why["n_tokens"])
    assert shown == sorted(shown, key=abs, reverse=True)
    everything = model.explain_log_odds(x, why["n_tokens"])
    assert everything["rest"] == 0.0
    tail = [c for _, c in everything["tokens"]][k:]
    assert close(why["rest"], math.fsum(tail), scale)
    assert {t for t, _ in why["tokens"]} <= {t for t, _ in everything["tokens"]}
    if config == "hashed":  # colliding tokens share one scored bucket, named "a|b"
        assert why["n_tokens"] + why["n_ignored"] <= len(x)
    else:
        assert why["n_tokens"] + why["n_ignored"] == len(x)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=st.lists(st.tuples(message, st.sampled_from(["ham", "spam"])), min_size=2,
                       max_size=20),
       x=query)
def test_a_textbook_contribution_is_the_seeds_weight_of_the_token(stream, x):
    """Multinomial: x_t log(θ_t|label / θ_t|versus); Bernoulli: the log-odds of presence."""
    for kind in ("multinomial", "bernoulli"):
        model = make_model(kind)
        for message_x, y in stream:
            model.learn_one(message_x, y)
        why = model.explain_log_odds(x, len(x))
        if why is None:
            continue
        label, versus = why["label"], why["versus"]
        first, second = model.feature_log_prob(label), model.feature_log_prob(versus)
        state = model.to_state()
        n_docs = dict(zip(state["classes"], state["n_docs"], strict=True))
        assert why["prior"] == pytest.approx(math.log(n_docs[label] / n_docs[versus]),
                                             abs=1e-12)
        for token, contribution in why["tokens"]:
            if kind == "multinomial":
                expected = x[token] * (first[token] - second[token])
            else:
                def log_odds_present(log_phi):
                    return log_phi - math.log1p(-math.exp(log_phi))
                expected = log_odds_present(first[token]) - log_odds_present(second[token])
            assert contribution == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert why["n_ignored"] == sum(token not in first for token in x)


def test_robinson_combining_has_no_exact_split():
    model = make_model("multinomial", combining="robinson")
    model.learn_many([{"a": 1}, {"b": 1}], ["ham", "spam"])
    assert "chi-square" in model.explanation_unavailable()
    with pytest.raises(ValueError, match="no exact per-token split"):
        model.explain_log_odds({"a": 1})


def test_one_known_class_has_nothing_to_weigh_against():
    model = make_model("multinomial", preset="mail")
    assert model.explain_log_odds({"a": 1}) is None
    model.learn_one({"a": 1}, "spam")
    assert model.explain_log_odds({"a": 1}) is None
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        model.explain_log_odds({"a": 1}, -1)
