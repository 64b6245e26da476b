"""[http] in config.toml: what an operator sets, and what stops the daemon at start."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamnb.config import ConfigError, load_settings

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_config_serves_nothing_until_a_port_is_set():
    http = load_settings(REPO / "config.toml", environ={}).http
    assert (http.host, http.port, http.password, http.scorers) == ("127.0.0.1", 0, "", 1)
    assert (http.add_header_score, http.greylist_score, http.reject_score) == (
        6.0, math.inf, math.inf)
    env = {"STREAMNB_HTTP__PORT": "11333", "STREAMNB_HTTP__PASSWORD": "pw"}
    http = load_settings(REPO / "config.toml", environ=env).http
    assert (http.port, http.password) == (11333, "pw")
    assert "pw" not in repr(http)


@pytest.mark.parametrize(("text", "message"), [
    ("[http]\nport = 70000\n", "http.port must be a port number"),
    ("[http]\nmax_in_flight = 0\n", "http.max_in_flight must be a positive integer"),
    ("[http]\nrequest_timeout_seconds = -1\n", "http.request_timeout_seconds must be a positive"),
    ("[http]\nadd_header_score = inf\n", "http.add_header_score must be a finite number"),
    ("[http]\nreject_score = 'never'\n", "http.reject_score must be a number (inf: never)"),
    ("[http]\nreject_score = 3.0\n", "http.reject_score (3.0) must not be below "
                                     "http.add_header_score (6.0)"),
    ("[http]\ngreylist_score = 9.0\n", "http.greylist_score (9.0) must not be above"),
    ("[http]\nverdict_header = 'X Spam'\n", "http.verdict_header must be a header name"),
    ("[http]\npassword = 'x'\n", "http.password does not belong in the config file"),
    ("[http]\nhost = '0.0.0.0'\nport = 11333\n", "http.host '0.0.0.0' is not loopback"),
    ("[http]\ntls_certfile = 'config.toml'\n", "http.tls_certfile and http.tls_keyfile go "
                                              "together"),
    ("[http]\npassword_file = 'nowhere'\n", "http.password_file: no readable file"),
    ("[http]\nlearn_topic = 'other'\n", "http.learn_topic 'other' must be one of "
                                        "kafka.input_topics"),
    ("[http]\nports = 1\n", "unknown key http.ports"),
    ("[http]\nscorers = -1\n", "http.scorers must be"),
])
def test_bad_http_settings_name_their_key(text, message):
    with pytest.raises(ConfigError) as caught:
        load_settings(text=text, environ={})
    assert message in str(caught.value)


def test_password_file_and_tls_files(tmp_path):
    (tmp_path / "pw").write_text("from-a-file\n")
    (tmp_path / "cert.pem").write_text("x")
    (tmp_path / "key.pem").write_text("x")
    config = tmp_path / "config.toml"
    config.write_text("[http]\nhost = '0.0.0.0'\nport = 11333\npassword_file = 'pw'\n"
                      "tls_certfile = 'cert.pem'\ntls_keyfile = 'key.pem'\n")
    http = load_settings(config, environ={}).http
    assert http.password == "from-a-file" and http.tls_certfile == tmp_path / "cert.pem"
    with pytest.raises(ConfigError, match="both set"):
        load_settings(config, environ={"STREAMNB_HTTP__PASSWORD": "x"})
    (tmp_path / "pw").write_text("")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_settings(config, environ={})
    plain = "[http]\nhost = '0.0.0.0'\nport = 11333\nallow_plaintext = true\n"
    assert load_settings(text=plain, environ={}).http.allow_plaintext


def test_a_port_in_use_stops_the_daemon_at_start_with_one_line(tmp_path):
    """Bound before Kafka is asked anything: no broker is needed to see it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "config.toml"
        config.write_text(f"[kafka]\nbootstrap_servers = '127.0.0.1:1'\n"
                          f"[metrics]\nport = 0\n[http]\nport = {port}\n")
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "streamnb", "run", "--config", str(config)],
                              cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamnb: http.port: cannot serve checks on "
                                                   f"127.0.0.1:{port}")
    assert time.monotonic() - started < 10
