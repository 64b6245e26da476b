"""The front door with the real daemon, the real broker and rspamd's own client, ``rspamc``
(Debian's ``rspamd`` package; scripts/install-system-deps.sh installs it)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request

import orjson
import pytest

from streamnb.daemon.kafka_io import create_topics, produce, read_all
from streamnb.evaluation.corpora import read_corpus
from tests.integration.harness import REPO, DaemonProcess, wait_for, write_config
from tests.processes import running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PASSWORD = "learn-me"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rspamc(port: int, *args: str) -> str:
    if shutil.which("rspamc") is None:
        pytest.fail("rspamc not found: scripts/install-system-deps.sh installs Debian's rspamd")
    done = subprocess.run(["rspamc", "-h", f"127.0.0.1:{port}", "-t", "20", *args],
                          capture_output=True, timeout=120, check=False)
    return done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")


def http_json(port: int, path: str, body: bytes | None = None) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body)
    with urllib.request.urlopen(request, timeout=20) as reply:
        return orjson.loads(reply.read())


def learned(port: int) -> int:
    return http_json(port, "/stat")["learned"]


def score_of(output: str) -> float:
    return float(re.search(r"^Score: (-?[\d.]+) /", output, re.M).group(1))


@pytest.fixture(params=[1, 0], ids=["scorer-process", "in-daemon"])
def served(request, tmp_path, kafka_bootstrap, topic_prefix):
    """A daemon with its front door: served by a scorer process it starts (the default) or
    by a thread of its own (``http.scorers = 0``)."""
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 2, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix,
                          extra=f"[http]\nport = {port}\nscorers = {request.param}\n")
    daemon = DaemonProcess(config, tmp_path / "daemon.log",
                           env={"STREAMNB_HTTP__PASSWORD": PASSWORD})
    daemon.wait_assigned()
    assert any(e.get("event") == "http_serving" and e.get("port") == port
               for e in daemon.events())
    yield daemon, port
    if daemon.proc.poll() is None:  # a test may have killed it
        code, _ = daemon.terminate()
        assert code == 0


def test_rspamc_learns_and_checks_through_the_daemon(served, tmp_path, data_dir):
    daemon, port = served
    mails = read_corpus(data_dir / "spamassassin", shuffle=7, limit=400).messages
    train, probes = mails[:240], mails[240:]
    for label in ("spam", "ham"):
        folder = tmp_path / f"learn-{label}"
        folder.mkdir()
        for i, mail in enumerate(m for m in train if m.label == label):
            (folder / f"{i}.eml").write_bytes(mail.raw)
        out = rspamc(port, "-P", PASSWORD, f"learn_{label}", str(folder))
        assert out.count("success = true") == len(list(folder.iterdir())), out
    wait_for(lambda: learned(port) == len(train), 30, "the learns to be learned")

    # rspamc shows the verdict: on mail it has not seen, spam is "add header", ham "no action".
    right = 0
    for mail in probes[:60]:
        path = tmp_path / "probe.eml"
        path.write_bytes(mail.raw)
        out = rspamc(port, "symbols", str(path))
        action = re.search(r"^Action: (.+)$", out, re.M).group(1)
        assert action in ("add header", "no action"), out
        assert ("BAYES_SPAM" in out) == (action == "add header")
        right += (action == "add header") == (mail.label == "spam")
    assert right >= 54, f"{right} of 60 right"

    # A learn without the password, or with a wrong one, is refused and learns nothing.
    probe = next(m for m in probes[60:] if m.label == "ham")
    path = tmp_path / "probe.eml"
    path.write_bytes(probe.raw)
    for args in (("-P", "wrong"), ()):
        assert "403" in rspamc(port, *args, "learn_spam", str(path))
    before = score_of(rspamc(port, "symbols", str(path)))

    # Learned as spam, the probe scores higher after the next commit; the same learn again
    # counts once; learned as ham it is a correction, not a second message.
    for _ in range(2):
        assert "success = true" in rspamc(port, "-P", PASSWORD, "learn_spam", str(path))
    wait_for(lambda: learned(port) == len(train) + 1, 30, "the probe's learn")
    as_spam = score_of(rspamc(port, "symbols", str(path)))
    assert as_spam > before
    assert "success = true" in rspamc(port, "-P", PASSWORD, "learn_ham", str(path))
    wait_for(lambda: score_of(rspamc(port, "symbols", str(path))) < as_spam, 30,
             "the correction to be learned")
    assert learned(port) == len(train) + 1
    relabelled = [e for e in daemon.events() if e.get("event") == "dead_letter"]
    assert relabelled == []


def test_a_check_and_the_output_topic_give_the_same_probabilities(served, tmp_path, data_dir,
                                                                  kafka_bootstrap,
                                                                  topic_prefix):
    daemon, port = served
    mails = read_corpus(data_dir / "spamassassin", shuffle=11, limit=260).messages
    train, probes = mails[:200], mails[200:]
    produce(kafka_bootstrap, f"{topic_prefix}-in", (
        (f"m{i}".encode(), orjson.dumps({"id": f"m{i}", "label": mail.label,
                                         "raw_b64": base64.b64encode(mail.raw).decode()}))
        for i, mail in enumerate(train)))
    wait_for(lambda: learned(port) == len(train), 60, "the training mail to be learned")

    checked = {f"p{i}": http_json(port, "/checkv2", mail.raw)
               for i, mail in enumerate(probes)}
    produce(kafka_bootstrap, f"{topic_prefix}-in", (
        (mid.encode(), orjson.dumps({"id": mid, "raw_b64": base64.b64encode(mail.raw).decode()}))
        for mid, mail in zip(checked, probes, strict=True)))
    records = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                       until=lambda r: len(r) >= len(probes))
    predictions = {p["id"]: p for p in map(orjson.loads, (r.value for r in records))}
    assert set(predictions) == set(checked)
    spam_seen = 0
    for mid, reply in checked.items():
        prediction, ours = predictions[mid], reply["streamnb"]
        assert prediction["model_updates"] == ours["model_updates"] == len(train)
        assert prediction["label"] == ours["label"]
        # The output topic's come from the batch step, a check's from predict_log_proba_one:
        # the same to rounding, as the project holds the two paths (docs/models.md).
        assert set(prediction["log_probabilities"]) == set(ours["log_probabilities"])
        scale = max(1.0, *(abs(lp) for lp in ours["log_probabilities"].values()))
        for label, lp in ours["log_probabilities"].items():
            assert prediction["log_probabilities"][label] == pytest.approx(lp, abs=1e-11 * scale)
            assert prediction["probabilities"][label] == pytest.approx(
                ours["probabilities"][label], rel=1e-9, abs=1e-300)
        spam_seen += reply["action"] == "add header"
    assert 0 < spam_seen < len(probes)


@pytest.mark.parametrize("served", [0], indirect=True, ids=["in-daemon"])
def test_a_standby_scorer_answers_with_the_groups_model(served, tmp_path, data_dir):
    """``streamnb serve`` joins no group: it reads the changelogs, follows them, and its
    learns reach the group through the input topic."""
    daemon, daemon_port = served
    mails = read_corpus(data_dir / "spamassassin", shuffle=5, limit=140).messages
    for mail in mails[:100]:
        status = urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{daemon_port}/learn{mail.label}", data=mail.raw,
            headers={"Password": PASSWORD}), timeout=20).status
        assert status == 200
    wait_for(lambda: learned(daemon_port) == 100, 30, "the daemon to learn")

    port = free_port()
    log = open(tmp_path / "standby.log", "wb")  # noqa: SIM115 - closed below
    standby = subprocess.Popen(
        [sys.executable, "-m", "streamnb", "serve", "--config", str(daemon.config)],
        cwd=REPO, stdout=log, stderr=log,
        env={**os.environ, "PYTHONPATH": str(REPO), "STREAMNB_HTTP__PORT": str(port),
             "STREAMNB_HTTP__PASSWORD": PASSWORD})
    try:
        wait_for(lambda: _answers(port), 30, "the standby to serve")
        assert learned(port) == 100
        for mail in mails[100:120]:
            ours = http_json(port, "/checkv2", mail.raw)["streamnb"]
            theirs = http_json(daemon_port, "/checkv2", mail.raw)["streamnb"]
            assert ours["log_probabilities"] == theirs["log_probabilities"]
        # A learn sent to the standby is learned by the group, and followed back.
        for i, mail in enumerate(mails[120:140]):
            path = tmp_path / f"s{i}.eml"
            path.write_bytes(mail.raw)
            assert "success = true" in rspamc(port, "-P", PASSWORD, f"learn_{mail.label}",
                                              str(path))
        wait_for(lambda: learned(daemon_port) == 120, 30, "the group to learn the standby's")
        wait_for(lambda: learned(port) == 120, 30, "the standby to follow the changelog")
        standby.send_signal(signal.SIGTERM)
        assert standby.wait(timeout=15) == 0
    finally:
        if standby.poll() is None:
            standby.kill()
        log.close()


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.mark.parametrize("served", [1], indirect=True, ids=["scorer-process"])
def test_a_scorer_that_dies_is_started_again(served, data_dir):
    """kill -9 of the daemon's scorer process: the daemon logs it and starts another, which
    serves the same model; the daemon itself goes on."""
    daemon, port = served
    started = next(e for e in daemon.events() if e.get("event") == "started")
    pid = int(re.search(r"scorer process pid (\d+)", started["message"]).group(1))
    mail = read_corpus(data_dir / "spamassassin", shuffle=3, limit=1).messages[0]
    before = http_json(port, "/checkv2", mail.raw)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: any(e.get("event") == "scorer_exited" for e in daemon.events()), 20,
             "the daemon to notice its scorer's exit")
    wait_for(lambda: _answers(port), 60, "a new scorer to serve")
    after = http_json(port, "/checkv2", mail.raw)
    assert after["streamnb"]["log_probabilities"] == before["streamnb"]["log_probabilities"]
    daemon._check_alive()


@pytest.mark.parametrize("served", [1], indirect=True, ids=["scorer-process"])
def test_a_scorer_goes_when_its_daemon_is_killed(served):
    """kill -9 of the daemon leaves no one to stop its scorer: the scorer stops itself, so a
    restarted daemon's scorers are the only ones on the port."""
    daemon, port = served
    started = next(e for e in daemon.events() if e.get("event") == "started")
    pid = int(re.search(r"scorer process pid (\d+)", started["message"]).group(1))
    daemon.kill()
    wait_for(lambda: not running(pid), 20, "the scorer to stop after its daemon")
    assert not _answers(port)
