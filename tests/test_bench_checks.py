"""The checks benchmark measures what it says: its load generator counts every answer, over kept
and over closed connections, and on a tiny setting both servers learn, answer every check 200
and come out in its JSON (rspamd and redis-server are benchmark peers: skipped where absent)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from bench import bench_checks
from bench.peers.filters import make_filter

ANSWER = b'{"ok": true}'


class _Server:
    """A tiny HTTP server in a thread: answers every request ``ANSWER``, closing the
    connection after each answer when ``close``."""

    def __init__(self, close: bool):
        self.close = close
        self.requests = 0
        self.accepted = 0
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(5)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, reader, writer) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             + (b"Connection: close\r\n" if self.close else b"")
                             + b"Content-Length: %d\r\n\r\n" % len(ANSWER) + ANSWER)
                await writer.drain()
                if self.close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.mark.parametrize("close", [False, True])
def test_the_closed_loop_answers_every_request_over_kept_or_closed_connections(close):
    server = _Server(close)
    try:
        requests = [bench_checks.check_request(b"Subject: %d\r\n\r\nhi" % i) for i in range(7)]
        run = bench_checks.closed_loop(server.port, requests, 50, 4, keep_bodies=True)
    finally:
        server.stop()
    assert run.statuses == {200: 50} and server.requests == 50
    assert set(run.bodies.values()) == {ANSWER}
    # keep-alive: the 4 connections serve all; closed after each answer: one a request
    assert run.connections == server.accepted == (50 if close else 4)
    assert 0 < run.percentile(0.5) <= run.percentile(0.99)


def test_the_open_loop_sends_at_its_rate_and_times_from_the_intended_send_time():
    server = _Server(close=False)
    try:
        run = bench_checks.open_loop(server.port, [bench_checks.check_request(b"x")], 200, n=40)
    finally:
        server.stop()
    assert run.statuses == {200: 40}
    gaps = [b - a for a, b in zip(run.intended, run.intended[1:], strict=False)]
    assert gaps == pytest.approx([1 / 200] * 39)
    assert all(a >= t for a, t in zip(run.answered, run.intended, strict=True))
    assert run.within(run.intended[10], run.intended[19]).sent == 10


def test_a_server_that_is_gone_counts_as_unanswered_not_as_a_hang():
    port = bench_checks.free_port()  # nothing listens there
    run = bench_checks.open_loop(port, [bench_checks.check_request(b"x")], 500, n=5)
    assert run.statuses == {0: 5}


@pytest.mark.kafka
@pytest.mark.slow  # rspamd takes its seconds to start
def test_the_benchmark_runs_on_a_tiny_setting_against_the_real_servers(
    kafka_bootstrap, data_dir, capsys
):
    peer = make_filter("rspamd-bayes", ["ham", "spam"])
    if peer.missing():
        pytest.skip(f"rspamd-bayes: {peer.missing()}")
    assert bench_checks.main([
        "--bootstrap", kafka_bootstrap, "--data", str(data_dir), "--train", "25",
        "--checks", "100", "--requests", "100", "--rounds", "1", "--concurrency", "8",
        "--latency-seconds", "0.5", "--skip-consuming", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["train"]["streamnb_learned"] == 50
    for name in ("streamnb", "rspamd"):
        sanity = report["sanity"][name]
        assert sanity["statuses"] == {"200": 100}
        assert sanity["spam"] + sanity["ham"] == 100
    streamnb = report["sanity"]["streamnb"]
    assert streamnb["model_updates"] == [50]  # its verdicts come from the trained model
    assert streamnb["flagged_spam"] / streamnb["spam"] > streamnb["flagged_ham"] / streamnb["ham"]
    (row,) = report["saturation"]
    assert row["concurrency"] == 8 and row["ratio"] > 0
    for name in ("streamnb", "rspamd", "streamnb_close"):
        assert row[name]["statuses"] == {"200": 100} and row[name]["median"] > 0
    latency = report["latency"]
    assert latency["rate"] == pytest.approx(row["rspamd"]["median"] / 2)
    for name in ("streamnb", "rspamd"):
        assert 0 < latency[name]["p50_ms"] <= latency[name]["p99_ms"]
    assert "consuming" not in report
