"""Histograms observed a batch at a time hold what per-message observations would."""

from __future__ import annotations

import itertools
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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ham", "spam", "other"]),
                          st.sampled_from(["ham", "spam", None]),
                          st.dictionaries(st.sampled_from(["ham", "spam"]), st.floats(0.0, 1.0),
                                          min_size=1)),
                max_size=40),
       st.lists(st.integers(0, 40), max_size=5), st.integers(1, 30))
def test_observations_handed_over_a_run_at_a_time_count_what_one_call_each_counts(
        observations, cuts, window):
    """``observe_labelled_many`` (the daemon's batch step hands over a run's observations)
    leaves the state, and the figures, of one ``observe_labelled`` each, in order, unscored
    ones (no prediction) included, whatever the runs are."""
    one, many = Metrics(window=window), Metrics(window=window)
    for y_true, y_pred, proba in observations:
        one.observe_labelled(y_true, y_pred, proba)
    bounds = sorted({0, len(observations), *(c for c in cuts if c <= len(observations))})
    for start, stop in itertools.pairwise(bounds):
        many.observe_labelled_many([(y, p, dict(proba))
                                    for y, p, proba in observations[start:stop]])
    assert many.to_state() == one.to_state()
    assert many.sample("streamnb_prequential_unscored_total") == one.sample(
        "streamnb_prequential_unscored_total")


def test_a_run_longer_than_the_fold_is_folded_where_one_call_each_folds(monkeypatch):
    """The queue is folded every ``_FOLD_EVERY`` observations (the log loss's running mean is
    added a fold at a time, so the fold points are part of the state): a run crossing them
    folds at the same points."""
    import streamnb.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "_FOLD_EVERY", 7)
    folds = {"one": [], "many": []}
    one, many = Metrics(window=5), Metrics(window=5)
    for name, m in (("one", one), ("many", many)):
        fold = m._fold
        monkeypatch.setattr(m, "_fold", lambda fold=fold, name=name, m=m: (
            folds[name].append(len(m._pending)), fold()))
    items = [("spam" if i % 3 else "ham", "spam", {"spam": (i % 10) / 10, "ham": 1 - (i % 10) / 10})
             for i in range(30)]
    for item in items:
        one.observe_labelled(*item)
    many.observe_labelled_many(items[:4])
    many.observe_labelled_many(items[4:25])
    many.observe_labelled_many(items[25:])
    assert folds["many"] == folds["one"] == [7, 7, 7, 7]
    assert many.to_state() == one.to_state()
