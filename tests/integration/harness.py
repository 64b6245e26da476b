"""Run ``python -m streamnb run`` as a subprocess against the real broker, and watch it.

Conditions are polled with timeouts (never a blind sleep): the daemon's log says when it has
its partitions, and the group's committed offsets say how far it has read.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

from streamnb.daemon.kafka_io import (
    committed_offsets,
    create_topics,
    end_offsets,
    produce,
    read_all,
)

REPO = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], object], timeout: float, what: str, every: float = 0.05):
    """Poll ``condition`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def write_config(
    directory: Path,
    bootstrap: str,
    prefix: str,
    *,
    kind: str = "multinomial",
    labels: tuple[str, ...] = ("ham", "spam"),
    every_messages: int = 1000,
    every_seconds: float = 0.5,
    max_ids: int = 100_000,
    extra: str = "",
    member: str = "member",
    assignment_strategy: str = "range",
    stall_seconds: float = 20.0,
) -> Path:
    """A config for one test: its own topics, group and static member id."""
    path = directory / "config.toml"
    label_list = ", ".join(f'"{label}"' for label in labels)
    path.write_text(
        f"""
[kafka]
bootstrap_servers = "{bootstrap}"
input_topics = ["{prefix}-in"]
output_topic = "{prefix}-out"
dead_letter_topic = "{prefix}-dlq"
group_id = "{prefix}-group"
group_instance_id = "{prefix}-{member}"
assignment_strategy = "{assignment_strategy}"
session_timeout_ms = 6000
poll_timeout_ms = 100
stall_seconds = {stall_seconds}

[model]
kind = "{kind}"
labels = [{label_list}]

[checkpoint]
every_messages = {every_messages}
every_seconds = {every_seconds}

[feedback]
max_ids = {max_ids}

[metrics]
port = 0

[logging]
format = "json"
{extra}
""",
        encoding="utf-8",
    )
    return path


class DaemonProcess:
    """One ``python -m streamnb run --config ...`` subprocess, logging JSON to a file."""

    #: Every daemon started, so a failed test's fixture can still stop them.
    started: list[DaemonProcess] = []

    #: Exit code of a daemon that found its Kafka client stalled (see PollWatchdog).
    STALLED = 3

    def __init__(self, config: Path, log: Path, max_restarts: int = 2,
                 env: dict[str, str] | None = None):
        DaemonProcess.started.append(self)
        self.config = config
        self.env = dict(env or {})  # added to this process's environment
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - closed in terminate()/kill()
        self.restarts = 0
        self.max_restarts = max_restarts
        self._stopping = False
        self.proc = self._launch()
        # Like the supervisor a deployment runs it under: restart after a stall (exit 3).
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()

    def _launch(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.env}
        return subprocess.Popen(
            [sys.executable, "-m", "streamnb", "run", "--config", str(self.config)],
            cwd=REPO,
            stdout=self._log,
            stderr=self._log,
            env=env,
        )

    def _supervise(self) -> None:
        while True:
            code = self.proc.wait()
            if self._stopping or code != self.STALLED or self.restarts >= self.max_restarts:
                return
            self.restarts += 1
            self.proc = self._launch()

    def events(self) -> list[dict]:
        return self.events_of(self.log_path)

    @staticmethod
    def events_of(log_path: Path) -> list[dict]:
        out = []
        for line in log_path.read_bytes().splitlines():
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def wait_assigned(self, timeout: float = 30.0) -> None:
        def assigned():
            self._check_alive()
            return any(e.get("event") == "assigned" and e.get("partitions")
                       for e in self.events())

        wait_for(assigned, timeout, "the daemon to get its partitions")

    def _check_alive(self) -> None:
        if self.proc.poll() is not None and not (
            self.proc.returncode == self.STALLED and self.restarts < self.max_restarts
        ):
            raise AssertionError(
                f"daemon exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}"
            )

    def terminate(self, timeout: float = 10.0) -> tuple[int, float]:
        """SIGTERM; returns (exit code, seconds it took to exit)."""
        started = time.monotonic()
        self._stopping = True
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        return code, time.monotonic() - started

    def kill(self) -> None:
        self._stopping = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    @classmethod
    def kill_leftovers(cls) -> None:
        while cls.started:
            daemon = cls.started.pop()
            if daemon.proc.poll() is None:
                daemon.kill()


def committed(bootstrap: str, prefix: str) -> dict[str, int]:
    """The input offsets the test's group has committed (with the state, in transactions)."""
    offsets = committed_offsets(bootstrap, f"{prefix}-group", f"{prefix}-in")
    return {f"{t}:{p}": offset for (t, p), offset in offsets.items()}


def wait_caught_up(bootstrap: str, prefix: str, daemons, timeout: float = 60.0) -> None:
    """Until the group has committed every input partition up to its current end."""
    ends = end_offsets(bootstrap, f"{prefix}-in")
    want = {f"{t}:{p}": off for (t, p), off in ends.items() if off > 0}
    daemons = daemons if isinstance(daemons, list | tuple) else [daemons]

    def done():
        for daemon in daemons:
            daemon._check_alive()
        have = committed(bootstrap, prefix)
        return all(have.get(k, 0) >= v for k, v in want.items())

    wait_for(done, timeout, f"the committed offsets to reach {want}", every=0.3)


def once_each(bootstrap: str, prefix: str, outputs: list, expected: list[str],
              daemons: list[DaemonProcess]) -> str:
    """'' when each id of ``expected`` has exactly one prediction among ``outputs``; else,
    for each id with another count, where the test wrote it to the input topic, where its
    predictions are, and each daemon's commits that moved the committed offset of its
    partition past it: what tells a broken exactly-once guarantee (two daemons' commits past
    one offset) from a record written twice to the input."""
    counts = Counter(r.key.decode() for r in outputs)
    want = Counter(expected)
    wrong = sorted(k for k in counts.keys() | want.keys() if counts[k] != want[k])
    if not wrong:
        return ""
    inputs = read_all(bootstrap, f"{prefix}-in", until=lambda r: False, timeout=5)
    logs = [daemon.events() for daemon in daemons]
    lines = [f"{len(wrong)} id(s) predicted a wrong number of times:"]
    for key in wrong[:5]:
        read_at = [(r.partition, r.offset) for r in inputs if r.key == key.encode()]
        lines.append(f"{key}: expected {want[key]}, predicted {counts[key]}; in the input "
                     f"at {read_at}; predictions at "
                     f"{[(r.partition, r.offset) for r in outputs if r.key == key.encode()]}")
        for partition, offset in read_at:
            slice_name = f"{prefix}-in:{partition}"
            for n, (daemon, events) in enumerate(zip(daemons, logs, strict=True)):
                before = None  # where the daemon's last commit, or its resumption, left it
                for event in events:
                    if (event.get("event") == "partition_resumed"
                            and event.get("partition") == slice_name):
                        before = event["offset"]
                    if event.get("event") == "partition_started" and event.get(
                            "partition") == slice_name:
                        before = f"start ({event['start_offset']})"
                    off = event.get("offsets", {}).get(slice_name)
                    if event.get("event") != "checkpoint" or off is None:
                        continue
                    if off > offset and not (type(before) is int and before > offset):
                        lines.append(f"  daemon {n} ({daemon.log_path.parent.name}) committed"
                                     f" {slice_name} {before} -> {off} at {event.get('time')}")
                    before = off
    return "\n".join(lines)


def changelog_records(bootstrap: str, prefix: str) -> dict[int, list]:
    """Every committed record of the test's changelog, ``(key, value)`` by partition, read to
    its end as a new daemon reads it (read_committed)."""
    from streamnb.config import KafkaSettings
    from streamnb.daemon.changelog import changelog_topic
    from streamnb.daemon.kafka_io import read_to_end

    topic = changelog_topic(f"{prefix}-group", f"{prefix}-in")
    wait_for(lambda: _no_transaction_unresolved(bootstrap, topic), 30,
             f"every transaction on {topic} resolved", every=0.2)
    return read_to_end(KafkaSettings(bootstrap_servers=bootstrap), topic, timeout=30)


def _no_transaction_unresolved(bootstrap: str, topic: str) -> bool:
    """Whether every partition's ``read_committed`` end is its high watermark. A commit's
    offsets can be readable before its marker reaches the changelog partitions (the
    coordinator writes the markers one partition at a time), and until then a
    ``read_committed`` reader ends before that commit's records."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level="read_committed")
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        stable = consumer.end_offsets(parts)
    finally:
        consumer.close(autocommit=False)
    highwaters = end_offsets(bootstrap, topic)
    return all(stable[tp] == highwaters[(tp.topic, tp.partition)] for tp in parts)


def changelog_model(bootstrap: str, prefix: str, kind: str = "multinomial"):
    """The model the changelog holds: the sum of the partitions' slices."""
    from streamnb.daemon.changelog import apply_records
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.pipeline import build_pipeline

    total = build_pipeline({"kind": kind}, {}).model
    for p, items in sorted(changelog_records(bootstrap, prefix).items()):
        part = build_pipeline({"kind": kind}, {}).model
        apply_records(part, FeedbackStore(), f"{prefix}-in:{p}", items)
        total += part
    return total


def assigned_events(daemon) -> list[dict]:
    return [e for e in daemon.events() if e.get("event") == "assigned"]


def started_partitions(daemons) -> list[str]:
    """Every partition a daemon started at ``kafka.start_offset`` (no committed offset)."""
    return [e["partition"] for d in daemons for e in d.events()
            if e.get("event") == "partition_started"]


def sms(data_dir: Path) -> list[tuple[str, str, str]]:
    """(id, label, text) for every line of the SMS Spam Collection, in corpus order."""
    lines = (data_dir / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8")
    out = []
    for i, line in enumerate(lines.splitlines()):
        label, text = line.split("\t", 1)
        out.append((f"sms-{i}", label, text))
    return out


def value(msg_id: str, text: str, label: str | None = None) -> bytes:
    obj = {"id": msg_id, "text": text}
    if label is not None:
        obj["label"] = label
    return orjson.dumps(obj)


def feedback(msg_id: str, label: str) -> bytes:
    return orjson.dumps({"type": "feedback", "id": msg_id, "label": label})


def split(items: list, fraction: float, seed: int) -> tuple[set, set]:
    rng = random.Random(seed)
    chosen = {item for item in items if rng.random() < fraction}
    return chosen, set(items) - chosen


def predictions_of_one_daemon(directory: Path, bootstrap: str, prefix: str, rows: list,
                              unlabelled: set[str], extra: str) -> tuple[Path, list[dict]]:
    """Run one daemon (one input partition, its config's ``extra`` tables) over ``rows`` of
    :func:`sms`, the ids in ``unlabelled`` sent without their label, until it has committed
    them all and stopped. Returns its config and its predictions, decoded, one per unlabelled
    id (as a read_committed reader sees them)."""
    create_topics(bootstrap, {f"{prefix}-in": 1, f"{prefix}-out": 1, f"{prefix}-dlq": 1})
    config = write_config(directory, bootstrap, prefix, extra=extra)
    daemon = DaemonProcess(config, directory / "daemon.log")
    daemon.wait_assigned()
    produce(bootstrap, f"{prefix}-in", (
        (msg_id.encode(), value(msg_id, text, None if msg_id in unlabelled else label))
        for msg_id, label, text in rows))
    wait_caught_up(bootstrap, prefix, daemon)
    assert daemon.terminate()[0] == 0
    records = read_all(bootstrap, f"{prefix}-out", until=lambda r: len(r) >= len(unlabelled))
    assert len(records) == len(unlabelled)
    return config, [orjson.loads(record.value) for record in records]
