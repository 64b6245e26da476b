"""Run ``python -m streamnb run`` as a subprocess against the real broker, and watch it.

Conditions are polled with timeouts (never a blind sleep): the daemon's log says when it has
its partitions, and its checkpoint file says how far it has read.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from streamnb.daemon.checkpoint import CheckpointError, read_checkpoint

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
) -> Path:
    """A config for one test: its own topics, group, static member id and checkpoint."""
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
group_instance_id = "{prefix}-member"
session_timeout_ms = 6000
poll_timeout_ms = 100
stall_seconds = 20.0

[model]
kind = "{kind}"
labels = [{label_list}]

[checkpoint]
path = "{directory / 'checkpoint.json'}"
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
        out = []
        for line in self.log_path.read_bytes().splitlines():
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


def checkpoint_offsets(path: Path) -> dict[str, int]:
    try:
        body = read_checkpoint(path)
    except (CheckpointError, OSError):
        return {}
    if body is None:
        return {}
    return {key: part["next_offset"] for key, part in body["slices"].items()}


def wait_caught_up(
    path: Path, ends: dict[tuple[str, int], int], daemon: DaemonProcess, timeout: float = 60.0
) -> None:
    """Until the checkpoint covers every partition up to ``ends``."""
    want = {f"{t}:{p}": off for (t, p), off in ends.items() if off > 0}

    def done():
        daemon._check_alive()
        have = checkpoint_offsets(path)
        return all(have.get(k, 0) >= v for k, v in want.items())

    wait_for(done, timeout, f"the checkpoint to reach {want}")


def checkpoint_model(path: Path):
    """The model a checkpoint holds: the sum of its partition slices."""
    from streamnb.models import model_from_state

    body = read_checkpoint(path)
    total = None
    for part in body["slices"].values():
        model = model_from_state(part["model"])
        if total is None:
            total = model
        else:
            total += model
    return total


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
