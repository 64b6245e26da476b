"""The front door: checks and learns over HTTP in rspamd's protocol (docs/http.md).

=================  ==================================================================
``rspamd``         the protocol: a check's envelope, its verdict and reply (no I/O)
``scoring``        a mail's log-probabilities from the daemon's global model
``learning``       a learn becomes a labelled record on the input topic
``app``            the endpoints, their bounds and authentication (aiohttp)
``server``         the listener, bound at start-up and served on a thread of its own
``metrics``        the front door's Prometheus metrics
=================  ==================================================================

:func:`serve_daemon` puts it in front of a running daemon.
"""

from __future__ import annotations

from typing import Any

__all__ = ["policy_of", "serve_daemon"]


def policy_of(settings: Any, model: Any) -> Any:
    """The score and action policy of ``[http]`` with ``model``'s decision line."""
    from streamnb.serve.rspamd import Policy

    http = settings.http
    return Policy(spam_class=http.spam_class, add_header_score=http.add_header_score,
                  score_per_log_odds=http.score_per_log_odds,
                  greylist_score=http.greylist_score, reject_score=http.reject_score,
                  class_offsets=dict(getattr(model, "class_offsets", {}) or {}))


def serve_daemon(daemon: Any, settings: Any, listener: Any, registry: Any,
                 learner: Any = None) -> Any:
    """Serve checks scored by ``daemon``'s global model on ``listener`` (bound by
    :func:`streamnb.serve.server.bind`), learns through ``learner``; returns the started
    :class:`~streamnb.serve.server.HttpServer`."""
    from streamnb.pipeline import build_pipeline
    from streamnb.serve.app import FrontDoor
    from streamnb.serve.metrics import HttpMetrics
    from streamnb.serve.scoring import Scorer
    from streamnb.serve.server import HttpServer

    # A featurizer of its own: the Kafka loop's is used from the loop's thread.
    pipeline = build_pipeline(settings.model.table(), settings.features)
    scorer = Scorer(pipeline, lambda: daemon.live, daemon.lock, explain=settings.http.explain)

    def stats() -> dict:
        with daemon.lock:
            live = daemon.live
            return {"learned": live.n_updates, "classes": list(live.classes),
                    "vocabulary": getattr(live, "vocabulary_size", None),
                    "model_partitions": len(daemon.parts.slices)}

    front = FrontDoor(settings.http, scorer, policy_of(settings, daemon.live),
                      HttpMetrics(registry), learner=learner, stats=stats,
                      labels=frozenset(settings.model.labels))

    def close() -> None:
        front.close()
        if learner is not None:
            learner.close()

    server = HttpServer(front.application(), listener, settings.http, on_close=close)
    server.start()
    return server
