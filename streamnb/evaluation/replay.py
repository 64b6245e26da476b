"""Prequential replay: each message is scored by the model *before* the model learns it.

This is the TREC Spam Track's immediate-feedback protocol and exactly what the daemon does with
a labelled message: ``pipeline.prepare(message)`` → ``model.predict_log_proba_one(x)`` →
``model.learn_one(x, label)``. A message the featurizer rejects is skipped (the daemon would
dead-letter it) and counted under its reason.

>>> from streamnb.codec import Message
>>> class Majority:  # a stand-in model: predicts the most frequent label seen so far
...     numeric_input = False
...     def __init__(self): self.counts = {}
...     def predict_log_proba_one(self, x):
...         total = sum(self.counts.values())
...         return {c: math.log(n / total) for c, n in self.counts.items()}
...     def learn_one(self, x, y): self.counts[y] = self.counts.get(y, 0) + 1
>>> class Words:
...     def from_text(self, text): return Featurized(dict.fromkeys(text.split(), 1))
>>> from streamnb.pipeline import Pipeline
>>> messages = [Message(id=str(i), label=y, text="w") for i, y in enumerate("aab")]
>>> result = replay(Pipeline(Words(), Majority()), messages)
>>> result.predicted  # nothing known before the first message; 'a' after it
[None, 'a', 'a']
>>> result.report()["accuracy"]
0.3333333333333333
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamnb.codec import Message
from streamnb.evaluation import scoring
from streamnb.pipeline import PipelineError

__all__ = [
    "Featurized",
    "Featurizations",
    "ReplayResult",
    "choose_positive",
    "class_scores",
    "featurize_all",
    "replay",
]

# A false-positive budget of 0.1% of ham, the operating point spam filters are compared at.
MAX_FPR = 0.001


@dataclass(slots=True)
class Featurized:
    """What a featurizer returns (used by test doubles; the real one has the same fields)."""

    tokens: Any
    numeric: Any = None
    truncated: tuple = ()
    defects: tuple = ()


@dataclass
class Featurizations:
    """Every message's pipeline output (or the reason it was rejected), and the time it took.

    The featurizer keeps no state between messages, so featurizing a stream once and replaying
    it under several model options gives each replay the inputs it would have computed itself.
    """

    prepared: list  # a Prepared, or the rejection reason (str), per message
    seconds: list[float]


def featurize_all(pipeline, messages: Sequence[Message]) -> Featurizations:
    prepared, seconds = [], []
    clock = time.perf_counter
    for message in messages:
        started = clock()
        prepared.append(_prepare(pipeline, message))
        seconds.append(clock() - started)
    return Featurizations(prepared, seconds)


def _prepare(pipeline, message: Message):
    if message.label is None:
        return "unlabelled"
    try:
        return pipeline.prepare(message)
    except (PipelineError, ValueError) as error:
        # Featurizer and pipeline errors are typed ValueErrors with a short reason; the
        # daemon dead-letters such a message, so the replay leaves it out too.
        return getattr(error, "reason", type(error).__name__)


def predicted_label(log_proba: dict[str, float]) -> str | None:
    """The most probable class; ties go to the first in sorted order, as the models' own."""
    return max(sorted(log_proba), key=log_proba.__getitem__) if log_proba else None


def decision_of(model) -> Any:
    """The function that turns ``model``'s log-probabilities into its label, as the daemon
    labels: the model's ``decide`` (its ``class_offsets``), or the most probable class for
    a model without one."""
    return getattr(model, "decide", predicted_label)


@dataclass
class ReplayResult:
    """Per-message outcomes of one replay, in replay order (skipped messages left out)."""

    ids: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    predicted: list[str | None] = field(default_factory=list)
    log_proba: list[dict[str, float]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    truncated: int = 0
    defects: Counter = field(default_factory=Counter)  # messages with each mail defect
    seconds_featurize: float = 0.0
    seconds_model: float = 0.0

    @property
    def n(self) -> int:
        return len(self.labels)

    @property
    def seconds(self) -> float:
        return self.seconds_featurize + self.seconds_model

    def classes(self) -> list[str]:
        return sorted(set(self.labels))

    def correct(self) -> np.ndarray:
        return np.array([p == y for p, y in zip(self.predicted, self.labels, strict=True)])

    def report(self, positive: str | None = None) -> dict:
        """The figures of this replay (see :func:`report`)."""
        return report(self, positive)


def choose_positive(labels: Sequence[str]) -> str | None:
    """The label the two-class spam figures treat as positive, or None for multi-class data.

    ``spam`` if present, else ``1`` for 0/1 labels, else the last label in sorted order.
    """
    classes = sorted(set(labels))
    if len(classes) != 2:
        return None
    if "spam" in classes:
        return "spam"
    if classes == ["0", "1"]:
        return "1"
    return classes[1]


def class_scores(log_proba: Sequence[dict[str, float]], label: str) -> np.ndarray:
    """Log-odds log P(label) − log P(not label) of each prediction: the ranking score.

    From log-probabilities, so messages the model is sure about still keep their order.
    A prediction over fewer than two known classes scores 0: a model that has learned one
    class only (the first messages of a stream) has no odds to give, and its "probability 1"
    for that class is no evidence. A label missing beside two or more known classes scores
    −inf.
    """
    scores = np.empty(len(log_proba))
    for i, lp in enumerate(log_proba):
        if len(lp) < 2:
            scores[i] = 0.0
            continue
        mine = lp.get(label, -math.inf)
        others = [v for c, v in lp.items() if c != label]
        top = max(others)
        rest = top + math.log(sum(math.exp(v - top) for v in others)) if top > -math.inf else top
        scores[i] = mine - rest
    return scores


def _progress(total: int, enabled: bool, description: str):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is a nicety, never a requirement
        return None
    return tqdm(total=total, desc=description, unit="msg", file=sys.stderr, smoothing=0.1)


def replay(
    pipeline,
    messages: Sequence[Message],
    *,
    progress: bool = False,
    description: str = "replay",
    featurized: Featurizations | None = None,
) -> ReplayResult:
    """Score then learn each labelled message in order; return what was predicted.

    ``featurized`` (from :func:`featurize_all` with the same featurizer options) skips
    featurizing again; its featurization times are counted as if spent here.
    """
    result = ReplayResult()
    model = pipeline.model
    decide = decision_of(model)
    bar = _progress(len(messages), progress, description)
    clock = time.perf_counter
    try:
        for i, message in enumerate(messages):
            if bar is not None:
                bar.update(1)
            if featurized is None:
                started = clock()
                prepared = _prepare(pipeline, message)
                result.seconds_featurize += clock() - started
            else:
                prepared = featurized.prepared[i]
                result.seconds_featurize += featurized.seconds[i]
            if isinstance(prepared, str):
                result.skipped[prepared] += 1
                continue
            prepared_at = clock()
            log_proba = model.predict_log_proba_one(prepared.x)
            model.learn_one(prepared.x, message.label)
            result.seconds_model += clock() - prepared_at
            if getattr(prepared, "truncated", ()):
                result.truncated += 1
            result.defects.update(getattr(prepared, "defects", ()))
            log_proba = {str(c): float(v) for c, v in log_proba.items()}
            result.ids.append(message.id)
            result.labels.append(message.label)
            result.log_proba.append(log_proba)
            result.predicted.append(decide(log_proba))
    finally:
        if bar is not None:
            bar.close()
    return result


def report(result: ReplayResult, positive: str | None = None) -> dict:
    """Accuracy, per-class recall, ROC, lam%, log loss and speed of one replay.

    Keys: ``n``, ``accuracy``, ``recall`` (per class), ``precision``, ``confusion``
    (``labels`` + ``matrix``, rows = truth), ``one_minus_auc_pct`` (two classes: of the
    positive class's scores; more classes: mean over classes, one against the rest),
    ``log_loss`` (over messages whose true class the model had already seen; ``log_loss_n`` of
    them), ``msgs_per_s``, ``seconds``, ``seconds_featurize``, ``seconds_model``, ``skipped``,
    ``truncated``; for two classes also ``positive``, ``lam_pct``, ``hm_pct``, ``sm_pct``,
    ``spam_recall_at_fpr_0.1pct``, ``brier`` and a ``reliability`` table of P(positive).
    """
    if result.n == 0:
        raise ValueError("nothing was replayed: every message was skipped")
    labels = result.labels
    classes = result.classes()
    correct = result.correct()
    confusion = scoring.confusion_matrix(labels, result.predicted, classes)
    predicted_counts = confusion.sum(axis=0)
    class_sizes = Counter(labels)
    out: dict[str, Any] = {
        "n": result.n,
        "accuracy": float(correct.mean()),
        "classes": dict(sorted(Counter(labels).items())),
        # Divided by the class size: a message scored before any label was known counts as
        # missed, though it falls in no column of the confusion matrix.
        "recall": {c: float(confusion[i, i] / class_sizes[c]) for i, c in enumerate(classes)},
        "precision": {
            c: float(confusion[i, i] / predicted_counts[i]) if predicted_counts[i] else 0.0
            for i, c in enumerate(classes)
        },
        "confusion": {"labels": classes, "matrix": confusion.tolist()},
    }
    truth_log_proba = [lp[y] for lp, y in zip(result.log_proba, labels, strict=True) if y in lp]
    out["log_loss"] = scoring.log_loss(truth_log_proba)
    out["log_loss_n"] = len(truth_log_proba)

    positive = positive or choose_positive(labels)
    if len(classes) == 2 and positive is not None:
        if positive not in classes:
            raise ValueError(f"positive label {positive!r} is not one of {classes}")
        y = np.array([label == positive for label in labels])
        scores = class_scores(result.log_proba, positive)
        predicted = np.array([p == positive for p in result.predicted])
        out["positive"] = positive
        out.update(scoring.binary_report(y, scores, predicted, max_fpr=MAX_FPR))
        p_positive = np.array([math.exp(lp.get(positive, -math.inf)) for lp in result.log_proba])
        out["brier"] = float(np.mean((p_positive - y) ** 2))
        out["reliability"] = reliability_table(y, p_positive)
    elif len(classes) > 2:
        per_class = []
        for c in classes:
            y = np.array([label == c for label in labels])
            per_class.append(1.0 - scoring.roc_auc(y, class_scores(result.log_proba, c)))
        out["one_minus_auc_pct"] = 100.0 * float(np.mean(per_class))
    out["seconds"] = result.seconds
    out["seconds_featurize"] = result.seconds_featurize
    out["seconds_model"] = result.seconds_model
    out["msgs_per_s"] = result.n / result.seconds if result.seconds > 0 else float("inf")
    out["skipped"] = dict(result.skipped)
    out["truncated"] = result.truncated
    out["defects"] = dict(sorted(result.defects.items()))
    return out


def reliability_table(y_true: np.ndarray, probability: np.ndarray, bins: int = 10) -> list[dict]:
    """Calibration by decile of predicted probability: count, mean prediction, observed share."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, probability, side="right") - 1, 0, bins - 1)
    table = []
    for b in range(bins):
        mask = which == b
        count = int(mask.sum())
        table.append(
            {
                "bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}",
                "n": count,
                "mean_predicted": float(probability[mask].mean()) if count else None,
                "observed": float(y_true[mask].mean()) if count else None,
            }
        )
    return table
