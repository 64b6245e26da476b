"""Prometheus metrics: throughput, prequential accuracy and health of a running filter.

Every labelled message is predicted *before* its label is learned, so comparing that prediction
with the label is an honest test on unseen data (prequential evaluation). Those comparisons are
summarised twice: since the start of the filter's life (``window="lifetime"``, survives restarts
through :meth:`Metrics.to_state`) and over the most recent ``window`` labelled messages
(``window="recent"``), so that drift shows.

Naming follows the Prometheus conventions: a ``streamnb_`` prefix, counters end in ``_total``,
base units (``_seconds``, ``_bytes``), and every label has a bounded set of values (class labels
are capped at ``max_classes``, dead-letter reasons at ``max_reasons``).

The per-message path (:meth:`Metrics.observe_labelled`) only queues the observation; the counts
are brought up to date in batches (at scrape time, on :meth:`Metrics.to_state`, or every 4096
observations), and accuracy, precision, recall, F1, MCC, ROC AUC and log loss are derived from
them when Prometheus scrapes.

Scores used for ROC AUC:

* two classes: the score is P(positive class), ``positive_class`` ("spam" by default; if it is
  not one of the two classes, the greater label in sorted order, as scikit-learn does);
* more classes: one-vs-rest AUC per class with score P(class), averaged (macro) over the classes
  that have both positive and negative examples.

Lifetime ROC AUC is the Mann-Whitney statistic over a histogram of scores on the logit scale
(bins 0.01 wide, clipped to ±40), so its state is bounded; pairs of scores within one bin count as
ties, which bounds the error by the share of such pairs (well below 1e-3 for spread-out scores).
The recent-window ROC AUC is exact, computed from the window's scores when scraped (river's
``RollingROCAUC`` gives 0 instead of ½ credit to a positive and a negative with the same score, and
saturated Naive Bayes probabilities tie often).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import itertools
import logging
import math
import operator
import re
import threading
from collections.abc import Iterable, Mapping

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from river import metrics as rmetrics
from river import utils as rutils

__all__ = [
    "Metrics", "CONSUMED_KINDS", "DEAD_LETTER_REASONS", "FEEDBACK_OUTCOMES", "STATE_VERSION",
    "TRUNCATION_REASONS",
]

log = logging.getLogger(__name__)

CONSUMED_KINDS = ("labelled", "unlabelled", "feedback")
FEEDBACK_OUTCOMES = ("learned", "relabelled", "duplicate", "unknown_id")
# The daemon's dead-letter reason codes, exported at zero from the start: a counter series that
# first appears at 1 hides its first increase from rate(). Other well-formed codes are accepted
# up to max_reasons in all.
DEAD_LETTER_REASONS = (
    "bad_json", "bad_body", "bad_id", "bad_label", "bad_type", "empty_value", "missing_body",
    "missing_label", "too_large", "wrong_type", "parse_error", "model_rejected",
    "unknown_label", "unknown_id", "output_too_large", "too_large_for_state",
)
# Limits of the featurizer (FeaturizerOptions) that can cut a message short, exported at zero.
TRUNCATION_REASONS = (
    "max_bytes", "max_parts", "max_depth", "max_text_chars", "max_tokens", "max_seconds",
)
STATE_VERSION = 1
OTHER = "_other"  # label value that absorbs classes / reasons beyond the cardinality caps

# Processing one message takes tens of microseconds to tens of milliseconds.
PROCESSING_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)
# End to end includes time spent waiting in Kafka: milliseconds when keeping up, hours when not.
END_TO_END_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0,
)
CHECKPOINT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

_LOGIT_BIN_WIDTH = 0.01
_LOGIT_CLIP = 40.0
_FOLD_EVERY = 4096  # queued labelled observations folded into the counts at once
_REASON_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def _observe_many(histogram: Histogram, amounts: Iterable[float]) -> None:
    """``histogram.observe(a)`` for each amount, with one increment per touched bucket: the
    per-observation call (a lock and a bucket scan each) costs more than processing an SMS.
    The bucket is the first upper bound >= the amount, as ``observe`` picks it. (Counting
    over numpy arrays was faster in a tight loop, but slower in the daemon's: numpy's calls,
    a few microseconds each when their code is in the CPU's caches, cost several times that
    between the loop's other work, more than this loop over a poll's amounts.)"""
    bounds = histogram._upper_bounds
    counts = [0] * len(bounds)
    total = 0.0
    for amount in amounts:
        total += amount
        counts[bisect.bisect_left(bounds, amount)] += 1
    if not any(counts):
        return
    histogram._sum.inc(total)
    for bucket, n in zip(histogram._buckets, counts, strict=True):
        if n:
            bucket.inc(n)


def _logit_bin(p: float) -> int:
    """The histogram bin of a probability on the logit scale (monotone in ``p``)."""
    if p <= 0.0:
        z = -_LOGIT_CLIP
    elif p >= 1.0:
        z = _LOGIT_CLIP
    else:
        z = max(-_LOGIT_CLIP, min(_LOGIT_CLIP, math.log(p) - math.log1p(-p)))
    return round(z / _LOGIT_BIN_WIDTH)


_LOW_BIN, _HIGH_BIN = _logit_bin(0.0), _logit_bin(1.0)
_N_BINS = _HIGH_BIN - _LOW_BIN + 1
# How far (in bins) a logit computed with numpy's log may be from the edge between two bins
# before math.log's could be on the other side. numpy's vectorized logarithms may differ from
# the C library's by a few units in the last place (about 1e-14 for a logit of up to 40, 1e-12
# in bins): far below this margin, which a score meets with a chance of about one in a million.
_EDGE_MARGIN = 1e-6


def _logit_bins(p: np.ndarray) -> np.ndarray:
    """:func:`_logit_bin` of each probability, as int64, the same to the last bin: the logits
    are computed with numpy, and a score within ``_EDGE_MARGIN`` of the edge between two bins
    is binned by :func:`_logit_bin` itself. Rounding to the nearest bin, then clipping to the
    end bins, is the clip of :func:`_logit_bin` (a logit beyond it lands in an end bin either
    way), with 0 and 1 at the ends (their logits are infinite); a NaN logit (a probability
    above 1, below 0, or NaN) goes to the end :func:`_logit_bin` puts it in."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (np.log(p) - np.log1p(-p)) / _LOGIT_BIN_WIDTH
        nearest = np.rint(scaled)  # round half to even, as round()
        near_an_edge = np.flatnonzero(np.abs(np.abs(scaled - nearest) - 0.5) < _EDGE_MARGIN)
    bins = np.clip(nearest, _LOW_BIN, _HIGH_BIN)
    nan = np.isnan(bins)
    if nan.any():
        bins[nan] = np.where(p[nan] < 0.0, _LOW_BIN, _HIGH_BIN)
    bins = bins.astype(np.int64)
    for i in near_an_edge.tolist():
        bins[i] = _logit_bin(float(p[i]))
    return bins


class _ScoreHistogram:
    """Counts of scores per logit bin for negatives and positives: an ROC AUC in bounded memory.

    The counts are arrays over the bins :func:`_logit_bin` gives (a batch is added with one
    ``bincount``); ``present`` marks the bins that have a row in the state (a bin gets one
    when a score falls in it, or when a state names it), and bins beyond the ends, which only
    a state written elsewhere can name, are kept in ``beyond``.

    >>> h = _ScoreHistogram()
    >>> for y, p in [(False, 0.1), (False, 0.4), (True, 0.35), (True, 0.8)]:
    ...     h.update(y, p)
    >>> h.auc()
    0.75
    """

    __slots__ = ("neg", "pos", "present", "beyond", "n_pos", "n_neg")

    def __init__(self) -> None:
        self.neg = np.zeros(_N_BINS, np.int64)  # index: bin - _LOW_BIN
        self.pos = np.zeros(_N_BINS, np.int64)
        self.present = np.zeros(_N_BINS, bool)
        self.beyond: dict[int, list[int]] = {}  # bin -> [negatives, positives]
        self.n_pos = 0
        self.n_neg = 0

    def update(self, is_positive: bool, p: float, n: int = 1) -> None:
        self._add_row(_logit_bin(p), 0 if is_positive else n, n if is_positive else 0)
        if is_positive:
            self.n_pos += n
        else:
            self.n_neg += n

    def _add_row(self, b: int, neg: int, pos: int) -> None:
        if _LOW_BIN <= b <= _HIGH_BIN:
            i = b - _LOW_BIN
            self.neg[i] += neg
            self.pos[i] += pos
            self.present[i] = True
        else:
            counts = self.beyond.setdefault(b, [0, 0])
            counts[0] += neg
            counts[1] += pos

    def _set_row(self, b: int, neg: int, pos: int) -> None:
        if _LOW_BIN <= b <= _HIGH_BIN:
            i = b - _LOW_BIN
            self.neg[i], self.pos[i], self.present[i] = neg, pos, True
        else:
            self.beyond[b] = [neg, pos]

    def add_binned(self, bins: np.ndarray, positive: np.ndarray) -> None:
        """One :meth:`update` for each score whose :func:`_logit_bin` is in ``bins`` (and
        ``positive`` says whether it is a positive's), all at once."""
        at = bins - _LOW_BIN
        scored = np.bincount(at, minlength=_N_BINS)
        positives = np.bincount(at[positive], minlength=_N_BINS)
        self.pos += positives
        self.neg += scored - positives
        self.present |= scored > 0
        n_pos = int(np.count_nonzero(positive))
        self.n_pos += n_pos
        self.n_neg += len(bins) - n_pos

    def update_many(self, label: str, batch: Iterable[tuple[str, str | None, dict]]) -> None:
        """:meth:`update` once for each ``(y_true, y_pred, scores)`` of ``batch``, as the
        histogram of class ``label`` (positive: ``y_true == label``; the score:
        ``scores.get(label, 0.0)``)."""
        batch = list(batch)
        self.add_binned(
            _logit_bins(np.fromiter((scores.get(label, 0.0) for _, _, scores in batch), float,
                                    len(batch))),
            np.fromiter((y_true == label for y_true, _, _ in batch), bool, len(batch)))

    def rows(self) -> list[tuple[int, int, int]]:
        """``(bin, negatives, positives)`` of each bin with a row, in the bins' order."""
        at = np.flatnonzero(self.present)
        rows = list(zip((at + _LOW_BIN).tolist(), self.neg[at].tolist(), self.pos[at].tolist(),
                        strict=True))
        if self.beyond:
            rows = sorted(rows + [(b, neg, pos) for b, (neg, pos) in self.beyond.items()])
        return rows

    def auc(self) -> float:
        """P(score of a positive > score of a negative) + ½ P(tie); NaN without both kinds."""
        if not self.n_pos or not self.n_neg:
            return math.nan
        negatives_below = 0
        wins = 0.0
        for _, neg, pos in self.rows():
            wins += pos * (negatives_below + 0.5 * neg)
            negatives_below += neg
        return wins / (self.n_pos * self.n_neg)

    def to_state(self) -> list[list[int]]:
        return [[b, neg, pos] for b, neg, pos in self.rows()]

    @classmethod
    def from_state(cls, rows: Iterable[Iterable[int]]) -> _ScoreHistogram:
        h = cls()
        for b, neg, pos in rows:
            h._set_row(int(b), int(neg), int(pos))
            h.n_neg += int(neg)
            h.n_pos += int(pos)
        return h


def _cross_entropies(items: Iterable[tuple[str, str, Mapping[str, float]]]) -> list[float]:
    """-ln P(true class) of each ``(y_true, y_pred, scores)``, clamped like river's
    ``CrossEntropy`` (one comprehension: a function call each was a fifth of the fold's time)."""
    log, low, high = math.log, 1e-15, 1 - 1e-15
    return [-log(min(max(scores.get(y_true, 0.0), low), high)) for y_true, _, scores in items]


def _exact_auc(is_positive: list[bool], scores: list[float]) -> float:
    """Mann-Whitney ROC AUC with ties credited ½, as scikit-learn's ``roc_auc_score``.

    >>> _exact_auc([False, True, False, True], [0.1, 0.35, 0.4, 0.8])
    0.75
    """
    n_pos = sum(is_positive)
    n_neg = len(is_positive) - n_pos
    if not n_pos or not n_neg:
        return math.nan
    order = sorted(range(len(scores)), key=scores.__getitem__)
    wins = 0.0
    negatives_below = 0
    i = 0
    while i < len(order):
        j = i
        pos = neg = 0
        while j < len(order) and scores[order[j]] == scores[order[i]]:
            if is_positive[order[j]]:
                pos += 1
            else:
                neg += 1
            j += 1
        wins += pos * (negatives_below + 0.5 * neg)
        negatives_below += neg
        i = j
    return wins / (n_pos * n_neg)


def _valid_probability(p) -> float:
    """A probability as a float in [0, 1]; NaN (a model bug) counts as no probability at all."""
    p = float(p)
    if p >= 0.0:
        return min(p, 1.0)
    return 0.0  # negative or NaN


def _labels_of(observations: list[tuple[str, str, dict]]) -> set[str]:
    """Every class named in ``(y_true, y_pred, scores)`` observations (C loops only)."""
    return {*map(_first, observations), *map(_second, observations)}.union(
        *map(_third, observations))


def _all_floats(observations: list[tuple[str, str, dict]]) -> bool:
    """Whether every score of the observations is exactly a ``float`` (C loops only)."""
    return {*map(type, itertools.chain.from_iterable(
        map(dict.values, map(_third, observations))))} <= {float}


_first, _second, _third = (operator.itemgetter(i) for i in range(3))


class _Columns:
    """A fold's ``(y_true, y_pred, scores)`` observations as arrays: the true and the
    predicted class of each (their places in ``classes``, the sorted class names, which name
    every class of the observations) and each class's score of each (a row per class; 0.0
    where the scores leave the class out, as ``scores.get(class, 0.0)``)."""

    __slots__ = ("classes", "true", "predicted", "scores")

    def __init__(self, observations: list[tuple[str, str, dict]], classes: list[str]) -> None:
        place = dict(zip(classes, itertools.count())).__getitem__
        n = len(observations)
        self.classes = classes
        self.true = np.fromiter(map(place, map(_first, observations)), np.intp, n)
        self.predicted = np.fromiter(map(place, map(_second, observations)), np.intp, n)
        dicts = list(map(_third, observations))
        self.scores = np.empty((len(classes), n))
        for row, label in zip(self.scores, classes, strict=True):
            row[:] = np.fromiter(map(dict.get, dicts, itertools.repeat(label),
                                     itertools.repeat(0.0)), float, n)

    def scores_valid(self) -> bool:
        """Whether every score is in [0, 1] (a NaN is not): what :func:`_valid_probability`
        leaves as it is, once :func:`_all_floats` holds."""
        return bool(self.scores.min() >= 0.0 and self.scores.max() <= 1.0)

    def add_to(self, cm: rmetrics.ConfusionMatrix) -> None:
        """Add the observations to a river confusion matrix, one update per cell, the cells
        in the order they first occur (the dicts' order :func:`_add_counts` gives)."""
        classes, k = self.classes, len(self.classes)
        cells, first, counts = np.unique(self.true * k + self.predicted, return_index=True,
                                         return_counts=True)
        order = np.argsort(first)
        for cell, n in zip(cells[order].tolist(), counts[order].tolist(), strict=True):
            y_true, y_pred = divmod(cell, k)
            cm.update(classes[y_true], classes[y_pred], w=float(n))
            cm.n_samples += n - 1

    def mean_cross_entropy(self) -> float:
        """The mean of :func:`_cross_entropies`, to the last bit: each score clamped as there
        (numpy's minimum and maximum are exact), its log taken by ``math.log`` (numpy's may
        differ in the last place), added up exactly by ``fsum`` (the sum of the negated logs
        is the negated sum of the logs, rounding to nearest being symmetric)."""
        n = len(self.true)
        true_scores = self.scores[self.true, np.arange(n)]
        clamped = np.minimum(np.maximum(true_scores, 1e-15), 1 - 1e-15)
        return -math.fsum(map(math.log, clamped.tolist())) / n


def _add_counts(cm: rmetrics.ConfusionMatrix, items) -> None:
    """Add (y_true, y_pred, ...) items to a river confusion matrix, one update per cell."""
    for (yt, yp), n in collections.Counter((item[0], item[1]) for item in items).items():
        cm.update(yt, yp, w=float(n))
        cm.n_samples += n - 1


def _multiclass_mcc(cm: rmetrics.ConfusionMatrix, classes: list[str]) -> float:
    """Matthews correlation for K classes (Gorodkin's R_K), as scikit-learn computes it."""
    n = sum(cm.sum_row[c] for c in classes)
    correct = sum(cm.data[c][c] for c in classes)
    cov_ytyp = correct * n - sum(cm.sum_col[c] * cm.sum_row[c] for c in classes)
    cov_ypyp = n * n - sum(cm.sum_col[c] ** 2 for c in classes)
    cov_ytyt = n * n - sum(cm.sum_row[c] ** 2 for c in classes)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return cov_ytyp / math.sqrt(cov_ytyt * cov_ypyp)


class _Prequential:
    """Prequential statistics of one scope: since the start, or a rolling window of messages."""

    def __init__(self, window: int | None) -> None:
        self.window = window
        self.auc: dict[str, _ScoreHistogram] = {}  # lifetime only
        if window is None:
            self.cm = rmetrics.ConfusionMatrix()
            self.log_loss = rmetrics.CrossEntropy()
        else:
            self.rolling_cm = rutils.Rolling(rmetrics.ConfusionMatrix, window_size=window)
            self.cm = self.rolling_cm.obj
            self.rolling_ll = rutils.Rolling(rmetrics.CrossEntropy, window_size=window)
            self.log_loss = self.rolling_ll.obj

    def n(self) -> int:
        return int(self.cm.total_weight)


class _DerivedCollector(Collector):
    """Computes the prequential gauges from the counts when the registry is collected."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self):
        return list(self._families().values())

    def collect(self):
        fams = self._families()
        self._metrics._fill(fams)
        return list(fams.values())

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        g = GaugeMetricFamily
        w = ["window"]
        wc = ["window", "class"]
        return {
            "observed": CounterMetricFamily(
                "streamnb_prequential_observed",
                "Labelled messages scored before learning (prequential evaluation).",
                labels=[],
            ),
            "correct": CounterMetricFamily(
                "streamnb_prequential_correct",
                "Labelled messages whose prediction (made before learning) was right; divided "
                "by observed, summed over instances, it is the group's accuracy.",
                labels=[],
            ),
            "unscored": CounterMetricFamily(
                "streamnb_prequential_unscored",
                "Labelled messages that arrived before the model could predict anything.",
                labels=[],
            ),
            "messages": g(
                "streamnb_prequential_messages",
                "Labelled messages the accuracy figures of this window are computed over.",
                labels=w,
            ),
            "accuracy": g(
                "streamnb_prequential_accuracy",
                "Share of labelled messages whose prediction (made before learning) was right.",
                labels=w,
            ),
            "precision": g(
                "streamnb_prequential_precision",
                "Per-class precision: right predictions of the class / predictions of the class.",
                labels=wc,
            ),
            "recall": g(
                "streamnb_prequential_recall",
                "Per-class recall: right predictions of the class / messages of the class.",
                labels=wc,
            ),
            "f1": g("streamnb_prequential_f1", "Per-class F1 score.", labels=wc),
            "mcc": g(
                "streamnb_prequential_mcc",
                "Matthews correlation coefficient of predictions and labels (multiclass R_K).",
                labels=w,
            ),
            "roc_auc": g(
                "streamnb_prequential_roc_auc",
                "ROC AUC of the scores: P(positive class) for two classes, one-vs-rest macro "
                "average otherwise. NaN until both outcomes were seen.",
                labels=w,
            ),
            "log_loss": g(
                "streamnb_prequential_log_loss",
                "Mean of -ln P(true class) (natural log, probabilities clamped to 1e-15).",
                labels=w,
            ),
            "confusion": CounterMetricFamily(
                "streamnb_prequential_confusion",
                "Labelled messages by true class and class predicted before learning, "
                "since the start of the filter's life.",
                labels=["actual", "predicted"],
            ),
            "window_confusion": g(
                "streamnb_prequential_window_confusion",
                "Labelled messages by true class and predicted class over the recent window.",
                labels=["actual", "predicted"],
            ),
        }


class Metrics:
    """All metrics of one streamnb process, in their own ``CollectorRegistry``.

    ``window`` is the length of the recent window in labelled messages. ``positive_class`` is the
    class whose probability is the ROC score with two classes. ``classes`` (the model's labels,
    if fixed) and ``dead_letter_reasons`` are exported at zero from the start, so rate() sees
    their first increase. ``max_classes`` and ``max_reasons`` bound the label values; beyond them
    a class or reason is counted as ``_other``.

    >>> m = Metrics(window=2)
    >>> m.observe_labelled("spam", "spam", {"spam": 0.9, "ham": 0.1})
    >>> m.observe_labelled("ham", "spam", {"spam": 0.6, "ham": 0.4})
    >>> m.observe_labelled("ham", "ham", {"spam": 0.2, "ham": 0.8})
    >>> m.sample("streamnb_prequential_accuracy", window="lifetime")
    0.666...
    >>> m.sample("streamnb_prequential_accuracy", window="recent")
    0.5
    >>> m.sample("streamnb_prequential_recall", window="lifetime", **{"class": "ham"})
    0.5
    >>> restored = Metrics(window=2)
    >>> restored.load_state(m.to_state())
    >>> restored.sample("streamnb_prequential_confusion_total", actual="ham", predicted="spam")
    1.0
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        window: int = 1000,
        *,
        positive_class: str = "spam",
        classes: Iterable[str] = (),
        dead_letter_reasons: Iterable[str] = DEAD_LETTER_REASONS,
        max_classes: int = 64,
        max_reasons: int = 32,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1 labelled message, got {window}")
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.window = int(window)
        self.positive_class = positive_class
        self.max_classes = max_classes
        self.max_reasons = max_reasons
        self._lock = threading.Lock()
        self._counter_classes: set[str] = set()  # class label values of the learned counters
        self._reasons: set[str] = set()  # reason label values of the dead-letter counter
        self._warned_classes = self._warned_reasons = False
        self._server = None
        self._server_thread = None

        r = self.registry
        self._build_info = Gauge(
            "streamnb_build_info", "Version and model of the running filter (always 1).",
            ["version", "model"], registry=r,
        )
        self._consumed = Counter(
            "streamnb_messages_consumed", "Input messages consumed, by kind.", ["kind"], registry=r
        )
        for kind in CONSUMED_KINDS:
            self._consumed.labels(kind)
        self._predictions = Counter(
            "streamnb_predictions_emitted", "Predictions written to the output topic.", registry=r
        )
        self._learned = Counter(
            "streamnb_learned", "Labelled messages learned, by class.", ["class"], registry=r
        )
        self._unlearned = Counter(
            "streamnb_unlearned", "Messages unlearned (label withdrawn), by class.", ["class"],
            registry=r,
        )
        self._relabelled = Counter(
            "streamnb_relabelled", "Feedback that changed an earlier label (unlearn + learn).",
            registry=r,
        )
        self._feedback = Counter(
            "streamnb_feedback", "Feedback messages by outcome.", ["outcome"], registry=r
        )
        for outcome in FEEDBACK_OUTCOMES:
            self._feedback.labels(outcome)
        self._dead_letters = Counter(
            "streamnb_dead_letters", "Messages sent to the dead-letter topic, by reason code.",
            ["reason"], registry=r,
        )
        for reason in dead_letter_reasons:
            self._dead_letters.labels(self._bounded_reason(reason))  # no other thread yet
        self._duplicates = Counter(
            "streamnb_duplicate_messages",
            "Labelled messages whose id was already learned: not scored again (their label "
            "counts as feedback).", registry=r,
        )
        self._featurizer_events = Counter(
            "streamnb_featurizer_events",
            "Messages the featurizer read with a limit cut short (kind=truncated, reason=the "
            "limit) or with a defect of the mail reader (kind=defect).",
            ["kind", "reason"], registry=r,
        )
        self._event_reasons: set[tuple[str, str]] = set()
        for reason in TRUNCATION_REASONS:
            self._featurizer_events.labels("truncated", self._bounded_event("truncated", reason))
        self._latency = Histogram(
            "streamnb_processing_latency_seconds",
            "Time to process one message, from decoding to the output being sent.",
            buckets=PROCESSING_BUCKETS, registry=r,
        )
        self._end_to_end = Histogram(
            "streamnb_end_to_end_latency_seconds",
            "Time from the input record's timestamp to its processing.",
            buckets=END_TO_END_BUCKETS, registry=r,
        )
        self._lag = Gauge(
            "streamnb_consumer_lag_messages",
            "Records between the consumer position and the end of the partition.",
            ["topic", "partition"], registry=r,
        )
        self._checkpoint_time = Gauge(
            "streamnb_last_checkpoint_timestamp_seconds",
            "Unix time of the last committed transaction (age: time() - this).", registry=r,
        )
        self._checkpoint_duration = Histogram(
            "streamnb_checkpoint_duration_seconds",
            "Time to commit one transaction (changelog records, offsets, commit).",
            buckets=CHECKPOINT_BUCKETS, registry=r,
        )
        self._prepare_wait = Counter(
            "streamnb_prepare_wait_seconds",
            "Time the daemon waited for its prepare processes' results (pipeline.prepare_process).",
            registry=r,
        )
        self._checkpoint_size = Gauge(
            "streamnb_checkpoint_size_bytes",
            "Changelog bytes (keys and values) written by the last commit.", registry=r
        )
        self._global_staleness = Gauge(
            "streamnb_global_model_staleness_seconds",
            "Seconds since the slices this daemon does not own were last read up to the end "
            "of their changelog (0 while caught up; their owners' commits lag behind too).",
            registry=r,
        )
        self._global_lag = Gauge(
            "streamnb_global_model_lag_records",
            "Changelog records of the slices this daemon does not own, not yet applied to its "
            "global model.", registry=r,
        )
        self._vocabulary = Gauge(
            "streamnb_model_vocabulary_size", "Distinct features (tokens) the model knows.",
            registry=r,
        )
        self._state_bytes = Gauge(
            "streamnb_model_state_bytes", "Memory held by the model's sufficient statistics.",
            registry=r,
        )
        self._window_size = Gauge(
            "streamnb_prequential_window_size",
            "Configured size of the recent window, in labelled messages.", registry=r,
        )
        self._window_size.set(self.window)

        self._reset_prequential()
        for label in classes:  # the model's classes, if known: their counters start at zero
            self._learned.labels(self._counted_class(label))
            self._unlearned.labels(self._counted_class(label))
        r.register(_DerivedCollector(self))

    # ------------------------------------------------------------------ serving / build info
    def serve(self, host: str, port: int) -> None:
        """Serve ``/metrics`` over HTTP on ``host:port`` from a background thread."""
        self._server, self._server_thread = start_http_server(
            port, addr=host, registry=self.registry
        )

    def close(self) -> None:
        """Stop the HTTP endpoint started by :meth:`serve` (no-op if none)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_build_info(self, version: str, model: str) -> None:
        self._build_info.clear()
        self._build_info.labels(version=version, model=model).set(1)

    # ------------------------------------------------------------------ throughput
    def consumed(self, kind: str, n: int = 1) -> None:
        if kind not in CONSUMED_KINDS:
            raise ValueError(f"unknown message kind {kind!r}; expected one of {CONSUMED_KINDS}")
        self._consumed.labels(kind).inc(n)

    def prediction_emitted(self, n: int = 1) -> None:
        self._predictions.inc(n)

    def learned(self, label: str, n: int = 1) -> None:
        self._learned.labels(self._counted_class(label)).inc(n)

    def unlearned(self, label: str, n: int = 1) -> None:
        self._unlearned.labels(self._counted_class(label)).inc(n)

    def relabelled(self, n: int = 1) -> None:
        self._relabelled.inc(n)

    def feedback_outcome(self, outcome: str) -> None:
        if outcome not in FEEDBACK_OUTCOMES:
            raise ValueError(
                f"unknown feedback outcome {outcome!r}; expected one of {FEEDBACK_OUTCOMES}"
            )
        self._feedback.labels(outcome).inc()

    def duplicate_message(self, n: int = 1) -> None:
        self._duplicates.inc(n)

    def featurizer_event(self, kind: str, reason: str, n: int = 1) -> None:
        """A message read with a limit hit (``kind="truncated"``) or a reader defect."""
        if kind not in ("truncated", "defect"):
            raise ValueError(f"unknown featurizer event kind {kind!r}")
        with self._lock:
            reason = self._bounded_event(kind, reason)
        self._featurizer_events.labels(kind, reason).inc(n)

    def dead_lettered(self, reason: str) -> None:
        with self._lock:
            reason = self._bounded_reason(reason)
        self._dead_letters.labels(reason).inc()

    # ------------------------------------------------------------------ health
    def observe_latency(self, seconds: float) -> None:
        self._latency.observe(seconds)

    def observe_end_to_end(self, seconds: float) -> None:
        # Clock skew between producer and consumer can make this slightly negative.
        self._end_to_end.observe(max(0.0, seconds))

    def observe_latencies(self, seconds: Iterable[float]) -> None:
        """:meth:`observe_latency` for each of a batch of messages, in one update."""
        _observe_many(self._latency, seconds)

    def observe_end_to_end_many(self, seconds: Iterable[float]) -> None:
        """:meth:`observe_end_to_end` for each of a batch of messages, in one update."""
        _observe_many(self._end_to_end, (max(0.0, s) for s in seconds))

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        self._lag.labels(topic, str(partition)).set(lag)

    def forget_partition(self, topic: str, partition: int) -> None:
        with contextlib.suppress(KeyError):
            self._lag.remove(topic, str(partition))

    def checkpoint_done(self, duration_seconds: float, size_bytes: int) -> None:
        self._checkpoint_time.set_to_current_time()
        self._checkpoint_duration.observe(duration_seconds)
        self._checkpoint_size.set(size_bytes)

    def prepare_waited(self, seconds: float) -> None:
        if seconds:
            self._prepare_wait.inc(seconds)

    def set_global_model_staleness(self, seconds: float, lag_records: int) -> None:
        self._global_staleness.set(seconds)
        self._global_lag.set(lag_records)

    def set_model_size(self, vocabulary_size: int, state_bytes: int) -> None:
        self._vocabulary.set(vocabulary_size)
        self._state_bytes.set(state_bytes)

    # ------------------------------------------------------------------ prequential accuracy
    def observe_labelled(
        self, y_true: str, y_pred: str | None, proba: Mapping[str, float]
    ) -> None:
        """Record the prediction made for a labelled message before its label was learned.

        ``y_pred`` is None when the model could not predict yet (nothing learned): such messages
        are counted in ``streamnb_prequential_unscored_total`` and left out of the figures, as
        river's progressive validation does.
        """
        if y_pred is None:
            with self._lock:
                self._unscored += 1
            return
        # Only queue the observation: the counts are brought up to date in batches, when scraped
        # or every _FOLD_EVERY observations, which keeps this call at a few microseconds.
        with self._lock:
            self._pending.append((y_true, y_pred, dict(proba)))
            if len(self._pending) >= _FOLD_EVERY:
                self._fold()

    def observe_labelled_many(
        self, observations: list[tuple[str, str | None, dict[str, float]]]
    ) -> None:
        """:meth:`observe_labelled` for each ``(y_true, y_pred, proba)``, in order, with one
        lock and no copy of each ``proba``: the metrics keep the dicts, which the caller must
        not change afterwards (the daemon's batch step hands over a fresh dict per message).
        The counts are folded at the same points as one call each would fold them, so the
        state is the same."""
        scored = [item for item in observations if item[1] is not None]
        with self._lock:
            self._unscored += len(observations) - len(scored)
            pending = self._pending
            while scored:
                room = _FOLD_EVERY - len(pending)
                pending.extend(scored[:room])
                scored = scored[room:]
                if len(pending) >= _FOLD_EVERY:
                    self._fold()
                    pending = self._pending

    def _fold(self) -> None:
        """Bring the counts up to date with the queued observations (caller holds the lock)."""
        if not self._pending:
            return
        classes = self._classes
        new_classes: set[str] = set()
        seen: dict[str, str] = {}  # label -> its bounded name, for the labels of this batch

        def bounded(label: str) -> str:
            if label in classes:
                return label
            name = seen.get(label)
            if name is None:
                name = seen[label] = self._bounded_class(label, new_classes)
                if name not in classes:
                    new_classes.add(name)
            return name

        pending, self._pending = self._pending, []
        labels = _labels_of(pending)
        columns = None
        if (all(type(label) is str for label in labels)
                and len((classes | self._counter_classes | labels) - {OTHER}) <= self.max_classes
                and _all_floats(pending)):
            columns = _Columns(pending, sorted(classes | labels))
            if not columns.scores_valid():
                columns = None
        if columns is not None:
            # The usual batch: there is room for every class it names, so each keeps its name
            # whatever the order they come in, and every probability is a float in [0, 1]
            # already: the queued copies are the scores as they are (rebuilding a dict per
            # observation was most of the fold's time).
            for label in labels - classes:
                bounded(label)  # a new class: noted in new_classes
            batch = pending
        else:
            batch = self._bounded_batch(pending, classes, bounded)
            columns = _Columns(batch, sorted(classes | new_classes))
        self._fold_batch(batch, new_classes, columns)

    def _bounded_batch(self, pending: list, classes: set[str], bounded) -> list:
        """``pending`` with every class name bounded and every probability made valid."""
        batch = []
        for y_true, y_pred, proba in pending:
            scores: dict[str, float] = {}
            for c, p in proba.items():
                c = c if c in classes else bounded(c)
                scores[c] = scores.get(c, 0.0) + _valid_probability(p)
            batch.append((
                y_true if y_true in classes else bounded(y_true),
                y_pred if y_pred in classes else bounded(y_pred),
                scores,
            ))
        return batch

    def _fold_batch(self, batch: list, new_classes: set[str], columns: _Columns) -> None:
        """Add ``batch`` (as ``columns``, over the classes known after it) to the counts."""
        classes = self._classes
        for c in sorted(new_classes):
            classes.add(c)
            # Earlier messages gave this class no probability: they are negatives scored 0.
            hist = self._life.auc[c] = _ScoreHistogram()
            if self._auc_n:
                hist.update(False, 0.0, n=self._auc_n)

        life = self._life
        columns.add_to(life.cm)
        life.log_loss._mean.update(x=columns.mean_cross_entropy(), w=len(batch))
        place = dict(zip(columns.classes, itertools.count()))
        for c, hist in life.auc.items():
            i = place[c]
            hist.add_binned(_logit_bins(columns.scores[i]), columns.true == i)
        self._auc_n += len(batch)

        if new_classes or len(batch) * 4 >= self.window:
            # The window is rebuilt from its items when next read (a scrape, or a fold
            # small enough to roll it an item at a time): a rebuild replaces all of it, so
            # only the last one before a read counts, and the items are the same then.
            self._recent_items.extend(batch[-self.window:])  # the deque keeps the last `window`
            self._recent_stale = True
        else:
            recent = self._fresh_recent()
            for y_true, y_pred, scores in batch:
                recent.rolling_cm.update(y_true, y_pred)
                recent.rolling_ll.update(y_true, scores)
                self._recent_items.append((y_true, y_pred, scores))

    def _fresh_recent(self) -> _Prequential:
        """The recent window's statistics, rebuilt first if a fold left them stale."""
        if self._recent_stale:
            self._rebuild_recent(list(self._recent_items))
        return self._recent

    def _rebuild_recent(self, items: list[tuple[str, str, dict[str, float]]]) -> None:
        """Recompute the window from its items in one pass (cheaper than a roll per item)."""
        recent = _Prequential(self.window)
        _add_counts(recent.cm, items)
        recent.rolling_cm.window.extend(((yt, yp), {}) for yt, yp, _ in items)
        if items:
            losses = _cross_entropies(items)
            recent.log_loss._mean.update(x=math.fsum(losses) / len(losses), w=len(losses))
        recent.rolling_ll.window.extend(((yt, scores), {}) for yt, _, scores in items)
        self._recent = recent
        self._recent_stale = False
        self._recent_items.clear()
        self._recent_items.extend(items)

    def _reset_prequential(self) -> None:
        self._classes: set[str] = set()
        self._life = _Prequential(None)
        self._recent = _Prequential(self.window)
        self._recent_items: collections.deque = collections.deque(maxlen=self.window)
        self._recent_stale = False  # whether _recent must be rebuilt from _recent_items
        self._pending: list[tuple[str, str, dict[str, float]]] = []
        self._unscored = 0
        self._auc_n = 0  # lifetime observations in the AUC histograms

    # ------------------------------------------------------------------ bounded labels
    def _counted_class(self, label: str) -> str:
        with self._lock:
            label = self._bounded_class(label)
            self._counter_classes.add(label)
        return label

    def _bounded_class(self, label: str, pending: set[str] | None = None) -> str:
        """``label``, or OTHER once ``max_classes`` distinct classes are known (lock held)."""
        label = str(label)
        if label in self._classes or label in self._counter_classes or label == OTHER:
            return label
        seen = (self._classes | self._counter_classes | (pending or set())) - {OTHER}
        if len(seen) < self.max_classes:
            return label
        if not self._warned_classes:
            self._warned_classes = True
            log.warning("more than %d classes: further ones are counted as %r",
                        self.max_classes, OTHER)
        return OTHER

    def _bounded_reason(self, reason: str) -> str:
        """``reason``, or OTHER if malformed or beyond ``max_reasons`` codes (lock held)."""
        reason = str(reason)
        if reason in self._reasons:
            return reason
        if _REASON_RE.match(reason) and len(self._reasons) < self.max_reasons:
            self._reasons.add(reason)
            return reason
        if not self._warned_reasons:
            self._warned_reasons = True
            log.warning("dead-letter reason %r is malformed or beyond %d codes: counted as %r",
                        reason, self.max_reasons, OTHER)
        return OTHER

    def _bounded_event(self, kind: str, reason: str) -> str:
        """``reason`` of a featurizer event, or OTHER beyond ``max_reasons`` (lock held)."""
        reason = str(reason)
        if (kind, reason) in self._event_reasons:
            return reason
        if _REASON_RE.match(reason) and len(self._event_reasons) < 2 * self.max_reasons:
            self._event_reasons.add((kind, reason))
            return reason
        return OTHER

    # ------------------------------------------------------------------ scrape-time values
    def _positive(self, classes: list[str]) -> str:
        return self.positive_class if self.positive_class in classes else classes[-1]

    def _fill(self, fams) -> None:
        with self._lock:
            self._fold()
            classes = sorted(self._classes)
            fams["observed"].add_metric([], self._life.n())
            fams["correct"].add_metric(
                [], sum(self._life.cm.data[c][c] for c in classes))
            fams["unscored"].add_metric([], self._unscored)
            recent = self._fresh_recent()
            for scope, pre in (("lifetime", self._life), ("recent", recent)):
                self._fill_scope(fams, scope, pre, classes)
            for a in classes:
                for p in classes:
                    fams["confusion"].add_metric([a, p], self._life.cm.data[a][p])
                    fams["window_confusion"].add_metric([a, p], recent.cm.data[a][p])

    def _fill_scope(self, fams, scope: str, pre: _Prequential, classes: list[str]) -> None:
        cm = pre.cm
        n = pre.n()
        fams["messages"].add_metric([scope], n)
        if not n:
            return
        fams["accuracy"].add_metric([scope], rmetrics.Accuracy(cm=cm).get())
        for c in classes:
            fams["precision"].add_metric([scope, c], rmetrics.Precision(cm=cm, pos_val=c).get())
            fams["recall"].add_metric([scope, c], rmetrics.Recall(cm=cm, pos_val=c).get())
            fams["f1"].add_metric([scope, c], rmetrics.F1(cm=cm, pos_val=c).get())
        present = [c for c in classes if cm.sum_row[c] or cm.sum_col[c]]
        if len(present) <= 2:
            mcc = rmetrics.MCC(cm=cm, pos_val=self._positive(present)).get() if present else 0.0
        else:
            mcc = _multiclass_mcc(cm, present)
        fams["mcc"].add_metric([scope], mcc)
        fams["roc_auc"].add_metric([scope], self._auc(pre, classes))
        fams["log_loss"].add_metric([scope], pre.log_loss.get())

    def _auc(self, pre: _Prequential, classes: list[str]) -> float:
        cm = pre.cm
        with_both = [c for c in classes if 0 < cm.sum_row[c] < cm.total_weight]
        if len(classes) == 2:
            positive = self._positive(classes)
            with_both = [positive] if positive in with_both else []
        elif len(with_both) < 2:
            return math.nan
        if not with_both:
            return math.nan
        if pre.window:
            items = self._recent_items
            values = [
                _exact_auc([yt == c for yt, _, _ in items], [s.get(c, 0.0) for _, _, s in items])
                for c in with_both
            ]
        else:
            values = [pre.auc[c].auc() for c in with_both]
        return sum(values) / len(values)

    def sample(self, name: str, **labels: str) -> float | None:
        """The value of one sample in the registry (None if absent): for tests and doctests."""
        return self.registry.get_sample_value(name, labels)

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict:
        """The prequential accuracy state as plain JSON-compatible data (no pickle)."""
        with self._lock:
            self._fold()
            cm = self._life.cm
            return {
                "version": STATE_VERSION,
                "classes": sorted(self._classes),
                "confusion": [
                    [a, p, int(n)] for a, row in sorted(cm.data.items())
                    for p, n in sorted(row.items()) if n
                ],
                "log_loss": {"n": self._life.log_loss._mean.n,
                             "mean": self._life.log_loss._mean._mean},
                "auc": {c: h.to_state() for c, h in sorted(self._life.auc.items())},
                "auc_n": self._auc_n,
                "unscored": self._unscored,
                "recent": [[yt, yp, scores] for yt, yp, scores in self._recent_items],
            }

    def load_state(self, state: dict) -> None:
        """Restore what :meth:`to_state` returned; the recent window keeps its last entries.

        Raises ``ValueError`` on a state this version cannot read; the metrics are then unchanged.
        """
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            found = state.get("version") if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"metrics state version {found!r} is not {STATE_VERSION}")
        try:
            classes = [str(c) for c in state["classes"]]
            confusion = [(str(a), str(p), int(n)) for a, p, n in state["confusion"]]
            ll_n = float(state["log_loss"]["n"])
            ll_mean = float(state["log_loss"]["mean"])
            auc = {str(c): _ScoreHistogram.from_state(rows) for c, rows in state["auc"].items()}
            auc_n = int(state["auc_n"])
            unscored = int(state["unscored"])
            recent = [
                (str(yt), str(yp), {str(c): float(p) for c, p in scores.items()})
                for yt, yp, scores in state["recent"]
            ]
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ValueError(f"malformed metrics state: {exc!r}") from exc
        with self._lock:
            self._reset_prequential()
            self._classes.update(classes)
            for a, p, n in confusion:
                self._classes.update((a, p))
                self._life.cm.update(a, p, w=float(n))
                self._life.cm.n_samples += n - 1
            self._life.log_loss._mean.n = ll_n
            self._life.log_loss._mean._mean = ll_mean
            self._life.auc.update(auc)
            self._auc_n = auc_n
            self._unscored = unscored
            recent = recent[-self.window:]
            for yt, yp, scores in recent:
                self._classes.update((yt, yp, *scores))
            for c in self._classes:
                if c not in self._life.auc:
                    self._life.auc[c] = _ScoreHistogram()
                    if auc_n:
                        self._life.auc[c].update(False, 0.0, n=auc_n)
            self._rebuild_recent(recent)
