"""The daemon's output producer in its child process, against the real local broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamnb.daemon.kafka_io import KafkaDeliveryError, ProducerProcess, create_topics, read_all
from tests.integration.harness import REPO, DaemonProcess, wait_for, write_config
from tests.processes import running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_records_arrive_in_order_once_flush_returns(kafka_bootstrap, topic_prefix):
    topic = f"{topic_prefix}-out"
    create_topics(kafka_bootstrap, {topic: 1})
    producer = ProducerProcess({"bootstrap_servers": kafka_bootstrap, "linger_ms": 5})
    try:
        for i in range(300):
            producer.send(topic, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")])
            if i % 100 == 99:
                producer.push()  # as the daemon does after each batch
        producer.flush(30)
    finally:
        producer.close(5)
    records = read_all(kafka_bootstrap, topic, until=lambda r: len(r) >= 300, timeout=30)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(300)]
    assert all(r.headers == (("h", b"x"),) for r in records)


def test_a_dead_producer_process_fails_the_next_flush(kafka_bootstrap, topic_prefix):
    producer = ProducerProcess({"bootstrap_servers": kafka_bootstrap})
    try:
        os.kill(producer._process.pid, signal.SIGKILL)
        producer._process.join(10)
        producer.send(f"{topic_prefix}-out", None, b"lost")
        with pytest.raises(KafkaDeliveryError, match="producer process"):
            producer.flush(5)
    finally:
        producer.close(1)


def _spawned_children(pid: int) -> list[int]:
    """Child processes started by multiprocessing's spawn (not its resource tracker)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we looked
        if parent == pid and b"spawn_main" in cmdline:
            children.append(int(stat.parent.name))
    return children


def test_the_producer_process_ignores_sigterm_and_ends_with_a_killed_daemon(
    tmp_path, kafka_bootstrap, topic_prefix
):
    create_topics(kafka_bootstrap, {f"{topic_prefix}-{s}": 1 for s in ("in", "out", "dlq")})
    daemon = DaemonProcess(write_config(tmp_path, kafka_bootstrap, topic_prefix),
                           tmp_path / "daemon.log")
    daemon.wait_assigned()
    children = _spawned_children(daemon.proc.pid)
    assert children, "the daemon runs no producer process"
    child = children[0]
    os.kill(child, signal.SIGTERM)  # a supervisor signalling the whole process group
    time.sleep(0.5)  # long enough for a default SIGTERM handler to have ended it
    assert running(child), "the producer process ended on SIGTERM instead of its daemon"
    daemon.kill()
    wait_for(lambda: not running(child), 10,
             "the producer process to end after its daemon was killed")


def test_a_program_that_never_closes_its_producer_process_still_exits(
    tmp_path, kafka_bootstrap, topic_prefix
):
    # multiprocessing joins its children at exit, and the child ignores SIGTERM: without its
    # pipe closed at exit, a daemon that failed after starting the child would hang here.
    script = tmp_path / "forget.py"
    script.write_text(
        "from streamnb.daemon.kafka_io import ProducerProcess\n"
        "if __name__ == '__main__':\n"
        f"    producer = ProducerProcess({{'bootstrap_servers': {kafka_bootstrap!r}}})\n"
        f"    producer.send({topic_prefix + '-out'!r}, None, b'x')\n"
        "    producer.push()\n"
        "    raise SystemExit(5)\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 5
