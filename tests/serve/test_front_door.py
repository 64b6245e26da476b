"""The front door's HTTP endpoints on a real listener, with a model trained on real mail.

Learns go to an in-memory learner here (the real one, through Kafka to the daemon, is
tests/integration/test_http_kafka.py's); everything else is the code the daemon serves with.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import subprocess
import threading
import time
from dataclasses import replace

import orjson
import pytest
import zstandard
from prometheus_client import CollectorRegistry

from streamnb.config import HttpSettings
from streamnb.evaluation.corpora import read_corpus
from streamnb.pipeline import build_pipeline
from streamnb.serve import policy_of
from streamnb.serve.app import FrontDoor
from streamnb.serve.learning import LearnTooLarge, learn_record
from streamnb.serve.metrics import HttpMetrics
from streamnb.serve.rspamd import message_id
from streamnb.serve.scoring import Scorer
from streamnb.serve.server import HttpServer, bind

PASSWORD = "s3cret"


class MemoryLearner:
    """Records learns as the Kafka learner would write them (``learn_record``)."""

    def __init__(self, max_value_bytes: int = 1 << 20, delay: float = 0.0):
        self.records: list[tuple[str, bytes]] = []
        self.max_value_bytes = max_value_bytes
        self.delay = delay
        self.closed = False

    async def learn(self, mid: str, raw: bytes, label: str):
        value = learn_record(mid, raw, label, self.max_value_bytes)
        if self.delay:
            await asyncio.sleep(self.delay)
        self.records.append((mid, value))

    def close(self) -> None:
        self.closed = True


class Served:
    """A front door on 127.0.0.1 with its model, lock, learner and metrics registry."""

    def __init__(self, mails, *, scorer_factory=None, learner=None, **http):
        settings = HttpSettings(**{"password": PASSWORD, "port": 1, **http})
        self.pipeline = build_pipeline({"kind": "multinomial"}, {})
        self.model = self.pipeline.model
        for mail in mails:
            self.model.learn_one(self.pipeline.prepare(mail).x, mail.label)
        self.lock = threading.RLock()
        self.registry = CollectorRegistry()
        self.learner = learner if learner is not None else MemoryLearner()
        scorer = (scorer_factory or Scorer)(build_pipeline({"kind": "multinomial"}, {}),
                                            lambda: self.model, self.lock)
        self.front = FrontDoor(settings, scorer, policy_of_settings(settings, self.model),
                               HttpMetrics(self.registry), learner=self.learner,
                               stats=lambda: {"learned": self.model.n_updates},
                               labels=frozenset({"ham", "spam"}))
        listener = bind(replace(settings, port=0))
        self.server = HttpServer(self.front.application(), listener, settings,
                                 on_close=self.front.close)
        self.server.start()
        self.port = self.server.address[1]

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def check(self, raw: bytes, method: str = "POST", **headers) -> dict:
        status, body = self.request(method, "/checkv2", raw, headers)
        assert status == 200, body
        return orjson.loads(body)

    def sample(self, name: str, labels: dict | None = None) -> float | None:
        return self.registry.get_sample_value(name, labels or {})


def policy_of_settings(settings: HttpSettings, model):
    class _Settings:
        http = settings
    return policy_of(_Settings, model)


@pytest.fixture(scope="module")
def corpus(data_dir):
    return read_corpus(data_dir / "spamassassin", shuffle=3, limit=700).messages


@pytest.fixture(scope="module")
def served(corpus):
    front = Served(corpus[:600])
    yield front
    front.server.stop()


def test_checks_give_the_models_exact_log_probabilities(served, corpus):
    """The same mail, the same log-probabilities as the model the daemon predicts with: its
    batch step's exactly, predict_log_proba_one's to rounding."""
    right = 0
    model = served.model
    for mail in corpus[600:700]:
        reply = served.check(mail.raw)
        x = served.pipeline.prepare(mail).x
        (expected,) = model.prequential_log_proba_many([x], [None])
        assert reply["streamnb"]["log_probabilities"] == expected
        one = model.predict_log_proba_one(x)
        scale = max(1.0, *(abs(lp) for lp in one.values()))
        assert all(abs(expected[c] - one[c]) <= 1e-11 * scale for c in one)
        assert reply["streamnb"]["model_updates"] == 600
        assert reply["message-id"] == message_id(mail.raw)
        spam = reply["action"] == "add header"
        assert spam == (reply["streamnb"]["label"] == "spam") == (reply["score"] >= 6.0)
        right += spam == (mail.label == "spam")
    assert right >= 90  # a real verdict: SpamAssassin mail after 600 learned


def test_get_with_a_body_is_a_check_as_rspamds_proxy_sends_it(served, corpus):
    mail = corpus[650]
    envelope = {"Queue-ID": "4XyZ", "IP": "192.0.2.7", "From": "a@example.org",
                "Rcpt": "b@example.org", "Helo": "mx.example.org", "Hostname": "mx",
                "Flags": "milter,body_block", "Deliver-To": "b@example.org"}
    by_get = served.check(mail.raw, method="GET", **envelope)
    by_post = served.check(mail.raw)
    assert by_get["streamnb"]["log_probabilities"] == by_post["streamnb"]["log_probabilities"]
    assert by_get["streamnb"]["user"] == "b@example.org"
    header = by_get["milter"]["add_headers"]["X-Streamnb"]["value"]
    assert header.startswith(by_get["streamnb"]["label"] + "; score=")


def test_chunked_and_zstd_compressed_bodies(served, corpus):
    mail = corpus[610].raw
    expected = served.check(mail)["streamnb"]["log_probabilities"]
    chunks = (mail[i:i + 1000] for i in range(0, len(mail), 1000))
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    connection.request("POST", "/checkv2", body=chunks, encode_chunked=True)
    chunked = orjson.loads(connection.getresponse().read())
    connection.close()
    assert chunked["streamnb"]["log_probabilities"] == expected
    compressed = zstandard.ZstdCompressor().compress(mail)
    reply = served.check(compressed, Compression="zstd")
    assert reply["streamnb"]["log_probabilities"] == expected
    status, body = served.request("POST", "/checkv2", b"not zstd", {"Compression": "zstd"})
    assert status == 400 and b"zstd" in body


def test_learns_need_the_password(served, corpus):
    mail = corpus[620].raw
    before = len(served.learner.records)
    failures = served.sample("streamnb_http_auth_failures_total") or 0
    for headers in ({}, {"Password": "wrong"}, {"Password": PASSWORD + "x"}):
        status, body = served.request("POST", "/learnspam", mail, headers)
        assert status == 403 and b"Password" in body
    assert len(served.learner.records) == before
    assert served.sample("streamnb_http_auth_failures_total") == failures + 3
    status, body = served.request("POST", "/learnspam", mail, {"Password": PASSWORD})
    assert status == 200 and orjson.loads(body) == {
        "success": True, "message-id": message_id(mail), "class": "spam"}
    assert served.learner.records[-1] == (message_id(mail), learn_record(
        message_id(mail), mail, "spam", 1 << 20))
    assert served.sample("streamnb_http_learns_total",
                         {"class": "spam", "outcome": "acknowledged"}) >= 1


def test_learn_ham_and_learn_class(served, corpus):
    mail = corpus[621].raw
    status, _ = served.request("POST", "/learnham", mail, {"Password": PASSWORD})
    assert status == 200
    assert orjson.loads(served.learner.records[-1][1])["label"] == "ham"
    status, _ = served.request("POST", "/learnclass", mail,
                               {"Password": PASSWORD, "Class": "spam"})
    assert status == 200
    assert orjson.loads(served.learner.records[-1][1])["label"] == "spam"
    status, body = served.request("POST", "/learnclass", mail, {"Password": PASSWORD})
    assert status == 400 and b"Class" in body
    status, body = served.request("POST", "/learnclass", mail,
                                  {"Password": PASSWORD, "Class": "promo"})
    assert status == 400 and b"model.labels" in body


def test_no_password_configured_means_no_learning(corpus):
    front = Served(corpus[:20], password="")
    try:
        status, body = front.request("POST", "/learnham", corpus[30].raw, {"Password": ""})
        assert status == 403 and b"STREAMNB_HTTP__PASSWORD" in body
        assert front.learner.records == []
    finally:
        front.server.stop()


def test_bad_requests_get_clear_errors_and_the_server_goes_on(served, corpus):
    status, body = served.request("POST", "/checkv2", b"")
    assert status == 400 and b"no message" in body
    status, _ = served.request("POST", "/nothing", b"x")
    assert status == 404
    status, _ = served.request("DELETE", "/checkv2")
    assert status == 405
    # Not mail at all still gets a verdict: the featurizer reads what it can.
    for junk in (b"\x00\xff" * 100, b"no headers, just text", bytes(range(256)) * 10):
        assert served.check(junk)["action"] in ("no action", "add header")
    assert served.check(corpus[640].raw)["action"] in ("no action", "add header")


def test_too_large_bodies_are_refused_with_413(corpus):
    front = Served(corpus[:20], max_body_bytes=5000)
    try:
        big = corpus[30].raw + b"x" * 6000
        status, body = front.request("POST", "/checkv2", big)
        assert status == 413 and b"http.max_body_bytes" in body
        chunks = (big[i:i + 1000] for i in range(0, len(big), 1000))
        connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
        connection.request("POST", "/checkv2", body=chunks, encode_chunked=True)
        assert connection.getresponse().status == 413  # no Content-Length to go by
        connection.close()
        assert front.request("GET", "/ping")[0] == 200
    finally:
        front.server.stop()


def test_a_learn_too_large_for_the_input_topic_is_refused(corpus):
    front = Served(corpus[:20], learner=MemoryLearner(max_value_bytes=500))
    try:
        status, body = front.request("POST", "/learnspam", corpus[30].raw,
                                     {"Password": PASSWORD})
        assert status == 413 and b"limits.max_value_bytes" in body
    finally:
        front.server.stop()
    with pytest.raises(LearnTooLarge):
        learn_record("m", b"x" * 1000, "spam", 500)


def test_too_many_headers_are_refused(served):
    headers = {f"X-H{i}": "v" for i in range(150)}
    status, _ = served.request("POST", "/checkv2", b"Subject: x\n\nhi", headers)
    assert status == 400
    assert served.request("GET", "/ping") == (200, b"pong\r\n")


def test_a_slow_client_gets_408_and_holds_nothing(corpus):
    front = Served(corpus[:20], request_timeout_seconds=0.5)
    try:
        slow = socket.create_connection(("127.0.0.1", front.port))
        slow.sendall(b"POST /checkv2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nSub")
        started = time.monotonic()
        # Meanwhile others are answered at once.
        assert front.request("GET", "/ping")[0] == 200
        slow.settimeout(5)
        reply = slow.recv(1000)
        assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 3
        slow.close()
    finally:
        front.server.stop()


def test_a_connection_without_a_whole_request_is_closed_after_keepalive_seconds(corpus):
    front = Served(corpus[:20], keepalive_seconds=1.0)
    try:
        for sent in (b"", b"POST /checkv2 HTTP/1.1\r\nHost: x\r\n"):
            idle = socket.create_connection(("127.0.0.1", front.port))
            idle.sendall(sent)
            idle.settimeout(10)
            started = time.monotonic()
            assert idle.recv(100) == b""  # closed by the server
            assert time.monotonic() - started < 5
            idle.close()
    finally:
        front.server.stop()


def test_past_max_in_flight_requests_get_503_not_a_queue(corpus):
    """Two learns waiting for Kafka's acknowledgement fill max_in_flight = 2: a third
    request is refused at once, and answered again once they are done."""
    front = Served(corpus[:20], max_in_flight=2, learner=MemoryLearner(delay=1.0))
    results: list[int] = []
    try:
        threads = [threading.Thread(target=lambda: results.append(front.request(
            "POST", "/learnham", corpus[30].raw, {"Password": PASSWORD})[0]))
            for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        status, body = front.request("POST", "/checkv2", corpus[31].raw)
        assert status == 503 and b"max_in_flight" in body
        for thread in threads:
            thread.join()
        assert results == [200, 200]
        assert front.sample("streamnb_http_overloaded_total") == 1
        assert front.request("POST", "/checkv2", corpus[31].raw)[0] == 200
    finally:
        front.server.stop()


def test_checks_wait_off_the_event_loop_while_the_kafka_loop_holds_the_model(served, corpus):
    """While the model's lock is held elsewhere a check waits for it in a worker thread; pings
    are answered meanwhile."""
    mail = corpus[660].raw
    replies: list[dict] = []
    with _held(served.lock):
        thread = threading.Thread(target=lambda: replies.append(served.check(mail)))
        thread.start()
        time.sleep(0.3)
        assert not replies
        assert served.request("GET", "/ping")[0] == 200
    thread.join(10)
    assert replies and replies[0]["streamnb"]["model_updates"] == 600


class _held:
    """Hold ``lock`` from another thread, as the Kafka loop holds the model's."""

    def __init__(self, lock):
        self.lock, self.acquired, self.done = lock, threading.Event(), threading.Event()

    def _hold(self):
        with self.lock:
            self.acquired.set()
            self.done.wait(10)

    def __enter__(self):
        self.thread = threading.Thread(target=self._hold)
        self.thread.start()
        self.acquired.wait(5)
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def test_a_scorer_failure_is_a_500_and_the_server_goes_on(served, corpus, monkeypatch):
    def broken(raw):
        raise RuntimeError("boom")

    monkeypatch.setattr(served.front.scorer, "prepare", broken)
    status, body = served.request("POST", "/checkv2", corpus[0].raw)
    assert status == 500 and b"internal error" in body
    monkeypatch.undo()
    assert served.check(corpus[0].raw)["action"]


def test_ping_stat_and_metrics(served, corpus):
    assert served.request("GET", "/ping") == (200, b"pong\r\n")
    status, body = served.request("GET", "/stat")
    stat = orjson.loads(body)
    assert status == 200 and stat["learned"] == 600 and stat["scanned"] >= 1
    assert sum(stat["actions"].values()) == stat["scanned"]
    checks = sum(served.sample("streamnb_http_checks_total", {"action": a}) or 0
                 for a in stat["actions"])
    assert checks == stat["scanned"]
    assert served.sample("streamnb_http_check_seconds_count") == stat["scanned"]
    assert served.sample("streamnb_http_requests_total",
                         {"endpoint": "ping", "code": "200"}) >= 1


def test_tls_when_a_certificate_is_configured(tmp_path, corpus):
    """Anything but loopback needs TLS: the same endpoints over https with the configured
    certificate, and no plain HTTP on that port."""
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.fail("openssl not found: scripts/install-system-deps.sh installs it")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    front = Served(corpus[:50], tls_certfile=cert, tls_keyfile=key)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        connection = http.client.HTTPSConnection("127.0.0.1", front.port, context=context,
                                                 timeout=10)
        connection.request("POST", "/checkv2", body=corpus[60].raw)
        reply = orjson.loads(connection.getresponse().read())
        connection.close()
        assert reply["action"] in ("add header", "no action")
        assert reply["streamnb"]["model_updates"] == 50
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            front.request("GET", "/ping")  # plain HTTP to a TLS port
    finally:
        front.server.stop()


def test_a_forged_verdict_header_does_not_move_the_verdict(served, corpus):
    """The milter proxy scores the mail before it removes the mail's own X-Streamnb and
    X-Spam: the featurizer reads the mail as if they were absent."""
    for mail in corpus[670:690]:
        honest = served.check(mail.raw)["streamnb"]["log_probabilities"]
        for forged in (b"X-Streamnb: ham; score=-99.000 forged\r\n",
                       b"X-Spam: No\r\nX-Streamnb: spam; score=99.000\r\n  folded\r\n"):
            assert served.check(forged + mail.raw)["streamnb"]["log_probabilities"] == honest
