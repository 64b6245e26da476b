"""Fixtures for the metrics tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamnb.metrics import CONSUMED_KINDS, FEEDBACK_OUTCOMES, Metrics
from streamnb.serve.metrics import HttpMetrics


def populate(m: Metrics) -> Metrics:
    """Call every method of ``m`` at least once, so every metric has a series."""
    m.set_build_info("0.1.0", "multinomial_nb")
    for kind in CONSUMED_KINDS:
        m.consumed(kind, 2)
    m.prediction_emitted(3)
    m.learned("spam")
    m.learned("ham", 2)
    m.unlearned("spam")
    m.relabelled()
    for outcome in FEEDBACK_OUTCOMES:
        m.feedback_outcome(outcome)
    m.dead_lettered("bad_json")
    m.observe_latency(0.002)
    m.observe_end_to_end(1.5)
    m.set_lag("mail", 0, 42)
    m.set_lag("mail", 1, 7)
    m.checkpoint_done(0.03, 4096)
    m.set_model_size(1234, 56789)
    m.observe_labelled("spam", "spam", {"spam": 0.9, "ham": 0.1})
    m.observe_labelled("ham", "spam", {"spam": 0.7, "ham": 0.3})
    m.observe_labelled("ham", "ham", {"spam": 0.2, "ham": 0.8})
    # The front door's metrics share the registry when the daemon serves checks.
    http = HttpMetrics(m.registry)
    http.request("checkv2", 200)
    http.request("learn", 403)
    http.checked("add header", 0.001)
    http.learned("spam", "acknowledged")
    http.auth_failed()
    http.overloaded()
    http.in_flight(1)
    return m


@pytest.fixture
def populated() -> Callable[[], Metrics]:
    """A factory of Metrics (window 10) with every method called at least once."""
    return lambda: populate(Metrics(window=10))
