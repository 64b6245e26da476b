"""The front door: checks and learns over HTTP in rspamd's protocol (docs/http.md).

=================  ==================================================================
``rspamd``         the protocol: a check's envelope, its verdict and reply (no I/O)
``scoring``        a mail's log-probabilities from the daemon's global model
``learning``       a learn becomes a labelled record on the input topic
``app``            the endpoints, their bounds and authentication (aiohttp)
``server``         the listener, bound at start-up and served on a thread of its own
``standby``        ``streamnb serve``: the group's model followed from its changelogs
``scorers``        the ``streamnb serve`` processes ``streamnb run`` starts
``metrics``        the front door's Prometheus metrics
=================  ==================================================================

:func:`serve_model` puts it in front of a model: a daemon's (:func:`serve_daemon`) or a
standby's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["model_stats", "policy_of", "serve_daemon", "serve_model"]


def policy_of(settings: Any, model: Any) -> Any:
    """The score and action policy of ``[http]`` with ``model``'s decision line."""
    from streamnb.serve.rspamd import Policy

    http = settings.http
    return Policy(spam_class=http.spam_class, add_header_score=http.add_header_score,
                  score_per_log_odds=http.score_per_log_odds,
                  greylist_score=http.greylist_score, reject_score=http.reject_score,
                  class_offsets=dict(getattr(model, "class_offsets", {}) or {}))


def model_stats(live: Any, partitions: int) -> dict:
    """What ``/stat`` tells of a global model summed from ``partitions`` slices."""
    return {"learned": live.n_updates, "classes": list(live.classes),
            "vocabulary": getattr(live, "vocabulary_size", None),
            "model_partitions": partitions}


def serve_model(settings: Any, listener: Any, registry: Any, model_of: Callable[[], Any],
                lock: Any, stats: Callable[[], dict]) -> Any:
    """Serve checks scored by ``model_of()`` (read under ``lock``) on ``listener`` (bound by
    :func:`streamnb.serve.server.bind`), and with ``http.password`` learns to the input
    topic; returns the started :class:`~streamnb.serve.server.HttpServer` (raises its
    ``BindError`` if it cannot serve, the learner closed)."""
    from streamnb.pipeline import build_pipeline
    from streamnb.serve.app import FrontDoor
    from streamnb.serve.metrics import HttpMetrics
    from streamnb.serve.scoring import Scorer
    from streamnb.serve.server import HttpServer

    learner = None
    if settings.http.password:
        from streamnb.serve.learning import KafkaLearner

        kafka = settings.kafka
        learner = KafkaLearner(kafka, settings.http.learn_topic or kafka.input_topics[0],
                               settings.limits.max_value_bytes)
    # A featurizer of its own: a daemon's Kafka loop uses its own from the loop's thread.
    pipeline = build_pipeline(settings.model.table(), settings.features)
    scorer = Scorer(pipeline, model_of, lock, explain=settings.http.explain)
    front = FrontDoor(settings.http, scorer, policy_of(settings, model_of()),
                      HttpMetrics(registry), learner=learner, stats=stats,
                      labels=frozenset(settings.model.labels))

    def close() -> None:
        front.close()
        if learner is not None:
            learner.close()

    server = HttpServer(front.application(), listener, settings.http, on_close=close)
    try:
        server.start()
    except BaseException:
        close()
        raise
    return server


def serve_daemon(daemon: Any, settings: Any, listener: Any, registry: Any) -> Any:
    """:func:`serve_model` with ``daemon``'s live global model, read under its lock."""

    def stats() -> dict:
        with daemon.lock:
            return model_stats(daemon.live, len(daemon.parts.slices))

    return serve_model(settings, listener, registry, lambda: daemon.live, daemon.lock, stats)
