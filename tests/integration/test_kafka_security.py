"""The daemon against the project's own broker with a SASL_SSL listener and an SSL listener
that requires a client certificate (``scripts/kafka.sh`` with ``STREAMNB_KAFKA_SASL_SSL_PORT``
and ``STREAMNB_KAFKA_SSL_PORT``): certificates made at start with keytool (and openssl, for the
client's key as PEM), a user created for PLAIN and, with the broker's storage tool, for
SCRAM-SHA-256/512.

The secured broker is a second one, on the test broker's port + 2 (PLAINTEXT, which the test
tools use to create topics and produce), + 3 (its controller), + 4 (SASL_SSL) and + 5 (SSL with
client certificates). It is started for this module and stopped after it.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from streamnb.daemon.kafka_io import create_topics, produce, read_all
from tests.conftest import KAFKA_BOOTSTRAP
from tests.integration.harness import REPO, DaemonProcess, sms, value, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

BASE_PORT = int(KAFKA_BOOTSTRAP.rsplit(":", 1)[1])
PLAIN_PORT, SASL_SSL_PORT, SSL_PORT = BASE_PORT + 2, BASE_PORT + 4, BASE_PORT + 5
USER = "streamnb-test"


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


class SecuredBroker:
    def __init__(self, run: Path, password: str):
        self.run = run
        self.password = password
        self.env = {
            **os.environ,
            "STREAMNB_KAFKA_PORT": str(PLAIN_PORT),
            "STREAMNB_KAFKA_SASL_SSL_PORT": str(SASL_SSL_PORT),
            "STREAMNB_KAFKA_SSL_PORT": str(SSL_PORT),
            "STREAMNB_KAFKA_SASL_USER": USER,
            "STREAMNB_KAFKA_SASL_PASSWORD": password,
            "STREAMNB_KAFKA_RUN": str(run),
            "STREAMNB_KAFKA_HEAP": "256m",
        }
        self.plain = f"127.0.0.1:{PLAIN_PORT}"
        self.secured = f"127.0.0.1:{SASL_SSL_PORT}"
        self.mutual_tls = f"127.0.0.1:{SSL_PORT}"
        self.ca = run / "tls" / "ca.pem"
        self.client_cert = run / "tls" / "client.pem"
        self.client_key = run / "tls" / "client.key"

    def script(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(REPO / "scripts" / "kafka.sh"), command], env=self.env,
                              capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> SecuredBroker:
    for port in (PLAIN_PORT, PLAIN_PORT + 1, SASL_SSL_PORT, SSL_PORT):
        if answers(port):
            pytest.fail(f"port {port} is taken: the secured test broker needs ports "
                        f"{PLAIN_PORT}-{SSL_PORT} (set STREAMNB_KAFKA_PORT elsewhere)")
    broker = SecuredBroker(tmp_path_factory.mktemp("secured-kafka"), secrets.token_hex(12))
    started = broker.script("start")
    if started.returncode != 0:
        pytest.fail(f"the secured broker did not start:\n{started.stderr[-3000:]}")
    try:
        deadline = time.monotonic() + 60
        while not (answers(SASL_SSL_PORT) and answers(SSL_PORT)):
            assert time.monotonic() < deadline, "the secured listeners never opened"
            time.sleep(0.2)
        yield broker
    finally:
        broker.script("stop")


def secured_config(tmp_path: Path, broker: SecuredBroker, prefix: str, mechanism: str,
                   extra: str = "") -> Path:
    security = (
        f'security_protocol = "SASL_SSL"\nsasl_mechanism = "{mechanism}"\n'
        f'sasl_username = "{USER}"\nssl_cafile = "{broker.ca}"\n'
        f"startup_timeout_seconds = 5.0\n{extra}"
    )
    path = write_config(tmp_path, broker.secured, prefix)
    text = path.read_text().replace("[kafka]\n", f"[kafka]\n{security}", 1)
    path.write_text(text)
    return path


def run_cli(config: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_a_wrong_password_fails_at_start_with_one_line(tmp_path, broker, topic_prefix, mechanism):
    config = secured_config(tmp_path, broker, topic_prefix, mechanism)
    result, elapsed = run_cli(config, {"STREAMNB_KAFKA__SASL_PASSWORD": "not-the-password"})
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert len(output.splitlines()) == 1, output
    assert output.startswith("streamnb: kafka.sasl_username: ")
    assert f"refused the {mechanism} login of '{USER}'" in output
    assert "not-the-password" not in output
    assert elapsed < 15


def test_an_untrusted_certificate_is_named(tmp_path, broker, topic_prefix):
    config = secured_config(tmp_path, broker, topic_prefix, "SCRAM-SHA-512")
    config.write_text(config.read_text().replace(f'ssl_cafile = "{broker.ca}"\n', ""))
    result, elapsed = run_cli(config, {"STREAMNB_KAFKA__SASL_PASSWORD": broker.password})
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert len(output.splitlines()) == 1, output
    assert output.startswith("streamnb: kafka.ssl_cafile: ") and "not trusted" in output
    assert elapsed < 15


def predict_through(tmp_path, broker, prefix, config, rows, unlabelled, env=None):
    """Start a daemon on `config`, produce `rows` over the plain listener (the ids in
    `unlabelled` without their label) and return the daemon and its predictions, checked to be
    one for each unlabelled id."""
    daemon = DaemonProcess(config, tmp_path / "daemon.log", env=env)
    daemon.wait_assigned(timeout=60)
    produce(broker.plain, f"{prefix}-in", (
        (msg_id.encode(), value(msg_id, text, None if msg_id in unlabelled else label))
        for msg_id, label, text in rows
    ))
    out = read_all(broker.plain, f"{prefix}-out",
                   until=lambda r: len(r) >= len(unlabelled), timeout=120)
    assert sorted(r.key.decode() for r in out) == sorted(unlabelled)
    return daemon, out


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_the_sms_stream_end_to_end_over_sasl_ssl(
    tmp_path, broker, topic_prefix, data_dir, mechanism
):
    rows = sms(data_dir)[:800]
    rng = random.Random(14)
    unlabelled = {msg_id for msg_id, _, _ in rows if rng.random() < 0.2}
    create_topics(broker.plain, {f"{topic_prefix}-{t}": 1 for t in ("in", "out", "dlq")})
    # SCRAM-SHA-512 reads the password from a file, the others from the environment.
    env, extra = {"STREAMNB_KAFKA__SASL_PASSWORD": broker.password}, ""
    if mechanism == "SCRAM-SHA-512":
        (tmp_path / "kafka-password").write_text(broker.password + "\n")
        env, extra = {}, f'sasl_password_file = "{tmp_path / "kafka-password"}"\n'
    config = secured_config(tmp_path, broker, topic_prefix, mechanism, extra)
    daemon, out = predict_through(tmp_path, broker, topic_prefix, config, rows, unlabelled, env)
    truth = {msg_id: label for msg_id, label, _ in rows}
    correct = sum(orjson.loads(r.value)["label"] == truth[r.key.decode()] for r in out)
    assert correct / len(out) > 0.8  # a model that learned from the labelled SMS
    assert daemon.terminate()[0] == 0
    assert broker.password not in (tmp_path / "daemon.log").read_text()


def tls_config(tmp_path: Path, broker: SecuredBroker, prefix: str, client_files: str) -> Path:
    path = write_config(tmp_path, broker.mutual_tls, prefix)
    security = (f'security_protocol = "SSL"\nssl_cafile = "{broker.ca}"\n'
                f"startup_timeout_seconds = 5.0\n{client_files}")
    path.write_text(path.read_text().replace("[kafka]\n", f"[kafka]\n{security}", 1))
    return path


def test_ssl_with_a_client_certificate_end_to_end(tmp_path, broker, topic_prefix, data_dir):
    rows = sms(data_dir)[:300]
    unlabelled = {msg_id for i, (msg_id, _, _) in enumerate(rows) if i % 5 == 0}
    create_topics(broker.plain, {f"{topic_prefix}-{t}": 1 for t in ("in", "out", "dlq")})
    config = tls_config(tmp_path, broker, topic_prefix,
                        f'ssl_certfile = "{broker.client_cert}"\n'
                        f'ssl_keyfile = "{broker.client_key}"\n')
    daemon, _ = predict_through(tmp_path, broker, topic_prefix, config, rows, unlabelled)
    assert daemon.terminate()[0] == 0


@pytest.mark.parametrize(
    ("client_files", "key"),
    [
        ("", "kafka.ssl_certfile: "),  # the listener requires one
        ('ssl_certfile = "{ca}"\nssl_keyfile = "{key}"\n', "kafka.ssl_keyfile: "),
    ],
    ids=["no-client-certificate", "key-of-another-certificate"],
)
def test_a_refused_or_broken_client_certificate_is_named(
    tmp_path, broker, topic_prefix, client_files, key
):
    files = client_files.format(ca=broker.ca, key=broker.client_key)
    config = tls_config(tmp_path, broker, topic_prefix, files)
    result, elapsed = run_cli(config, {})
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert len(output.splitlines()) == 1, output
    assert output.startswith(f"streamnb: {key}")
    assert elapsed < 15


@pytest.mark.parametrize("check_hostname", [True, False])
def test_hostname_checking_follows_ssl_check_hostname(
    tmp_path, broker, topic_prefix, check_hostname
):
    """The broker's certificate names 127.0.0.1 only; "localhost" reaches the same listener."""
    create_topics(broker.plain, {f"{topic_prefix}-{t}": 1 for t in ("in", "out", "dlq")})
    config = secured_config(tmp_path, broker, topic_prefix, "SCRAM-SHA-256",
                            f"ssl_check_hostname = {str(check_hostname).lower()}\n")
    config.write_text(config.read_text().replace(
        f'bootstrap_servers = "{broker.secured}"',
        f'bootstrap_servers = "localhost:{SASL_SSL_PORT}"'))
    env = {"STREAMNB_KAFKA__SASL_PASSWORD": broker.password}
    if check_hostname:
        result, elapsed = run_cli(config, env)
        output = (result.stdout + result.stderr).strip()
        assert result.returncode == 2, output
        assert len(output.splitlines()) == 1, output
        assert output.startswith("streamnb: kafka.ssl_cafile: ") and "ssl_check_hostname" in output
        assert elapsed < 15
    else:
        daemon = DaemonProcess(config, tmp_path / "daemon.log", env=env)
        daemon.wait_assigned(timeout=60)
        assert daemon.terminate()[0] == 0
