"""Start-up checks of ``streamnb run``: each one runs before anything is consumed and fails in
seconds with :class:`StartupError`, whose message is one line that names the setting to fix
(``main`` prints it and exits with code 2).

* :func:`check_checkpoint_location`: the checkpoint's directory can be created and written,
  tried by creating, renaming and removing a probe file (permission bits alone do not tell:
  root ignores them, ``/proc`` and read-only mounts refuse anyway);
* :func:`serve_metrics`: ``metrics.host:metrics.port`` can be bound;
* :func:`check_kafka`: a bootstrap server answers within ``kafka.startup_timeout_seconds``
  with the configured security settings, and ``limits.max_value_bytes`` is no larger than
  what the input topics carry; returns what each output topic accepts (``max.message.bytes``)
  so outputs are checked against it before they reach the producer.

The checkpoint body's shape is checked where it is read (:mod:`streamnb.daemon.checkpoint`).

>>> import pathlib, tempfile
>>> check_checkpoint_location(pathlib.Path(tempfile.mkdtemp()) / "state" / "checkpoint.json")
>>> check_checkpoint_location(pathlib.Path("/proc/streamnb/checkpoint.json"))
Traceback (most recent call last):
...
streamnb.daemon.startup.StartupError: checkpoint.path: cannot write in /proc/streamnb: ...
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamnb.config import MetricsSettings, Settings

__all__ = ["StartupError", "check_checkpoint_location", "check_kafka", "serve_metrics"]


class StartupError(RuntimeError):
    """A start-up check failed; the message is one line naming the setting."""


def check_checkpoint_location(path: Path) -> None:
    """Raise unless checkpoints can be written (atomically, by rename) next to ``path``."""
    directory = path.parent
    probe = directory / f".{path.name}.probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as out:
            out.write(b"streamnb start-up probe\n")
            out.flush()
            os.fsync(out.fileno())
        renamed = probe.with_name(probe.name + "-renamed")
        os.replace(probe, renamed)
        renamed.unlink()
    except OSError as error:
        with contextlib.suppress(OSError):
            probe.unlink()
        raise StartupError(
            f"checkpoint.path: cannot write in {directory}: {error.strerror or error}"
        ) from None
    if path.exists() and not path.is_file():
        raise StartupError(f"checkpoint.path: {path} exists and is not a regular file")


def serve_metrics(metrics: Any, settings: MetricsSettings) -> None:
    """Serve ``/metrics`` (port 0: not at all); a bind failure names the settings."""
    if not settings.port:
        return
    try:
        metrics.serve(settings.host, settings.port)
    except OSError as error:
        raise StartupError(
            f"metrics.port: cannot serve /metrics on {settings.host}:{settings.port}: "
            f"{error.strerror or error} (metrics.host, metrics.port; 0 disables)"
        ) from None


@contextlib.contextmanager
def _quiet_kafka_logs() -> Iterator[None]:
    """kafka-python logs each failed connection attempt; the start-up line says it once."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_kafka(settings: Settings) -> dict[str, int]:
    """Connect to the bootstrap servers as the daemon will; each output topic's limit.

    The limits are those of the output and dead-letter topics (what a record sent there may
    take, in bytes); the input topics' limits bound ``limits.max_value_bytes``.
    """
    from kafka.errors import KafkaError

    from streamnb.daemon import kafka_io

    kafka = settings.kafka
    timeout = kafka.startup_timeout_seconds
    outputs = [kafka.output_topic, kafka.dead_letter_topic]
    try:
        with _quiet_kafka_logs():
            admin = kafka_io.open_admin(kafka, timeout)
            try:
                limits = kafka_io.topic_limits(admin, [*outputs, *kafka.input_topics])
            finally:
                admin.close()
    except KafkaError as error:
        raise StartupError(_kafka_failure(settings, error)) from None
    except OSError as error:  # e.g. a TLS file that is not a certificate
        raise StartupError(
            f"kafka.security_protocol: cannot set up {kafka.security_protocol} to "
            f"{kafka.bootstrap_servers}: {error}"
        ) from None
    widest_input = max(limits[topic] for topic in kafka.input_topics)
    if settings.limits.max_value_bytes > widest_input:
        raise StartupError(
            f"limits.max_value_bytes: {settings.limits.max_value_bytes} is more than any input "
            f"topic carries (max.message.bytes {widest_input}): set it to at most that"
        )
    return {topic: limits[topic] for topic in outputs}


def _kafka_failure(settings: Settings, error: Exception) -> str:
    kafka = settings.kafka
    name = type(error).__name__
    text = str(error).splitlines()[0] if str(error) else name
    if "Authentication" in name or "Sasl" in name:
        return (
            f"kafka.sasl_username: {kafka.bootstrap_servers} refused the {kafka.sasl_mechanism} "
            f"login of {kafka.sasl_username!r} (check kafka.sasl_username and the password): "
            f"{text}"
        )
    if "Timeout" in name or "NoBrokers" in name:
        return (
            f"kafka.bootstrap_servers: no broker answered at {kafka.bootstrap_servers} "
            f"({kafka.security_protocol}) within {kafka.startup_timeout_seconds:g} s "
            "(kafka.startup_timeout_seconds)"
        )
    return f"kafka.bootstrap_servers: {kafka.bootstrap_servers}: {name}: {text}"
