"""Histograms observed a batch at a time hold what per-message observations would."""

from __future__ import annotations

import itertools
import math

import numpy as np
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
    assert batch.to_state() == one.to_state()
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


# ---------------------------------------------------------------------- the fold over arrays
class OneAtATime(Metrics):
    """The reference for the fold over arrays: each observation of a fold added on its own,
    in plain Python (river's confusion matrix updated once per observation, each score binned
    by ``_logit_bin``, each log loss by ``math.log``), and the recent window rebuilt at once,
    as the fold did before it was done over arrays."""

    def _fold_batch(self, batch, new_classes, columns):
        from streamnb.metrics import _ScoreHistogram

        for c in sorted(new_classes):
            self._classes.add(c)
            hist = self._life.auc[c] = _ScoreHistogram()
            if self._auc_n:
                hist.update(False, 0.0, n=self._auc_n)
        life = self._life
        for y_true, y_pred, scores in batch:
            life.cm.update(y_true, y_pred)
            for c, hist in life.auc.items():
                hist.update(y_true == c, scores.get(c, 0.0))
        losses = [-math.log(min(max(scores.get(y_true, 0.0), 1e-15), 1 - 1e-15))
                  for y_true, _, scores in batch]
        life.log_loss._mean.update(x=math.fsum(losses) / len(losses), w=len(losses))
        self._auc_n += len(batch)
        if new_classes or len(batch) * 4 >= self.window:
            self._rebuild_recent([*self._recent_items, *batch][-self.window:])
        else:
            for y_true, y_pred, scores in batch:
                self._recent.rolling_cm.update(y_true, y_pred)
                self._recent.rolling_ll.update(y_true, scores)
                self._recent_items.append((y_true, y_pred, scores))


def scrape(m: Metrics) -> list[str]:
    """What /metrics serves, less the counters' creation times."""
    from prometheus_client import generate_latest

    return [line for line in generate_latest(m.registry).decode().splitlines()
            if "_created" not in line]


def internals(m: Metrics) -> tuple:
    """The lifetime counts as the fold leaves them, to the last bit and in their order."""
    cm = m._life.cm
    return (m.to_state(), [(a, list(row.items())) for a, row in cm.data.items()],
            list(cm.sum_row.items()), list(cm.sum_col.items()), cm.total_weight, cm.n_samples,
            cm._total_true_positives, m._life.log_loss._mean.n, m._life.log_loss._mean._mean,
            {c: (h.n_neg, h.n_pos) for c, h in m._life.auc.items()})


# Scores near the edges the arrays' binning must get right: each bin's edge (a logit of
# k + 0.5 bins) and the clip, a few floats either side; the ends and beyond them.
_EDGE_SCORES = [
    math.nextafter(1.0 / (1.0 + math.exp(-logit)), toward)
    for logit in (0.005, -0.005, 0.015, 0.125, -3.995, 17.005, 39.995, 40.0, -40.0, 36.3)
    for toward in (0.0, 1.0, 0.5)
]
_EDGE_SCORES += [0.0, 1.0, 0.5, 1e-300, 5e-324, 1.0 - 1e-16, 1e-17, _CLIPPED, 1.0 - _CLIPPED]
score_ = st.one_of(st.sampled_from(_EDGE_SCORES), st.floats(0.0, 1.0))
# Mostly what the model gives (floats in [0, 1]), now and then a score the fold's general
# path rebuilds: out of range, NaN, an int, a float subclass.
odd_score_ = st.one_of(score_, st.sampled_from([-0.5, 1.5, math.nan, 1, 0]),
                       st.floats(0.0, 1.0).map(_Probability))
CLASSES = ["ham", "spam", "other", "zeta"]
observation_ = st.tuples(
    st.sampled_from(CLASSES), st.sampled_from(CLASSES + [None]),
    st.dictionaries(st.sampled_from(CLASSES), score_, max_size=3))
odd_observation_ = st.tuples(
    st.sampled_from(CLASSES), st.sampled_from(CLASSES + [None]),
    st.dictionaries(st.sampled_from(CLASSES), odd_score_, max_size=3))
# A step: a run of observations handed over at once (most of them of the usual kind), one
# observation (``observe_labelled``), a scrape (which folds) or a state.
step_ = st.one_of(st.lists(observation_, max_size=30),
                  st.lists(st.one_of(observation_, odd_observation_), max_size=30),
                  odd_observation_, st.sampled_from(["scrape", "state"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(step_, max_size=12), st.integers(1, 40), st.integers(1, 20),
       st.sampled_from([2, 3, 64]))
def test_the_fold_over_arrays_leaves_what_one_observation_at_a_time_leaves(
        steps, window, fold_every, max_classes):
    """Whatever the observations (classes appearing late, scores on a bin's edge, at the
    clip, beyond the ends, invalid ones, more classes than ``max_classes``), however they are
    handed over (runs read when queued, single observations, both in one fold) and wherever
    the folds fall (every ``_FOLD_EVERY``, at a scrape, at a state), the counts, the histograms,
    the log loss's running mean (to the last bit), the recent window and what /metrics
    serves are those of the fold one observation at a time."""
    import streamnb.metrics as metrics_module

    old_fold_every = metrics_module._FOLD_EVERY
    metrics_module._FOLD_EVERY = fold_every
    try:
        arrays = Metrics(window=window, max_classes=max_classes)
        reference = OneAtATime(window=window, max_classes=max_classes)
        for step in steps:
            if step == "scrape":
                assert scrape(arrays) == scrape(reference)
            elif step == "state":
                assert internals(arrays) == internals(reference)
            elif isinstance(step, tuple):
                for m in (arrays, reference):
                    m.observe_labelled(*step)
            else:
                for m in (arrays, reference):
                    m.observe_labelled_many([(y, p, dict(s)) for y, p, s in step])
        assert internals(arrays) == internals(reference)
        assert scrape(arrays) == scrape(reference)
    finally:
        metrics_module._FOLD_EVERY = old_fold_every


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(score_, st.sampled_from([math.nan, -0.0, 2.0, -1.0])), max_size=50))
def test_the_arrays_bin_every_score_as_logit_bin_does(scores):
    from streamnb.metrics import _logit_bin, _logit_bins

    assert _logit_bins(np.array(scores, dtype=float)).tolist() == [_logit_bin(p) for p in scores]


def test_scores_at_every_bins_edge_are_binned_as_logit_bin_does():
    """Every edge between two bins of the logit scale, and the floats next to it."""
    from streamnb.metrics import _logit_bin, _logit_bins

    edges = [1.0 / (1.0 + math.exp(-(k + 0.5) * 0.01)) for k in range(-4001, 4001)]
    scores = [q for p in edges for q in (math.nextafter(p, 0.0), p, math.nextafter(p, 1.0))]
    assert _logit_bins(np.array(scores)).tolist() == [_logit_bin(p) for p in scores]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), score_), max_size=60))
def test_a_score_histograms_rows_are_the_count_of_each_bin(observations):
    from streamnb.metrics import _logit_bin, _ScoreHistogram

    h = _ScoreHistogram()
    for positive, p in observations:
        h.update(positive, p)
    counts: dict[int, list[int]] = {}
    for positive, p in observations:
        counts.setdefault(_logit_bin(p), [0, 0])[positive] += 1
    assert h.to_state() == [[b, neg, pos] for b, (neg, pos) in sorted(counts.items())]
    assert _ScoreHistogram.from_state(h.to_state()).to_state() == h.to_state()


@settings(max_examples=50, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 3000), st.sampled_from([1, 4, 40]))
def test_a_folds_mean_log_loss_is_math_logs_to_the_last_bit(rng, n, power):
    from streamnb.metrics import _Columns

    batch = []
    for _ in range(n):
        p = rng.random() ** power
        batch.append((rng.choice(["ham", "spam"]), "ham", {"ham": p, "spam": 1.0 - p}))
    losses = [-math.log(min(max(s[y], 1e-15), 1 - 1e-15)) for y, _, s in batch]
    assert _Columns(batch, ["ham", "spam"]).mean_cross_entropy() == math.fsum(losses) / n


def test_a_small_folds_log_loss_is_math_logs_even_where_numpys_differs():
    """numpy's vectorized logarithm differs from ``math.log`` in the last place for about one
    score in a hundred just below 1 (on a machine with AVX-512): a fold of one such score
    has that log as its mean, which must be ``math.log``'s."""
    import random

    from streamnb.metrics import _Columns

    rng = random.Random(13)
    for _ in range(3000):
        p = 1.0 - rng.random() * 1e-3
        got = _Columns([("ham", "ham", {"ham": p})], ["ham"]).mean_cross_entropy()
        assert got == -math.log(p), p
