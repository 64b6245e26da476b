"""A real Prometheus server scrapes a running daemon; every dashboard query returns data.

This keeps the Grafana dashboard and the metric names from drifting apart: the daemon runs as
``python -m streamnb run`` on a small stream against the real broker, Debian's ``prometheus``
binary scrapes its endpoint every second, and each PromQL expression of
``docker/grafana/dashboards/streamnb.json`` is evaluated through Prometheus' HTTP API.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from streamnb.daemon.kafka_io import create_topics, produce
from tests.integration.harness import (
    DaemonProcess,
    feedback,
    sms,
    value,
    wait_caught_up,
    wait_for,
    write_config,
)
from tests.processes import stop_process

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docker" / "grafana" / "dashboards" / "streamnb.json"
# Stands in for Grafana's $__rate_interval: long enough to cover the whole test, so rate() and
# histogram_quantile() see the stream even on a slow machine.
RATE_INTERVAL = "5m"
N_MESSAGES = 400


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", RATE_INTERVAL))
        for panel in board["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


class PrometheusServer:
    """Debian's ``prometheus`` binary on a free loopback port, scraping one target every 1 s."""

    def __init__(self, binary: str, directory: Path, target: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: streamnb\n    static_configs:\n"
            f"      - targets: ['{target}']\n",
            encoding="utf-8",
        )
        self.log_path = directory / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=self._log,
        )
        wait_for(self._ready, 30, "Prometheus to be ready", every=0.2)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        """The result of an instant query (vector or scalar as a one-element list)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


@pytest.fixture
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("prometheus missing in CI: scripts/install-system-deps.sh installs it")
        pytest.skip("prometheus not installed (Debian: apt-get install prometheus)")
    return binary


def test_every_dashboard_query_returns_data_from_a_running_daemon(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir, prometheus_binary, monkeypatch
):
    rows = sms(data_dir)[:N_MESSAGES]
    unlabelled = {msg_id for i, (msg_id, _, _) in enumerate(rows) if i % 5 == 0}
    n_labelled = len(rows) - len(unlabelled)
    relabelled_id, old_label, _ = next(r for r in rows if r[0] not in unlabelled)

    create_topics(
        kafka_bootstrap,
        {f"{topic_prefix}-in": 2, f"{topic_prefix}-out": 1, f"{topic_prefix}-dlq": 1},
    )
    metrics_port = free_port()
    monkeypatch.setenv("STREAMNB_METRICS__HOST", "127.0.0.1")
    monkeypatch.setenv("STREAMNB_METRICS__PORT", str(metrics_port))
    monkeypatch.setenv("STREAMNB_METRICS__WINDOW", "100")
    # A loaded CI machine can stall the client for seconds; a rebalance would only slow the test.
    monkeypatch.setenv("STREAMNB_KAFKA__SESSION_TIMEOUT_MS", "30000")
    # The front door too: its panels need checks and learns (a learn refused among them).
    http_port = free_port()
    monkeypatch.setenv("STREAMNB_HTTP__PORT", str(http_port))
    monkeypatch.setenv("STREAMNB_HTTP__SCORERS", "0")  # served by the daemon: one /metrics
    monkeypatch.setenv("STREAMNB_HTTP__PASSWORD", "pw")
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix, every_seconds=0.5)
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    prometheus = None
    checks = _ChecksInTheBackground(http_port, [text for _, _, text in rows[:50]])
    try:
        daemon.wait_assigned()
        checks.start()
        prometheus = PrometheusServer(prometheus_binary, tmp_path, f"127.0.0.1:{metrics_port}")
        # A scrape before the stream, so that rate() sees the stream's increase.
        wait_for(lambda: prometheus.query('up{job="streamnb"} == 1'), 30,
                 "Prometheus' first scrape of the daemon", 0.2)
        produce(
            kafka_bootstrap,
            f"{topic_prefix}-in",
            [
                *(
                    (msg_id.encode(), value(msg_id, text, None if msg_id in unlabelled else label))
                    for msg_id, label, text in rows
                ),
                (b"broken", b"this is not JSON"),
                (
                    relabelled_id.encode(),
                    feedback(relabelled_id, "spam" if old_label == "ham" else "ham"),
                ),
            ],
        )
        wait_caught_up(kafka_bootstrap, topic_prefix, daemon, timeout=120)

        def scraped_everything():
            daemon._check_alive()
            consumed = prometheus.query('sum(streamnb_messages_consumed_total{kind="labelled"})')
            dead = prometheus.query("sum(streamnb_dead_letters_total)")
            scrapes = prometheus.query(f'count_over_time(up{{job="streamnb"}}[{RATE_INTERVAL}])')
            return (
                # a rebalance can replay records after the last commit: at least once
                consumed and float(consumed[0]["value"][1]) >= n_labelled
                and dead and float(dead[0]["value"][1]) >= 1
                and float(scrapes[0]["value"][1]) >= 3
            )

        wait_for(scraped_everything, 60, "Prometheus to scrape the daemon's final counts", 0.5)

        # Instant values can briefly lack a series (a rebalance removes a partition's lag until
        # the daemon reports it again), so poll until every query has data, then judge.
        def evaluate_dashboard() -> tuple[list[str], list[str]]:
            empty, not_finite = [], []
            for title, expr in dashboard_queries():
                result = prometheus.query(expr)
                if not result:
                    empty.append(f"{title}: {expr}")
                elif not all(math.isfinite(float(series["value"][1])) for series in result):
                    not_finite.append(f"{title}: {expr} -> {result}")
            return empty, not_finite

        deadline = time.monotonic() + 30
        empty, not_finite = evaluate_dashboard()
        while (empty or not_finite) and time.monotonic() < deadline:
            time.sleep(1)
            empty, not_finite = evaluate_dashboard()
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
        assert not not_finite, "dashboard queries with NaN/Inf:\n" + "\n".join(not_finite)

        observed = prometheus.query(
            "sum(streamnb_prequential_observed_total) + sum(streamnb_prequential_unscored_total)"
        )
        assert float(observed[0]["value"][1]) >= n_labelled
        accuracy = prometheus.query('streamnb_prequential_accuracy{window="lifetime"}')
        assert 0.5 < float(accuracy[0]["value"][1]) <= 1.0
        assert prometheus.query('streamnb_dead_letters_total{reason!=""} > 0')
    except AssertionError as error:
        events = [line for line in daemon.log_path.read_text().splitlines()
                  if '"event"' in line][-15:]
        raise AssertionError(f"{error}\n\ndaemon events:\n" + "\n".join(events)) from None
    finally:
        checks.stop()
        if prometheus is not None:
            prometheus.stop()
        if daemon.proc.poll() is None:
            daemon.terminate()
    assert checks.answered > 0


class _ChecksInTheBackground(threading.Thread):
    """Checks every 0.1 s, a learn and a refused learn each second, until stopped."""

    def __init__(self, port: int, texts: list[str]):
        super().__init__(daemon=True)
        self.port, self.texts = port, texts
        self.stopping = threading.Event()
        self.answered = 0

    def _post(self, path: str, body: bytes, headers: dict) -> None:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                self.answered += reply.status == 200
        except urllib.error.HTTPError:
            pass  # the refused learn's 403
        except OSError:
            pass  # not serving yet

    def run(self) -> None:
        i = 0
        while not self.stopping.wait(0.1):
            mail = f"Subject: {self.texts[i % len(self.texts)]}\n\nhello".encode()
            self._post("/checkv2", mail, {})
            if i % 10 == 0:
                self._post("/learnham", mail, {"Password": "pw"})
                self._post("/learnspam", mail, {"Password": "wrong"})
            i += 1

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
