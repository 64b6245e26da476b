"""Start-up checks of ``streamnb run``: each one runs before anything is consumed and fails in
seconds with :class:`StartupError`, whose message is one line that names the setting to fix
(``main`` prints it and exits with code 2).

* :func:`serve_metrics`: ``metrics.host:metrics.port`` can be bound;
* :func:`check_kafka`: the TLS files load (:func:`check_tls_files`), a bootstrap server
  answers within ``kafka.startup_timeout_seconds`` with the configured security settings (a
  refused login, an untrusted or missing certificate are told apart from no answer), and
  ``limits.max_value_bytes`` is no larger than what the input topics carry; returns what each
  output topic accepts (``max.message.bytes``) so outputs are checked against it before they
  reach the producer.

The state's own topics (the compacted changelogs) are checked, or created, by
:func:`streamnb.daemon.kafka_io.ensure_changelogs` right after :func:`check_kafka`, and
:func:`topic_limits` then reads what their records may take.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from streamnb.config import MetricsSettings, Settings

__all__ = ["StartupError", "bind_http", "check_kafka", "serve_checks", "serve_metrics",
           "topic_limits"]


class StartupError(RuntimeError):
    """A start-up check failed; the message is one line naming the setting."""


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


def bind_http(settings: Any) -> Any:
    """The front door's listening socket (``http.port`` 0: None); a bind failure names the
    settings. Bound before anything else so a port in use fails in seconds."""
    if not settings.port:
        return None
    from streamnb.serve.server import BindError, bind

    try:
        return bind(settings)
    except BindError as error:
        raise StartupError(str(error)) from None


def serve_checks(daemon: Any, settings: Settings, listener: Any, metrics: Any,
                 config_path: Any = None) -> Any:
    """Serve checks (and, with a password, learns) in front of ``daemon``: by
    ``http.scorers`` processes on the port ``listener`` holds (it only proved the port free,
    and is closed for them), or, without them or a config file, on ``listener`` itself."""
    from prometheus_client import CollectorRegistry

    from streamnb.serve import serve_daemon
    from streamnb.serve.server import BindError

    if settings.http.scorers and config_path is not None:
        from streamnb.serve.scorers import ScorerProcesses

        listener.close()
        scorers = ScorerProcesses(config_path, settings.http.scorers, settings.metrics.port,
                                  ready_timeout=max(60.0, settings.kafka.stall_seconds))
        try:
            scorers.start()
        except RuntimeError as error:
            raise StartupError(str(error)) from None
        return scorers

    registry = getattr(metrics, "registry", None) or CollectorRegistry()
    try:
        return serve_daemon(daemon, settings, listener, registry)
    except BindError as error:
        raise StartupError(str(error)) from None


class _KafkaLogCapture(logging.Handler):
    """What kafka-python logged while start-up connected: it retries a refused login or a
    failed TLS handshake until its timeout, and only its log says which it was (a refused
    SASL login is not always logged as such: the broker may close the connection first, so
    a login that was attempted and never succeeded counts as refused too). Kept in memory
    only; its configuration dump, which holds the password, is not even kept."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            message = record.getMessage()
            if "configuration" not in message and len(self.messages) < 10_000:
                self.messages.append(message[:2000])


@contextlib.contextmanager
def _captured_kafka_logs() -> Iterator[_KafkaLogCapture]:
    """kafka-python's log lines during the check, kept from the console (the one start-up
    line says what went wrong)."""
    logger = logging.getLogger("kafka")
    capture = _KafkaLogCapture()
    saved = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(capture)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


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
    if kafka.security_protocol.endswith("SSL"):
        check_tls_files(kafka)
    with _captured_kafka_logs() as logged:
        try:
            admin = kafka_io.open_admin(kafka, timeout)
            try:
                limits = kafka_io.topic_limits(admin, [*outputs, *kafka.input_topics])
            finally:
                admin.close()
        except KafkaError as error:
            raise StartupError(_kafka_failure(settings, error, logged.messages)) from None
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


def topic_limits(settings: Settings, topics) -> dict[str, int]:
    """What a record sent to each of ``topics`` may take (``max.message.bytes``), read after
    :func:`check_kafka` has found the brokers reachable."""
    from streamnb.daemon import kafka_io

    admin = kafka_io.open_admin(settings.kafka, settings.kafka.startup_timeout_seconds)
    try:
        return kafka_io.topic_limits(admin, topics)
    finally:
        admin.close()


def check_tls_files(kafka: Any) -> None:
    """Load the CA, certificate and key as kafka-python will, so a wrong file is named now
    rather than retried until the start-up timeout."""
    import ssl

    context = ssl.create_default_context()
    key = "kafka.ssl_cafile"
    try:
        if kafka.ssl_cafile is not None:
            context.load_verify_locations(cafile=str(kafka.ssl_cafile))
        if kafka.ssl_certfile is not None:
            key = "kafka.ssl_keyfile" if kafka.ssl_keyfile is not None else "kafka.ssl_certfile"
            context.load_cert_chain(
                str(kafka.ssl_certfile),
                str(kafka.ssl_keyfile) if kafka.ssl_keyfile is not None else None,
            )
    except (ssl.SSLError, OSError) as error:
        what = {
            "kafka.ssl_cafile": f"{kafka.ssl_cafile} holds no usable CA certificate",
            "kafka.ssl_certfile": f"{kafka.ssl_certfile} is not a certificate with its key",
            "kafka.ssl_keyfile": f"{kafka.ssl_keyfile} is not the key of {kafka.ssl_certfile}",
        }[key]
        raise StartupError(f"{key}: {what}: {error}") from None


def _kafka_failure(settings: Settings, error: Exception, logged: list[str]) -> str:
    kafka = settings.kafka
    where = f"{kafka.bootstrap_servers} ({kafka.security_protocol})"
    seen = "\n".join([f"{type(error).__name__}: {error}", *logged])
    refused = "Authentication failed" in seen or "SaslAuthenticationFailed" in seen
    if refused or ("SaslAuthenticateRequest" in seen and "Timeout" in type(error).__name__):
        return (
            f"kafka.sasl_username: {where} refused the {kafka.sasl_mechanism} login of "
            f"{kafka.sasl_username!r}: check kafka.sasl_username and its password "
            "(STREAMNB_KAFKA__SASL_PASSWORD or kafka.sasl_password_file)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in seen:
        detail = _first_line_with(seen, "CERTIFICATE_VERIFY_FAILED")
        return (
            f"kafka.ssl_cafile: the certificate of {where} is not trusted "
            f"({detail}); set kafka.ssl_cafile to its CA, or check kafka.ssl_check_hostname"
        )
    if "ALERT_BAD_CERTIFICATE" in seen or "CERTIFICATE_REQUIRED" in seen:
        given = f"its certificate {kafka.ssl_certfile}" if kafka.ssl_certfile else "none"
        return (
            f"kafka.ssl_certfile: {where} wants a client certificate it trusts ({given} was "
            "given): set kafka.ssl_certfile and kafka.ssl_keyfile"
        )
    if "Handshake failed" in seen or "UnsupportedSaslMechanism" in seen:
        detail = _first_line_with(seen, "Handshake failed") or _first_line_with(
            seen, "UnsupportedSaslMechanism")
        return f"kafka.security_protocol: {where}: {detail}"
    if "Timeout" in type(error).__name__ or "NoBrokers" in type(error).__name__:
        return (
            f"kafka.bootstrap_servers: no broker answered at {where} within "
            f"{kafka.startup_timeout_seconds:g} s (kafka.startup_timeout_seconds)"
        )
    return f"kafka.bootstrap_servers: {where}: {type(error).__name__}: {error}".splitlines()[0]


def _first_line_with(text: str, needle: str) -> str:
    for line in text.splitlines():
        if needle in line:
            return line.strip()[-200:]
    return ""
