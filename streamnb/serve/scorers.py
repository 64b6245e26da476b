"""The scorer processes ``streamnb run`` starts for its front door (``http.scorers``).

Checks served by a thread of the daemon share its interpreter lock and wait for its model's
lock while it processes a batch or commits: in ``bench/bench_checks.py``, 200 checks/s sent to
a daemon consuming SpamAssassin mail were answered 78/s, p50 2.6 s. A ``streamnb serve``
process beside it answered all of them, p50 2.0 ms, p99 7.9 ms (docs/http.md, "Where checks are
served"). So by default the daemon starts ``http.scorers`` such processes on its port (each
binds it with ``SO_REUSEPORT``; the kernel spreads connections over them), with its own config
file and environment, once its state is read, and stops them when it stops. A scorer that
exits is started again (at most once every ``RESTART_SECONDS``), with an ERROR line.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["READY_ENV", "ScorerProcesses"]

log = logging.getLogger("streamnb.serve")

#: Set in a scorer's environment: it writes one line to its standard output once it serves.
READY_ENV = "STREAMNB_SERVE_READY_LINE"
#: The least time between two starts of one scorer.
RESTART_SECONDS = 5.0


class ScorerProcesses:
    """``count`` ``streamnb serve --config config`` processes; ``metrics_port`` (0: none)
    is the daemon's, scorer i serves its own metrics on ``metrics_port + 1 + i``."""

    def __init__(self, config: Path, count: int, metrics_port: int, ready_timeout: float):
        self.config = config
        self.count = count
        self.metrics_port = metrics_port
        self.ready_timeout = ready_timeout
        self.processes: list[subprocess.Popen | None] = [None] * count
        self._started_at = [0.0] * count
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="streamnb-scorers",
                                         daemon=True)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p is not None]

    def start(self) -> None:
        """Start every scorer; returns once each serves (raises ``RuntimeError`` naming the
        one that did not, after stopping the others)."""
        try:
            for i in range(self.count):
                self._start(i)
        except BaseException:
            self.stop()
            raise
        self._watcher.start()

    def _start(self, i: int) -> None:
        env = {**os.environ, READY_ENV: "1",
               "STREAMNB_METRICS__PORT": str(self.metrics_port + 1 + i if self.metrics_port
                                             else 0)}
        self._started_at[i] = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "streamnb", "serve", "--config", str(self.config)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        self.processes[i] = process
        ready = threading.Event()

        def wait_ready() -> None:
            if process.stdout.readline():
                ready.set()

        threading.Thread(target=wait_ready, daemon=True).start()
        if not ready.wait(self.ready_timeout) or process.poll() is not None:
            process.kill()
            process.wait()
            raise RuntimeError(f"http.scorers: scorer {i + 1} of {self.count} (streamnb serve, "
                               f"pid {process.pid}) did not serve within "
                               f"{self.ready_timeout:.0f} s; its log lines say why")

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            for i, process in enumerate(self.processes):
                if process is None or process.poll() is None:
                    continue
                if time.monotonic() - self._started_at[i] < RESTART_SECONDS:
                    continue
                log.error("scorer %d (streamnb serve, pid %d) exited with %s: starting it again",
                          i + 1, process.pid, process.returncode,
                          extra={"event": "scorer_exited", "code": process.returncode})
                try:
                    self._start(i)
                except RuntimeError as error:
                    log.error("%s", error, extra={"event": "scorer_failed"})

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every scorer (each answers what is in flight and exits), then wait."""
        self._stopping.set()
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process is None:
                continue
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
