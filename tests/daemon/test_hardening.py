"""Loop logic against the in-memory fakes: outputs that always fit, duplicates that
are not scored twice, featurizer notes counted and logged once per reason."""

from __future__ import annotations

import hashlib
import logging

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.daemon.kafka_io import record_size
from streamnb.daemon.outputs import fit_dead_letter
from tests.daemon.fakes import FakeKafka, RecordingMetrics, drain, make_daemon, settings_for


def message(msg_id: str, text: str, label: str | None = None) -> bytes:
    body = {"id": msg_id, "text": text}
    if label is not None:
        body["label"] = label
    return orjson.dumps(body)


def run(tmp_path, values, *, max_record_bytes=1048588, metrics=None):
    kafka = FakeKafka({"in": 1})
    for value in values:
        kafka.append("in", value)
    daemon = make_daemon(settings_for(tmp_path), kafka, metrics=metrics or RecordingMetrics(),
                         max_record_bytes=max_record_bytes)
    drain(daemon)
    daemon.checkpoint("test")
    return daemon, kafka


def headers_of(record) -> dict[str, bytes]:
    return dict(record.headers)


def test_a_prediction_too_large_for_the_output_topic_is_dead_lettered_and_the_stream_goes_on(
    tmp_path,
):
    big_id = "x" * 3000  # the prediction carries the id twice (key and body)
    daemon, kafka = run(
        tmp_path,
        [message("a", "win cash", "spam"), message(big_id, "win cash"), message("b", "win cash")],
        max_record_bytes=4000,
    )
    predictions = [orjson.loads(r.value)["id"] for r in kafka.all("out")]
    assert predictions == ["b"]
    (dead,) = kafka.all("dlq")
    assert headers_of(dead)["streamnb.reason"] == b"output_too_large"
    assert dead.value == message(big_id, "win cash")  # the input, whole: it fits
    assert daemon.offsets == {"in:0": 3}
    assert ("output_too_large",) in daemon.metrics.names("dead_lettered")


def test_a_dead_letter_too_large_for_its_topic_carries_a_prefix_its_size_and_digest(tmp_path):
    original = b"\xff" * 6000  # not JSON: a dead letter of reason bad_json
    daemon, kafka = run(tmp_path, [original, message("b", "hello")], max_record_bytes=4000)
    (dead,) = kafka.all("dlq")
    headers = headers_of(dead)
    assert headers["streamnb.reason"] == b"bad_json"
    assert headers["streamnb.truncated"] == b"true"
    assert headers["streamnb.original.size"] == b"6000"
    assert headers["streamnb.original.sha256"] == hashlib.sha256(original).hexdigest().encode()
    assert original.startswith(dead.value) and 3000 < len(dead.value) < 4000
    assert [orjson.loads(r.value)["id"] for r in kafka.all("out")] == ["b"]


class Topic:
    def __init__(self, limit):
        self.limit = limit

    def room(self, topic, key, headers):
        return self.limit - record_size(key, b"", headers) - 5


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(600, 20_000),
    key=st.none() | st.binary(max_size=30_000),
    value=st.none() | st.binary(max_size=30_000),
    n_headers=st.integers(0, 3),
    header_size=st.integers(0, 10_000),
)
def test_every_dead_letter_fits_its_topic(limit, key, value, n_headers, header_size):
    headers = [(f"h{i}", b"v" * header_size) for i in range(n_headers)]
    headers.append(("streamnb.reason", b"bad_json"))
    out_key, out_value, out_headers = fit_dead_letter(Topic(limit), "dlq", key, value, headers)
    assert record_size(out_key, out_value, out_headers) <= limit
    out = dict(out_headers)
    assert out["streamnb.reason"] == b"bad_json"
    if (out_key, out_value, out_headers) == (key, value, headers):
        assert "streamnb.truncated" not in out
    else:
        assert out["streamnb.truncated"] == b"true"
        assert int(out["streamnb.original.size"]) == len(value or b"")
        assert out["streamnb.original.sha256"] == hashlib.sha256(value or b"").hexdigest().encode()
        assert (value or b"").startswith(out_value)


def test_a_labelled_message_sent_again_is_scored_and_counted_once(tmp_path):
    values = [
        message("a", "win cash now", "spam"),
        message("b", "lunch at noon", "ham"),
        message("a", "win cash now", "spam"),  # a producer retry
        message("a", "win cash now", "spam"),
        message("b", "lunch at noon", "spam"),  # re-sent with another label: a correction
    ]
    daemon, _ = run(tmp_path, values)
    metrics = daemon.metrics
    assert [c[0] for c in metrics.names("observe_labelled")] == ["spam", "ham"]
    assert sum(n for (n,) in metrics.names("duplicate_message")) == 3
    assert sum(n for _, n in metrics.names("consumed") if _ == "labelled") == 5
    # The correction is applied as feedback: b is learned as spam, once.
    assert daemon.parts.slices["in:0"].store.get("b").label == "spam"
    assert daemon.live.docs == {"spam": 2, "ham": 0}


def test_an_unlabelled_message_labelled_later_by_a_resend_is_scored_then(tmp_path):
    # The model never learned "a" before its labelled copy: that prediction is an honest one.
    daemon, _ = run(tmp_path, [message("a", "win cash"), message("a", "win cash", "spam")])
    assert [c[0] for c in daemon.metrics.names("observe_labelled")] == ["spam"]
    assert daemon.metrics.names("duplicate_message") == []


def test_truncations_and_defects_are_counted_by_reason_and_logged_once_each(tmp_path, caplog):
    values = [
        message("m1", "win CUT:max_depth", "spam"),
        message("m2", "win CUT:max_depth CUT:max_tokens"),
        message("m3", "hello DEFECT:missing_separator", "ham"),
        message("m4", "hello CUT:max_depth DEFECT:missing_separator"),
        message("m5", "plain"),
    ]
    with caplog.at_level(logging.WARNING, logger="streamnb.daemon"):
        daemon, kafka = run(tmp_path, values)
    events = daemon.metrics.names("featurizer_event")
    assert sorted(events) == sorted([
        ("truncated", "max_depth"), ("truncated", "max_depth"), ("truncated", "max_tokens"),
        ("defect", "missing_separator"), ("truncated", "max_depth"),
        ("defect", "missing_separator"),
    ])
    logged = [r for r in caplog.records if getattr(r, "event", None) == "featurizer"]
    assert [(r.kind, r.reason, r.id) for r in logged] == [
        ("truncated", "max_depth", "m1"), ("truncated", "max_tokens", "m2"),
        ("defect", "missing_separator", "m3"),
    ]
    assert len(kafka.all("out")) == 3  # truncated messages are still predicted


def test_the_real_metrics_export_featurizer_events_and_duplicates(tmp_path):
    from streamnb.metrics import Metrics

    metrics = Metrics()
    run(tmp_path, [message("a", "x CUT:max_depth", "spam"), message("a", "x", "spam")],
        metrics=metrics)
    sample = metrics.sample
    assert sample("streamnb_featurizer_events_total", kind="truncated", reason="max_depth") == 1
    assert sample("streamnb_featurizer_events_total", kind="truncated", reason="max_parts") == 0
    assert sample("streamnb_duplicate_messages_total") == 1
    for i in range(200):  # reasons are bounded
        metrics.featurizer_event("defect", f"d{i}")
    assert sample("streamnb_featurizer_events_total", kind="defect", reason="_other") > 0


@pytest.mark.parametrize("kind", ["bogus"])
def test_an_unknown_featurizer_event_kind_is_a_bug(kind):
    from streamnb.metrics import Metrics

    with pytest.raises(ValueError, match="bogus"):
        Metrics().featurizer_event(kind, "x")
