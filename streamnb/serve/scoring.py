"""A mail's verdict from the global model: featurized as the daemon featurizes a ``raw`` record,
scored by the model the daemon predicts with.

The daemon's loop changes its model while it processes a batch, under ``Daemon.lock``. A check
featurizes its mail without the lock (most of its time), then takes the lock only to score,
so the model it reads is the one between two of the loop's batches, as a prediction on the
output topic is. :meth:`Scorer.try_score` never waits: while the loop holds the lock it
answers None and the server scores in a worker thread instead (:meth:`Scorer.score`), so the
server's event loop never blocks on the Kafka loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from streamnb.codec import Message
from streamnb.pipeline import PipelineError

__all__ = ["Scored", "Scorer"]


@dataclass(frozen=True, slots=True)
class Scored:
    """The model's answer for one mail: every class's log P(c | x), the model's update count
    and, when asked for, the exact explanation of the log-odds (``explain_log_odds``)."""

    log_proba: Mapping[str, float]
    model_updates: int
    explanation: Mapping[str, Any] | None = None


class Scorer:
    """Scores mail with ``model_of()`` (the live global model) under ``lock``; ``pipeline`` is
    the daemon's featurizer and model input (:class:`streamnb.pipeline.Pipeline`)."""

    def __init__(self, pipeline: Any, model_of: Callable[[], Any],
                 lock: threading.RLock | threading.Lock, explain: int = 0):
        self.pipeline = pipeline
        self.model_of = model_of
        self.lock = lock
        self.explain = explain

    def prepare(self, raw: bytes) -> Any:
        """The model input of a mail, exactly as the daemon makes it from a ``raw`` record;
        raises :class:`~streamnb.pipeline.PipelineError` for one the model cannot use."""
        return self.pipeline.prepare(Message(id="", raw=raw)).x

    def try_score(self, x: Any) -> Scored | None:
        """The scores of ``x`` if the model is free now, else None (the loop holds it)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self._score(x)
        finally:
            self.lock.release()

    def score(self, x: Any) -> Scored:
        """The scores of ``x``, waiting for the model."""
        with self.lock:
            return self._score(x)

    def _score(self, x: Any) -> Scored:
        model = self.model_of()
        try:
            # The daemon's batch step, for a batch of one unlabelled message (it learns
            # nothing): what a run of the output topic's predictions is scored with, and 111
            # against 184 us a SpamAssassin mail for predict_log_proba_one.
            (log_proba,) = model.prequential_log_proba_many([x], [None])
        except Exception as error:  # noqa: BLE001 - e.g. a vector of the wrong length
            raise PipelineError("model_rejected", str(error)) from None
        explanation = None
        if self.explain and len(log_proba) >= 2:
            explain = getattr(model, "explain_log_odds", None)
            if explain is not None and getattr(model, "explanation_unavailable",
                                               lambda: "none")() is None:
                explanation = explain(x, self.explain)
        return Scored(log_proba, model.n_updates, explanation)
