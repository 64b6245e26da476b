"""Histograms observed a batch at a time hold what per-message observations would."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.metrics import END_TO_END_BUCKETS, PROCESSING_BUCKETS, Metrics

# Amounts on, just below and just above every bucket bound, and anything in between.
EDGES = [b * f for b in PROCESSING_BUCKETS + END_TO_END_BUCKETS for f in (1.0, 0.999, 1.001)]
amounts = st.lists(st.one_of(st.sampled_from(EDGES), st.floats(-1.0, 5000.0)), max_size=40)

HISTOGRAMS = [("streamnb_processing_latency_seconds", "observe_latency", "observe_latencies"),
              ("streamnb_end_to_end_latency_seconds", "observe_end_to_end",
               "observe_end_to_end_many")]


def buckets(m: Metrics, name: str) -> dict[str, float]:
    return {s.labels["le"]: s.value for f in m.registry.collect() if f.name == name
            for s in f.samples if s.name == name + "_bucket"}


@settings(max_examples=60, deadline=None)
@given(amounts)
def test_a_batch_observation_equals_one_observation_each(xs):
    one, batch = Metrics(), Metrics()
    for name, single, many in HISTOGRAMS:
        for x in xs:
            getattr(one, single)(x)
        getattr(batch, many)(xs)
        assert buckets(batch, name) == buckets(one, name)
        total_one = one.sample(name + "_sum")
        total_batch = batch.sample(name + "_sum")
        assert math.isclose(total_batch, total_one, rel_tol=1e-9, abs_tol=1e-9)
        assert batch.sample(name + "_count") == one.sample(name + "_count") == len(xs)


# Scores at and around both clips of the logit scale, the ends, and anything in between.
_CLIPPED = 1.0 / (1.0 + math.exp(40.0))
scores_ = st.one_of(st.sampled_from([0.0, 1.0, -0.5, 1.5, math.nan, 0.5, _CLIPPED,
                                     _CLIPPED * 0.999, _CLIPPED * 1.001, 1.0 - 1e-16,
                                     1.0 - 2e-16, 5e-324]),
                    st.floats(0.0, 1.0))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ham", "spam", "other"]), scores_), max_size=60))
def test_a_score_histogram_fed_a_batch_equals_one_update_each(observations):
    from streamnb.metrics import _ScoreHistogram

    one, batch = _ScoreHistogram(), _ScoreHistogram()
    for y_true, p in observations:
        one.update(y_true == "spam", p)
    batch.update_many("spam", [(y_true, None, {"spam": p}) for y_true, p in observations])
    assert batch.bins == one.bins
    assert (batch.n_pos, batch.n_neg) == (one.n_pos, one.n_neg)
    # a class the model gave no probability is scored 0
    absent, zero = _ScoreHistogram(), _ScoreHistogram()
    absent.update_many("spam", [(y_true, None, {"ham": 1.0}) for y_true, _ in observations])
    for y_true, _ in observations:
        zero.update(y_true == "spam", 0.0)
    assert absent.to_state() == zero.to_state()


class _Probability(float):
    """A float that is not exactly ``float``: the fold then takes its general path, which
    rebuilds each observation's scores (bounded class names, probabilities made valid)."""


probability_ = st.one_of(st.floats(0.0, 1.0), st.sampled_from([-0.5, 1.5, math.nan]))
observations_ = st.lists(
    st.tuples(st.sampled_from(["ham", "spam", "other"]), st.sampled_from(["ham", "spam"]),
              st.dictionaries(st.sampled_from(["ham", "spam", "other"]),
                              probability_, min_size=1)),
    max_size=80)


@settings(max_examples=150, deadline=None)
@given(observations_, st.lists(st.integers(0, 80), max_size=4), st.integers(1, 30))
def test_the_folds_quick_path_counts_what_its_general_path_counts(observations, folds, window):
    """Batches whose classes all fit and whose probabilities are floats in [0, 1] are folded
    as queued; the state is the one the general path gives for the same values (and a batch
    with a probability out of range takes the general path)."""
    quick, general = Metrics(window=window), Metrics(window=window)
    for i, (y_true, y_pred, proba) in enumerate(observations):
        quick.observe_labelled(y_true, y_pred, proba)
        general.observe_labelled(y_true, y_pred,
                                 {c: _Probability(p) for c, p in proba.items()})
        if i in folds:  # a fold midway, as a scrape makes
            assert quick.to_state() == general.to_state()
    assert quick.to_state() == general.to_state()
    for window_ in ("lifetime", "recent"):
        for name in ("streamnb_prequential_accuracy", "streamnb_prequential_log_loss",
                     "streamnb_prequential_roc_auc"):
            a, b = quick.sample(name, window=window_), general.sample(name, window=window_)
            assert (a == b) or (a is not None and b is not None and math.isnan(a)
                                and math.isnan(b)), (name, window_, a, b)
