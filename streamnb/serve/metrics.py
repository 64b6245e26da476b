"""The front door's Prometheus metrics, served on the daemon's ``/metrics`` with the others.

Every label has a bounded set of values: the endpoints and actions are fixed lists, a learn's
class is one of the model's (bounded by ``max_classes``, the rest counted as ``_other``).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streamnb.metrics import PROCESSING_BUCKETS
from streamnb.serve.rspamd import ACTIONS

__all__ = ["ENDPOINTS", "HttpMetrics", "LEARN_OUTCOMES"]

ENDPOINTS = ("checkv2", "learn", "ping", "stat", "other")
LEARN_OUTCOMES = ("acknowledged", "refused", "too_large", "bad_request", "kafka_error")


class HttpMetrics:
    """Counters and histograms of checks and learns over HTTP, in ``registry``.

    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> m = HttpMetrics(registry)
    >>> m.checked("add header", 0.002)
    >>> registry.get_sample_value("streamnb_http_checks_total", {"action": "add header"})
    1.0
    """

    def __init__(self, registry: CollectorRegistry, max_classes: int = 64):
        self.max_classes = max_classes
        self._classes: set[str] = set()
        self._lock = threading.Lock()
        self._requests = Counter(
            "streamnb_http_requests", "HTTP requests answered, by endpoint and status code.",
            ["endpoint", "code"], registry=registry)
        self._check_seconds = Histogram(
            "streamnb_http_check_seconds",
            "Time of a check, from its request's body read to its reply (featurize + score).",
            buckets=PROCESSING_BUCKETS, registry=registry)
        self._checks = Counter(
            "streamnb_http_checks", "Checks answered with a verdict, by action.", ["action"],
            registry=registry)
        for action in ACTIONS:
            self._checks.labels(action)
        self._learns = Counter(
            "streamnb_http_learns", "Learns over HTTP, by class and outcome (acknowledged: "
            "the labelled record is on the input topic).", ["class", "outcome"],
            registry=registry)
        self._auth_failures = Counter(
            "streamnb_http_auth_failures", "Learns refused for a missing or wrong password.",
            registry=registry)
        self._in_flight = Gauge(
            "streamnb_http_in_flight", "HTTP requests being answered now.", registry=registry)
        self._rejected = Counter(
            "streamnb_http_overloaded", "Requests refused with 503 because max_in_flight were "
            "being answered.", registry=registry)

    def request(self, endpoint: str, code: int) -> None:
        if endpoint not in ENDPOINTS:
            endpoint = "other"
        self._requests.labels(endpoint, str(code)).inc()

    def checked(self, action: str, seconds: float) -> None:
        self._checks.labels(action).inc()
        self._check_seconds.observe(seconds)

    def learned(self, label: str, outcome: str) -> None:
        with self._lock:
            if label not in self._classes:
                if len(self._classes) >= self.max_classes:
                    label = "_other"
                else:
                    self._classes.add(label)
        self._learns.labels(label, outcome).inc()

    def auth_failed(self) -> None:
        self._auth_failures.inc()

    def overloaded(self) -> None:
        self._rejected.inc()

    def in_flight(self, n: int) -> None:
        self._in_flight.set(n)
