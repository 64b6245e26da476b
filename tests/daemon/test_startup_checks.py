"""``python -m streamnb run`` refuses to start, in seconds, with exit code 2 and one line naming
the setting, for every problem it can see before consuming anything (no broker needed: the
Kafka check points at a port nobody listens on)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_file(tmp_path: Path, *, metrics_port: int = 0,
                bootstrap: str | None = None, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f"""
[kafka]
bootstrap_servers = "{bootstrap or f'127.0.0.1:{free_port()}'}"
startup_timeout_seconds = 2.0
[model]
kind = "multinomial"
[metrics]
port = {metrics_port}
{extra}
""",
        encoding="utf-8",
    )
    return path


def run_cli(config: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return result, time.monotonic() - started


def assert_refused(result: subprocess.CompletedProcess, elapsed: float, key: str,
                   within: float = 8.0) -> str:
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    lines = output.splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"streamnb: {key}"), lines[0]
    assert elapsed < within, f"took {elapsed:.1f} s: {lines[0]}"
    return lines[0]


def test_an_unreachable_bootstrap_server_fails_within_the_startup_timeout(tmp_path):
    result, elapsed = run_cli(config_file(tmp_path))
    line = assert_refused(result, elapsed, "kafka.bootstrap_servers")
    assert "kafka.startup_timeout_seconds" in line and "within 2 s" in line
    assert elapsed >= 2.0  # it did wait the configured time


def test_a_metrics_port_in_use_is_named(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result, elapsed = run_cli(config_file(tmp_path, metrics_port=port))
    line = assert_refused(result, elapsed, "metrics.port")
    assert f"127.0.0.1:{port}" in line
