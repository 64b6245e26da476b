"""Throughput and health metrics, naming conventions, bounded labels and the HTTP endpoint."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streamnb.metrics import (
    CONSUMED_KINDS,
    DEAD_LETTER_REASONS,
    FEEDBACK_OUTCOMES,
    OTHER,
    Metrics,
)


def exposition(m: Metrics) -> list:
    return list(text_string_to_metric_families(generate_latest(m.registry).decode()))


def test_counters_count_what_the_daemon_reports(populated):
    m = populated()
    assert m.sample("streamnb_messages_consumed_total", kind="labelled") == 2
    assert m.sample("streamnb_predictions_emitted_total") == 3
    assert m.sample("streamnb_learned_total", **{"class": "ham"}) == 2
    assert m.sample("streamnb_unlearned_total", **{"class": "spam"}) == 1
    assert m.sample("streamnb_relabelled_total") == 1
    assert m.sample("streamnb_feedback_total", outcome="unknown_id") == 1
    assert m.sample("streamnb_dead_letters_total", reason="bad_json") == 1
    assert m.sample("streamnb_build_info", version="0.1.0", model="multinomial_nb") == 1


def test_every_kind_and_outcome_is_exported_at_zero_before_it_happens():
    """rate() over a series that appears late misses its first increase."""
    m = Metrics()
    for kind in CONSUMED_KINDS:
        assert m.sample("streamnb_messages_consumed_total", kind=kind) == 0
    for outcome in FEEDBACK_OUTCOMES:
        assert m.sample("streamnb_feedback_total", outcome=outcome) == 0


def test_known_reasons_and_classes_are_exported_at_zero():
    m = Metrics(classes=["ham", "spam"])
    for reason in DEAD_LETTER_REASONS:
        assert m.sample("streamnb_dead_letters_total", reason=reason) == 0
    for label in ("ham", "spam"):
        assert m.sample("streamnb_learned_total", **{"class": label}) == 0
        assert m.sample("streamnb_unlearned_total", **{"class": label}) == 0
    m.dead_lettered("some_new_code")  # a well-formed code outside the list is still counted
    assert m.sample("streamnb_dead_letters_total", reason="some_new_code") == 1


def test_unknown_kind_or_outcome_is_a_value_error():
    m = Metrics()
    with pytest.raises(ValueError, match="kind"):
        m.consumed("spam")
    with pytest.raises(ValueError, match="outcome"):
        m.feedback_outcome("maybe")


def test_dead_letter_reasons_stay_a_bounded_set():
    m = Metrics(max_reasons=3, dead_letter_reasons=())
    for reason in ["bad_json", "too_large", "no_id", "fourth", "Not A Code!"]:
        m.dead_lettered(reason)
    reasons = {s.labels["reason"] for f in exposition(m) if f.name == "streamnb_dead_letters"
               for s in f.samples if s.name.endswith("_total")}
    assert reasons == {"bad_json", "too_large", "no_id", OTHER}
    assert m.sample("streamnb_dead_letters_total", reason=OTHER) == 2


def test_class_labels_stay_a_bounded_set():
    m = Metrics(max_classes=2)
    m.learned("spam")
    m.learned("ham")
    m.learned("eggs")
    m.observe_labelled("bacon", "spam", {"spam": 0.5, "ham": 0.3, "bacon": 0.2})
    assert m.sample("streamnb_learned_total", **{"class": OTHER}) == 1
    assert m.sample("streamnb_prequential_confusion_total", actual=OTHER, predicted="spam") == 1
    classes = {s.labels["class"] for f in exposition(m) for s in f.samples if "class" in s.labels}
    assert classes == {"spam", "ham", OTHER}


def test_lag_series_disappear_with_their_partition(populated):
    m = populated()
    assert m.sample("streamnb_consumer_lag_messages", topic="mail", partition="1") == 7
    m.forget_partition("mail", 1)
    m.forget_partition("mail", 9)  # never assigned: no error
    assert m.sample("streamnb_consumer_lag_messages", topic="mail", partition="1") is None
    assert m.sample("streamnb_consumer_lag_messages", topic="mail", partition="0") == 42


def test_checkpoint_and_latency_metrics(populated):
    before = time.time()
    m = populated()
    stamp = m.sample("streamnb_last_checkpoint_timestamp_seconds")
    assert before <= stamp <= time.time()
    assert m.sample("streamnb_checkpoint_duration_seconds_count") == 1
    assert m.sample("streamnb_checkpoint_duration_seconds_sum") == pytest.approx(0.03)
    assert m.sample("streamnb_checkpoint_size_bytes") == 4096
    assert m.sample("streamnb_processing_latency_seconds_bucket", le="0.0025") == 1
    assert m.sample("streamnb_processing_latency_seconds_bucket", le="0.001") == 0
    assert m.sample("streamnb_end_to_end_latency_seconds_count") == 1
    m.observe_end_to_end(-0.01)  # a producer clock slightly ahead
    assert m.sample("streamnb_end_to_end_latency_seconds_bucket", le="0.001") == 1
    assert m.sample("streamnb_model_vocabulary_size") == 1234
    assert m.sample("streamnb_model_state_bytes") == 56789


def test_the_time_waited_for_the_prepare_processes_adds_up(populated):
    m = populated()
    assert m.sample("streamnb_prepare_wait_seconds_total") == 0.0  # exported before a wait
    for seconds in (0.25, 0.0, 0.5):
        m.prepare_waited(seconds)
    assert m.sample("streamnb_prepare_wait_seconds_total") == pytest.approx(0.75)


def test_names_follow_prometheus_conventions(populated):
    families = exposition(populated())
    assert families
    for family in families:
        assert family.name.startswith("streamnb_"), family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        for unit in ("_milliseconds", "_ms", "_kilobytes", "_minutes"):
            assert unit not in family.name


def test_each_metrics_has_its_own_registry():
    a, b = Metrics(), Metrics()
    a.prediction_emitted()
    assert b.sample("streamnb_predictions_emitted_total") == 0
    shared = CollectorRegistry()
    c = Metrics(registry=shared)
    assert c.registry is shared


def test_serve_exposes_the_registry_over_http(populated):
    m = populated()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m.serve("127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        m.close()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"streamnb_prequential_accuracy", "streamnb_consumer_lag_messages"} <= names
    assert 'streamnb_prequential_accuracy{window="lifetime"} 0.666' in text


def test_scraping_while_the_daemon_observes_loses_nothing():
    m = Metrics(window=50, dead_letter_reasons=())
    errors: list[BaseException] = []
    done = threading.Event()

    def scrape():
        try:
            while not done.is_set():
                generate_latest(m.registry)
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for i in range(20_000):
            label = f"class{i % 7}"
            m.learned(label)
            m.dead_lettered(f"reason{i % 5}")
            m.observe_labelled(label, "class0", {"class0": 0.6, label: 0.4})
    finally:
        done.set()
        scraper.join()
    assert not errors
    assert m.sample("streamnb_prequential_observed_total") == 20_000
    assert sum(m.sample("streamnb_learned_total", **{"class": f"class{k}"}) for k in range(7)) == (
        20_000
    )
