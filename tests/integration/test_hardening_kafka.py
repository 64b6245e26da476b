"""Hardening on the real broker: no single record stops the stream, and a bad start fails at
once, before anything is consumed."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

import orjson
import pytest

from streamnb.daemon.changelog import changelog_topic
from streamnb.daemon.kafka_io import create_topics, produce, read_all
from tests.integration.harness import (
    REPO,
    DaemonProcess,
    changelog_model,
    value,
    wait_caught_up,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def topics(bootstrap: str, prefix: str, **configs: dict[str, str]) -> None:
    names = {f"{prefix}-in": 1, f"{prefix}-out": 1, f"{prefix}-dlq": 1}
    create_topics(bootstrap, names, {f"{prefix}-{k}": v for k, v in configs.items()})


def predicted(bootstrap: str, prefix: str, msg_id: str, timeout: float = 60.0) -> dict:
    """The prediction for ``msg_id`` on the output topic (waits for it)."""

    def found(records):
        return any(r.key == msg_id.encode() for r in records)

    records = read_all(bootstrap, f"{prefix}-out", until=found, timeout=timeout)
    matches = [orjson.loads(r.value) for r in records if r.key == msg_id.encode()]
    assert matches, f"no prediction for {msg_id} within {timeout:.0f} s"
    return matches[0]


def dead_letters(bootstrap: str, prefix: str, n: int) -> list:
    return read_all(bootstrap, f"{prefix}-dlq", until=lambda r: len(r) >= n)


POISONS = {
    # An unlabelled message with a 600 KB id: its prediction (id as key and in the body) is
    # 1.2 MB, over what the output topic takes (1 MiB by default).
    "huge-id": (None, value("x" * 600_000, "win a prize"), "output_too_large", ""),
    # Just under 1 MiB of bytes that are not JSON: the input fits its topic, its dead letter
    # (the value plus the reason headers) does not fit the dead-letter topic.
    "mib-not-json": (b"mib", b"\xff" * 1_048_450, "bad_json", ""),
    # Feedback for a 600 KB id the daemon never saw, keyed by that id.
    "huge-feedback": (
        b"k" * 400_000,
        orjson.dumps({"type": "feedback", "id": "f" * 600_000, "label": "spam"}),
        "unknown_id",
        "",
    ),
    # An input over limits.max_value_bytes (set to 500,000 here) with a 500 KB key.
    "too-large": (b"t" * 500_000, value("big", "y" * 520_000), "too_large",
                  "[limits]\nmax_value_bytes = 500000\n"),
}


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_each_poison_is_dead_lettered_and_the_next_message_still_predicted(
    tmp_path, kafka_bootstrap, topic_prefix, poison
):
    key, original, reason, extra = POISONS[poison]
    topics(kafka_bootstrap, topic_prefix)
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix, extra=extra)
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    produce(kafka_bootstrap, f"{topic_prefix}-in", [
        (b"a", value("a", "win a prize now", "spam")),
        (b"b", value("b", "see you at lunch", "ham")),
        (key, original),
        (b"next", value("next", "win a prize")),
    ])
    assert predicted(kafka_bootstrap, topic_prefix, "next")["label"] == "spam"
    (dead,) = dead_letters(kafka_bootstrap, topic_prefix, 1)
    headers = dict(dead.headers)
    assert headers["streamnb.reason"].decode() == reason
    assert headers["streamnb.source.offset"] == b"2"
    if headers.get("streamnb.truncated") == b"true":
        assert int(headers["streamnb.original.size"]) == len(original)
        assert headers["streamnb.original.sha256"].decode() == hashlib.sha256(original).hexdigest()
        assert original.startswith(dead.value) and len(dead.value) > 1_000_000
    else:
        assert dead.value == original
    assert poison != "mib-not-json" or headers.get("streamnb.truncated") == b"true"
    daemon.terminate()
    assert daemon.proc.returncode == 0


def test_outputs_respect_the_topics_own_max_message_bytes(tmp_path, kafka_bootstrap, topic_prefix):
    """Limits are read from the topics at start: a 2,000-byte output topic and a 3,000-byte
    dead-letter topic, with an input topic that takes the broker's default."""
    topics(kafka_bootstrap, topic_prefix, out={"max.message.bytes": "2000"},
           dlq={"max.message.bytes": "3000"})
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix)
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    not_json = b"\x00" + b"z" * 5000
    produce(kafka_bootstrap, f"{topic_prefix}-in", [
        (b"a", value("a", "win a prize now", "spam")),
        (None, value("i" * 1500, "win a prize")),  # a 3,000-byte prediction
        (None, not_json),
        (b"next", value("next", "win a prize")),
    ])
    assert predicted(kafka_bootstrap, topic_prefix, "next")["label"] == "spam"
    first, second = dead_letters(kafka_bootstrap, topic_prefix, 2)
    assert dict(first.headers)["streamnb.reason"] == b"output_too_large"
    assert dict(second.headers)["streamnb.reason"] == b"bad_json"
    assert dict(second.headers)["streamnb.truncated"] == b"true"
    assert not_json.startswith(second.value) and 1000 < len(second.value) < 3000
    assert daemon.terminate()[0] == 0


def run_cli(config, env=None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    return result, time.monotonic() - started


def one_line(result: subprocess.CompletedProcess) -> str:
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert len(output.splitlines()) == 1, output
    return output


def test_max_value_bytes_above_what_the_input_topic_carries_fails_at_start(
    tmp_path, kafka_bootstrap, topic_prefix
):
    topics(kafka_bootstrap, topic_prefix)
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix,
                          extra="[limits]\nmax_value_bytes = 10485760\n")
    result, elapsed = run_cli(config)
    line = one_line(result)
    assert line.startswith("streamnb: limits.max_value_bytes: 10485760 is more than")
    assert "1048588" in line and elapsed < 15


def test_a_message_whose_state_would_not_fit_its_changelog_is_dead_lettered(
    tmp_path, kafka_bootstrap, topic_prefix
):
    """A feedback entry (id and model input) over what the changelog topic takes would fail
    every commit's transaction: the message is dead-lettered instead, nothing learned."""
    topics(kafka_bootstrap, topic_prefix)
    changelog = changelog_topic(f"{topic_prefix}-group", f"{topic_prefix}-in")
    create_topics(kafka_bootstrap, {changelog: 1},
                  {changelog: {"max.message.bytes": "3000", "cleanup.policy": "compact"}})
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix)
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    # about 21 KB of model input that compresses to no less than 8 KB (hex digits: 4 bits each)
    words = " ".join(hashlib.sha256(b"%d" % i).hexdigest()[:16] for i in range(1000))
    produce(kafka_bootstrap, f"{topic_prefix}-in", [
        (b"a", value("a", "win a prize now", "spam")),
        (b"b", value("b", "see you at lunch", "ham")),
        (b"big", value("big", words, "spam")),
        (b"next", value("next", "win a prize")),
    ])
    assert predicted(kafka_bootstrap, topic_prefix, "next")["label"] == "spam"
    (dead,) = dead_letters(kafka_bootstrap, topic_prefix, 1)
    assert dict(dead.headers)["streamnb.reason"] == b"too_large_for_state"
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    assert daemon.terminate()[0] == 0
    assert changelog_model(kafka_bootstrap, topic_prefix).n_updates == 2  # a and b only


def scrape(port: int) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def deep_mime(levels: int) -> bytes:
    raw = b""
    for depth in range(levels):
        boundary = b"b%d" % depth
        raw += b"Content-Type: multipart/mixed; boundary=" + boundary + b"\n\n--" + boundary + b"\n"
    return raw + b"Content-Type: text/plain\n\nwin a prize inside\n"


@pytest.mark.parametrize("prepare_process", [False, True], ids=["one-process", "prepare-process"])
def test_metrics_score_a_resent_id_once_and_count_truncations(
    tmp_path, kafka_bootstrap, topic_prefix, prepare_process
):
    topics(kafka_bootstrap, topic_prefix)
    config = write_config(
        tmp_path, kafka_bootstrap, topic_prefix,
        extra=f"[pipeline]\nprepare_process = {str(prepare_process).lower()}\n",
    )
    port = free_port()
    daemon = DaemonProcess(config, tmp_path / "daemon.log", max_restarts=0,
                           env={"STREAMNB_METRICS__PORT": str(port)})
    daemon.wait_assigned()
    deep = base64.b64encode(deep_mime(10_000)).decode()
    records = [
        (b"a", value("a", "win a prize now", "spam")),
        (b"b", value("b", "see you at lunch", "ham")),
        *[(b"a", value("a", "win a prize now", "spam"))] * 3,  # producer retries
        (b"deep-1", orjson.dumps({"id": "deep-1", "raw_b64": deep, "label": "spam"})),
        (b"deep-2", orjson.dumps({"id": "deep-2", "raw_b64": deep})),
        (b"nosep", orjson.dumps({"id": "nosep", "raw_b64": base64.b64encode(
            b"Subject: lunch\nsee you at lunch\n").decode()})),
        (b"next", value("next", "win a prize")),
    ]
    produce(kafka_bootstrap, f"{topic_prefix}-in", records)
    assert predicted(kafka_bootstrap, topic_prefix, "next")["label"] == "spam"
    assert predicted(kafka_bootstrap, topic_prefix, "deep-2")["label"] == "spam"
    # a Subject: line straight into the body: the body is read (ham words), the defect counted
    assert predicted(kafka_bootstrap, topic_prefix, "nosep")["label"] == "ham"

    def settled():
        figures = scrape(port)
        return figures if figures.get(("streamnb_messages_consumed_total",
                                       (("kind", "labelled"),))) == 6 else None

    figures = wait_for(settled, 30, "the daemon to count six labelled messages")
    # a (before anything was learned: unscored), b and deep-1: each labelled id scored once
    assert figures[("streamnb_prequential_unscored_total", ())] == 1
    assert figures[("streamnb_prequential_observed_total", ())] == 2
    assert figures[("streamnb_duplicate_messages_total", ())] == 3
    truncated = (("kind", "truncated"), ("reason", "max_depth"))
    assert figures[("streamnb_featurizer_events_total", truncated)] == 2
    no_separator = (("kind", "defect"), ("reason", "missing_header_body_separator"))
    assert figures[("streamnb_featurizer_events_total", no_separator)] == 1
    logged = [(e["reason"], e["id"]) for e in daemon.events() if e.get("event") == "featurizer"]
    assert ("max_depth", "deep-1") in logged
    assert ("missing_header_body_separator", "nosep") in logged
    assert len(logged) == len(set(reason for reason, _ in logged))  # once per reason
    assert daemon.terminate()[0] == 0
