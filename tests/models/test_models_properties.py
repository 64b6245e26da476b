"""Invariants users rely on, checked on generated streams (hypothesis)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamnb.models import GDA, TEXTBOOK_OPTIONS, model_from_state
from streamnb.models import make_model as _make_model


def make_model(kind, **options):
    """The textbook multinomial (the formulas below) whatever the defaults are."""
    if kind == "multinomial":
        options = {**TEXTBOOK_OPTIONS, **options}
    return _make_model(kind, **options)

WORDS = ["win", "cash", "now", "meeting", "lunch", "发票", "正规", "naïve", "x", "y", "z", "the"]
LABELS = ["ham", "spam", "eggs"]

messages = st.dictionaries(st.sampled_from(WORDS), st.integers(1, 5), max_size=6)
examples = st.tuples(messages, st.sampled_from(LABELS))
streams = st.lists(examples, max_size=25)
text_configs = st.sampled_from([
    ("multinomial", {"repeated_words": "count"}),
    ("multinomial", {"repeated_words": "mixed", "alpha": 0.5}),
    ("multinomial", {"repeated_words": "binary"}),
    ("multinomial", {"n_buckets": 5}),  # tiny: collisions guaranteed
    ("bernoulli", {}),
    ("bernoulli", {"alpha": 0.25, "n_buckets": 5}),
])
vectors = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=3, max_size=3)
gda_streams = st.lists(st.tuples(vectors, st.sampled_from(LABELS)), max_size=20)
gda_configs = st.sampled_from(["pooled", "per_class", "diagonal"])

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def learned(config, stream):
    kind, options = config
    model = make_model(kind, **options)
    for x, y in stream:
        model.learn_one(x, y)
    return model


def predictions(model, probes):
    return [model.predict_log_proba_one(x) for x in probes]


PROBES = [{}, {"win": 1}, {"cash": 2, "now": 1, "unseen": 4}, {w: 1 for w in WORDS}]


@SETTINGS
@given(text_configs, streams, streams, streams)
def test_merge_is_one_stream_in_any_order(config, a, b, c):
    one_stream = learned(config, a + b + c).to_state()
    A, B, C = (learned(config, s) for s in (a, b, c))
    assert (A + B + C).to_state() == one_stream
    assert (C + (B + A)).to_state() == one_stream  # commutative and associative, exactly
    merged = A.copy()
    merged += B
    merged.merge(C)
    assert merged.to_state() == one_stream
    assert predictions(merged, PROBES) == predictions(learned(config, a + b + c), PROBES)
    merged -= C
    assert merged.to_state() == learned(config, a + b).to_state()


@SETTINGS
@given(text_configs, streams, examples)
def test_learn_then_unlearn_restores_the_state_exactly(config, stream, example):
    model = learned(config, stream)
    before = model.to_state()
    model.learn_one(*example)
    model.unlearn_one(*example)
    assert model.to_state() == before
    for x, y in reversed(stream):
        model.unlearn_one(x, y)
    assert model.to_state() == learned(config, []).to_state()
    assert model.vocabulary_size == 0 and model.classes == [] and model.n_updates == 0
    assert model.predict_log_proba_one({"win": 1}) == {}


@SETTINGS
@given(text_configs, streams, st.lists(st.integers(0, 2), max_size=25), st.data())
def test_slices_sum_to_the_net_stream(config, stream, slice_of, data):
    """Per-partition slices, with relabels unlearned in whichever slice the feedback lands."""
    slices = [learned(config, []) for _ in range(3)]
    net = learned(config, [])
    for i, (x, y) in enumerate(stream):
        slices[slice_of[i] if i < len(slice_of) else 0].learn_one(x, y)
        net.learn_one(x, y)
    relabels = data.draw(st.lists(st.tuples(st.integers(0, max(len(stream) - 1, 0)),
                                            st.sampled_from(LABELS), st.integers(0, 2)),
                                  max_size=5 if stream else 0))
    for index, new_label, where in relabels:
        x, old_label = stream[index]
        slices[where].unlearn_one(x, old_label)  # may go negative in that slice
        slices[where].learn_one(x, new_label)
        net.unlearn_one(x, old_label)
        net.learn_one(x, new_label)
        stream[index] = (x, new_label)
    total = slices[0] + slices[1] + slices[2]
    assert total.to_state() == net.to_state()
    assert predictions(total, PROBES) == predictions(net, PROBES)
    for part in slices:  # a slice alone restores exactly too
        assert model_from_state(json.loads(json.dumps(part.to_state()))).to_state() == \
            part.to_state()


@SETTINGS
@given(text_configs, streams)
def test_batch_is_one_at_a_time(config, stream):
    kind, options = config
    batch = make_model(kind, **options)
    batch.learn_many([x for x, _ in stream], [y for _, y in stream])
    single = learned(config, stream)
    assert batch.to_state() == single.to_state()
    assert batch.predict_many(PROBES) == [single.predict_one(x) for x in PROBES]
    assert batch.predict_proba_many(PROBES) == [single.predict_proba_one(x) for x in PROBES]


@SETTINGS
@given(text_configs, streams)
def test_state_round_trips_through_json(config, stream):
    model = learned(config, stream)
    state = json.loads(json.dumps(model.to_state()))
    restored = model_from_state(state)
    assert restored.to_state() == model.to_state()
    assert predictions(restored, PROBES) == predictions(model, PROBES)
    assert restored.vocabulary_size == model.vocabulary_size
    assert restored.n_updates == model.n_updates


def brute_force_log_proba(model, x):
    """The textbook formulas, looping over the whole vocabulary (O(|V|) per prediction)."""
    state = model.to_state()
    alpha, vocabulary = state["options"]["alpha"], state["vocabulary"]
    n_buckets = state["options"]["n_buckets"]
    if n_buckets is not None:
        from streamnb.hashing import stable_bucket
        bucketed: dict = {}
        for token, count in x.items():
            bucket = stable_bucket(token, n_buckets)
            bucketed[bucket] = bucketed.get(bucket, 0) + count
        x = bucketed
    present = {k: v for k, v in x.items() if k in vocabulary}
    scores = {}
    total_docs = sum(n for n in state["n_docs"] if n > 0)
    for label, n_docs, total, counts in zip(state["classes"], state["n_docs"], state["totals"],
                                            state["counts"], strict=True):
        if n_docs <= 0:
            continue
        score = math.log(n_docs / total_docs)
        count_of = dict(zip(vocabulary, counts, strict=True))
        if state["model"] == "bernoulli":
            for word in vocabulary:
                phi = (count_of[word] + alpha) / (n_docs + 2 * alpha)
                score += math.log(phi if word in present else 1 - phi)
        else:
            once = state["options"]["repeated_words"] != "count"
            for word, n in present.items():
                theta = (count_of[word] + alpha) / (total + alpha * len(vocabulary))
                score += (1 if once else n) * math.log(theta)
        scores[label] = score
    top = max(scores.values())
    log_z = top + math.log(sum(math.exp(s - top) for s in scores.values()))
    return {label: s - log_z for label, s in scores.items()}


@SETTINGS
@given(text_configs, streams, st.lists(st.integers(0, 24), max_size=10), messages)
def test_scores_equal_the_textbook_formulas_after_any_history(config, stream, forget, x):
    """In particular Bernoulli's cached absent-word term equals the O(|V|) sum."""
    model = learned(config, stream)
    for index in sorted(set(forget)):
        if index < len(stream):
            model.unlearn_one(*stream[index])
        model.predict_log_proba_one(x)  # exercise the cache between updates
    expected = brute_force_log_proba(model, x) if model.classes else {}
    got = model.predict_log_proba_one(x)
    assert got.keys() == expected.keys()
    for label in expected:
        assert got[label] == pytest.approx(expected[label], rel=1e-9, abs=1e-9)


@SETTINGS
@given(text_configs, streams, messages)
def test_explain_adds_up_and_top_k_covers_the_message(config, stream, x):
    model = learned(config, stream)
    if not model.classes:
        return
    full = model.predict_log_proba_one(x)
    assert model.predict_log_proba_one(x, top_k=len(WORDS)) == full
    explained = model.explain(x)
    joint = {c: explained["base"][c] + math.fsum(t[c] for t in explained["tokens"].values())
             for c in model.classes}
    top = max(joint.values())
    log_z = top + math.log(sum(math.exp(s - top) for s in joint.values()))
    assert {c: s - log_z for c, s in joint.items()} == pytest.approx(full, abs=1e-9)
    # explain takes the array path; a short message is predicted by the plain-Python one
    assert explained["log_proba"] == pytest.approx(full, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("kind", ["multinomial", "bernoulli"])
@pytest.mark.parametrize("repeated_words", ["count", "mixed"])
def test_a_100k_token_message_has_finite_log_probabilities(kind, repeated_words):
    options = {"repeated_words": repeated_words} if kind == "multinomial" else {}
    model = make_model(kind, **options)
    model.learn_one({"cheap": 3, "pills": 2}, "spam")
    model.learn_one({"agenda": 1, "pills": 1}, "ham")
    huge = {f"w{i}": 1 for i in range(100_000)}
    huge["cheap"] = 100_000
    model.learn_one(huge, "spam")
    for x in (huge, {"cheap": 100_000}, {"agenda": 100_000}):
        log_proba = model.predict_log_proba_one(x)
        assert all(math.isfinite(v) and v <= 0 for v in log_proba.values())
        assert math.fsum(math.exp(v) for v in log_proba.values()) == pytest.approx(1.0)
    # the odds are not saturated: the loser keeps a finite, very negative log-probability
    assert min(model.predict_log_proba_one(huge).values()) < -1000


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e9, 1e9), st.dictionaries(
    st.sampled_from(LABELS), st.floats(-2000, 0, allow_nan=False), min_size=2, max_size=3))
def test_normalised_log_probabilities_keep_every_class_and_add_up_to_one(offset, gaps):
    """Scores of any magnitude (a long message scores -1e7) and gaps (a class thousands below
    the best underflows to probability 0.0): every class keeps a finite log-probability, the
    gaps between them are the scores', and their exps add up to 1 to rounding, however large
    the scores (normalised as (s - top) - log Σ, not rounded to the top score's ulp)."""
    from streamnb.models._base import log_normalise, probabilities_of

    scores = {label: offset + gap for label, gap in gaps.items()}
    log_proba = log_normalise(scores)
    assert list(log_proba) == list(scores)
    assert all(math.isfinite(lp) and lp <= 0 for lp in log_proba.values())
    assert max(log_proba.values()) > -math.log(len(scores)) - 1e-12
    proba = probabilities_of(log_proba)
    assert list(proba) == list(scores)
    assert math.fsum(proba.values()) == pytest.approx(1.0, rel=1e-15, abs=0)
    a, b = list(scores)[:2]
    ulp = math.ulp(max(abs(scores[a]), abs(scores[b]), 1.0))
    assert abs((log_proba[a] - log_proba[b]) - (scores[a] - scores[b])) <= 4 * ulp


def test_gda_far_from_every_class_has_finite_log_probabilities():
    model = GDA()
    model.learn_many([[0, 0], [1, 1], [0, 1], [10, 10], [11, 10], [10, 12]], list("aaabbb"))
    log_proba = model.predict_log_proba_one([1e6, -1e6])
    assert all(math.isfinite(v) for v in log_proba.values())
    assert math.fsum(math.exp(v) for v in log_proba.values()) == pytest.approx(1.0)


def gda_learned(covariance, stream):
    model = GDA(covariance=covariance)
    for x, y in stream:
        model.learn_one(x, y)
    return model


def assert_gda_close(a: GDA, b: GDA):
    assert a.classes == b.classes
    if not a.classes:
        return
    for label in a.classes:
        np.testing.assert_allclose(a.means()[label], b.means()[label], rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(a.covariance(), b.covariance(), rtol=1e-9, atol=1e-5)


@SETTINGS
@given(gda_configs, gda_streams, gda_streams, gda_streams)
def test_gda_merge_is_one_stream_to_rounding(covariance, a, b, c):
    one = gda_learned(covariance, a + b + c)
    A, B, C = (gda_learned(covariance, s) for s in (a, b, c))
    assert_gda_close(A + B + C, one)
    assert_gda_close(C + (B + A), one)
    assert_gda_close(A + B + C - C, gda_learned(covariance, a + b))
    assert (A + B).n_updates == len(a) + len(b)


@SETTINGS
@given(gda_configs, gda_streams, st.tuples(vectors, st.sampled_from(LABELS)))
def test_gda_unlearn_is_the_inverse_of_learn(covariance, stream, example):
    model = gda_learned(covariance, stream)
    reference = gda_learned(covariance, stream)
    model.learn_one(*example)
    model.unlearn_one(*example)
    assert_gda_close(model, reference)
    for x, y in stream:
        model.unlearn_one(x, y)
    model.unlearn_one(*example)
    model.learn_one(*example)  # back to an empty model, through a negative count
    assert model.classes == [] and model.n_updates == 0


@SETTINGS
@given(gda_configs, gda_streams)
# a variance that underflows (~1e-323): the far probe's distance must stay finite
@example("per_class", [([0.0, 0.0, 0.0], "ham"), ([0.0, 0.0, 6.517717840247872e-162], "ham")])
@example("per_class", [([0.0, 0.0, 0.0], "ham"), ([0.0, 0.0, 6.517717840247872e-162], "ham"),
                       ([1.0, 0.0, 0.0], "spam"), ([1.0, 0.0, 6.517717840247872e-162], "spam")])
def test_gda_batch_and_state_round_trip_are_exact(covariance, stream):
    model = gda_learned(covariance, stream)
    batch = GDA(covariance=covariance)
    batch.learn_many([x for x, _ in stream], [y for _, y in stream])
    assert batch.to_state() == model.to_state()
    restored = model_from_state(json.loads(json.dumps(model.to_state())))
    assert restored.to_state() == model.to_state()
    probes = [[0.0, 0.0, 0.0], [100.0, -5.0, 3.0]]
    assert restored.predict_many(probes) == model.predict_many(probes)
    assert [restored.predict_log_proba_one(p) for p in probes] == \
        [model.predict_log_proba_one(p) for p in probes]
