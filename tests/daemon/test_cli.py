"""``streamnb run`` fails fast, with the key named, on a bad config (no broker needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "streamnb", "run", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=env,
    )


def test_a_bad_config_value_stops_the_daemon_at_start_naming_the_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[checkpoint]\nevery_messages = -3\n")
    result = run("--config", str(config))
    assert result.returncode == 2
    assert "config: checkpoint.every_messages must be a positive integer, got -3" in result.stderr


def test_a_bad_environment_override_is_named_too(tmp_path):
    env = {**os.environ, "STREAMNB_METRICS__PORT": "http"}
    result = run("--config", str(REPO / "config.toml"), env=env)
    assert result.returncode == 2
    assert "config: metrics.port must be a port number" in result.stderr


def test_an_unknown_model_option_is_refused_before_connecting(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[model]\nkind = "multinomial"\n[model.options]\nalpah = 1.0\n')
    result = run("--config", str(config))
    assert result.returncode == 2
    assert "alpah" in result.stderr


def test_a_missing_config_file_is_reported():
    result = run("--config", "/nonexistent/streamnb.toml")
    assert result.returncode == 2
    assert "cannot read /nonexistent/streamnb.toml" in result.stderr


@pytest.mark.parametrize("guard", ["watchdog", "watchdog.guard('commit_transaction')"])
def test_a_stalled_kafka_call_ends_the_process_with_code_3(guard):
    script = (
        "import time\n"
        "from streamnb.daemon import Watchdog\n"
        "watchdog = Watchdog(0.5)\n"
        f"with {guard}:\n"
        "    time.sleep(30)\n"
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3
    assert "blocked" in result.stderr
    assert time.monotonic() - started < 15
