"""``config.toml`` -> validated, frozen settings for ``streamnb run``.

The file is read with :mod:`tomllib`; every key can be overridden by an environment variable
named ``STREAMNB_<TABLE>__<KEY>`` (double underscore between levels), which is what containers
use. An override's value is read as a TOML value when it parses as one (``5``, ``0.5``,
``true``, ``["a", "b"]``) and as a plain string otherwise; list-valued keys also accept a
comma-separated string. A missing, unknown or ill-typed key fails at start with a message that
names it.

>>> settings = load_settings(text='[kafka]\\ninput_topics = ["mail"]\\n', environ={})
>>> settings.kafka.input_topics, settings.checkpoint.every_messages
(('mail',), 10000)
>>> load_settings(text="[checkpoint]\\nevery_messages = -3\\n", environ={})
Traceback (most recent call last):
...
streamnb.config.ConfigError: config: checkpoint.every_messages must be a positive integer, got -3
>>> env = {"STREAMNB_KAFKA__BOOTSTRAP_SERVERS": "kafka:29092"}
>>> load_settings(text="", environ=env).kafka.bootstrap_servers
'kafka:29092'
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "CheckpointSettings",
    "ConfigError",
    "FeedbackSettings",
    "HttpSettings",
    "KafkaSettings",
    "LimitsSettings",
    "LoggingSettings",
    "MetricsSettings",
    "ModelSettings",
    "OutputSettings",
    "PipelineSettings",
    "Settings",
    "load_settings",
]

ENV_PREFIX = "STREAMNB_"


class ConfigError(ValueError):
    """A configuration problem; the message always names the offending key."""


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap_servers: str = "127.0.0.1:9092"
    input_topics: tuple[str, ...] = ("streamnb-input",)
    output_topic: str = "streamnb-predictions"
    dead_letter_topic: str = "streamnb-dead-letters"
    group_id: str = "streamnb"
    group_instance_id: str = ""
    client_id: str = "streamnb"
    start_offset: str = "earliest"
    # The group's partition assignor (kafka-python's partition_assignment_strategy); see
    # docs/daemon.md "Assignment, revocation, failover" for what each costs in a rebalance.
    assignment_strategy: str = "range"
    max_poll_records: int = 500
    # The most one fetch takes from an input partition (docs/performance.md, "The loop's
    # own overhead on mail"): 4 MiB lets a poll of mail reach max_poll_records.
    max_partition_fetch_bytes: int = 4 * 1024 * 1024
    poll_timeout_ms: int = 200
    stall_seconds: float = 60.0
    session_timeout_ms: int = 10000
    producer_linger_ms: int = 5
    producer_acks: str = "all"
    # How long start-up waits for the bootstrap servers before failing (exit 2).
    startup_timeout_seconds: float = 10.0
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    # Never in the config file: from STREAMNB_KAFKA__SASL_PASSWORD or kafka.sasl_password_file
    # (whose content ends up here). Not in repr, so it cannot reach a log line.
    sasl_password: str = field(default="", repr=False)
    sasl_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_check_hostname: bool = True
    # The commit protocol's producer; empty: derived from group_id and group_instance_id.
    transactional_id: str = ""
    transaction_timeout_ms: int = 15000
    # Of a changelog topic the daemon creates; -1: the broker's default.replication.factor.
    changelog_replication_factor: int = -1


#: The model kinds with a vocabulary, which model.max_tokens bounds.
TEXT_KINDS = ("multinomial", "bernoulli")
#: model.max_tokens when not configured (text kinds): a slice then holds at most 150,000 tokens
#: after a commit and keeps 112,500 when it expires (docs/benchmarks.md: what it costs).
DEFAULT_MAX_TOKENS = 150_000


@dataclass(frozen=True, slots=True)
class ModelSettings:
    kind: str = "multinomial"
    # None: the kind's default preset (streamnb.models.presets: "mail" for multinomial).
    preset: str | None = None
    labels: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    # Token expiry (text models): a slice over max_tokens tokens at a commit expires the least
    # recently seen down to max(75 % of max_tokens, min(expiry_floor, max_tokens)), as
    # SpamAssassin's bayes_expiry_max_db_size. 0: no expiry (no last-seen stamps). None (not
    # configured): DEFAULT_MAX_TOKENS for the text kinds, so that a daemon without a config
    # bounds its memory too, and 0 for the others, which have no vocabulary.
    max_tokens: int | None = None
    expiry_floor: int = 100_000
    # Decay (text models): a message learned n messages ago (in its partition's slice) weighs
    # 2**(-n / half_life_messages). 0: no decay, integer counts (docs/models.md, "Decay").
    half_life_messages: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens is None:
            default = DEFAULT_MAX_TOKENS if self.kind in TEXT_KINDS else 0
            object.__setattr__(self, "max_tokens", default)

    def expiry_keep(self) -> int:
        """Tokens a slice keeps when it expires."""
        return max(self.max_tokens * 3 // 4, min(self.expiry_floor, self.max_tokens))

    def table(self) -> dict[str, Any]:
        """The flat model table (kind, preset, options) that build_pipeline and
        streamnb.models.presets.resolve take."""
        preset = {} if self.preset is None else {"preset": self.preset}
        decay = {"half_life": self.half_life_messages} if self.half_life_messages else {}
        return {"kind": self.kind, **preset, **self.options, **decay}


@dataclass(frozen=True, slots=True)
class OutputSettings:
    # Tokens that weighed most listed with each prediction (0: no explanation).
    explain: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointSettings:
    every_messages: int = 10000
    every_seconds: float = 1.0


@dataclass(frozen=True, slots=True)
class FeedbackSettings:
    max_ids: int = 100_000
    max_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    # Loopback by default: /metrics is unauthenticated. Containers set 0.0.0.0.
    host: str = "127.0.0.1"
    port: int = 9108
    window: int = 1000
    positive_class: str = "spam"


@dataclass(frozen=True, slots=True)
class LoggingSettings:
    level: str = "INFO"
    format: str = "plain"


@dataclass(frozen=True, slots=True)
class LimitsSettings:
    # Kafka's default max.message.bytes is 1 MiB + 12: no larger value reaches the input topic.
    max_value_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    # Decode and featurize in a child process, one batch ahead of the model.
    prepare_process: bool = False
    # With prepare_process: how many child processes share each batch, in consecutive parts.
    prepare_processes: int = 1


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The front door: checks and learns in rspamd's protocol (docs/http.md)."""

    # Loopback by default: any other address needs TLS, or allow_plaintext = true.
    host: str = "127.0.0.1"
    port: int = 0  # 0: no HTTP front door (11333 is rspamd's own port)
    # Who answers checks for `streamnb run`: this many `streamnb serve` processes the daemon
    # starts on its port (streamnb.serve.scorers), or 0: a thread of the daemon itself.
    scorers: int = 1
    # Learning is privileged: the Password header of /learnspam, /learnham and /learnclass.
    # Never in the config file: from STREAMNB_HTTP__PASSWORD or http.password_file.
    password: str = field(default="", repr=False)
    password_file: Path | None = None
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    allow_plaintext: bool = False
    # Bounds: a request's body (413 past it), its header lines, its time from the first byte
    # to the reply (rspamd's own scanners time out after 8 s), requests in flight (503 past
    # it, never a queue), and how long an idle keep-alive connection stays open.
    max_body_bytes: int = 10 * 1024 * 1024
    max_headers: int = 100
    request_timeout_seconds: float = 8.0
    max_in_flight: int = 64
    keepalive_seconds: float = 30.0
    # Score and action (docs/http.md, "Score and action"): score = add_header_score +
    # score_per_log_odds * margin, the margin being the model's log-odds of the spam class
    # against the runner-up past the decision line. "add header" exactly where the daemon
    # labels spam; greylist and reject only where configured (inf: never).
    spam_class: str = "spam"
    add_header_score: float = 6.0
    score_per_log_odds: float = 1.0
    greylist_score: float = math.inf
    reject_score: float = math.inf
    # The header the milter block adds to every checked mail (and removes from the mail
    # first, so a sender cannot forge it); empty: none.
    verdict_header: str = "X-Streamnb"
    # Tokens of the exact explanation listed in the Bayes symbol's options (0: none).
    explain: int = 0
    # The input topic learns go to; empty: the first of kafka.input_topics.
    learn_topic: str = ""
    # How long a learn waits for Kafka's acknowledgement (acks=all) before answering 503.
    learn_timeout_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class Settings:
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    features: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    feedback: FeedbackSettings = field(default_factory=FeedbackSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    http: HttpSettings = field(default_factory=HttpSettings)


# ---------------------------------------------------------------- value checks
# Each check takes (key, value) and returns the normalised value or raises ConfigError.


def _fail(key: str, what: str, value: Any) -> None:
    raise ConfigError(f"config: {key} must be {what}, got {value!r}")


def _nonempty_str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(key, "a non-empty string", value)
    return value.strip()


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        _fail(key, "a string", value)
    return value


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        _fail(key, "a positive integer", value)
    return value


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _fail(key, "an integer >= 0", value)
    return value


def _port(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        _fail(key, "a port number 0-65535 (0 disables)", value)
    return value


def _positive_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        _fail(key, "a positive number", value)
    return float(value)


def _str_list(nonempty: bool) -> Callable[[str, Any], tuple[str, ...]]:
    def check(key: str, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list) or not all(
            isinstance(v, str) and v.strip() for v in value
        ):
            _fail(key, "a list of non-empty strings", value)
        if nonempty and not value:
            _fail(key, "a non-empty list of strings", value)
        if len(set(value)) != len(value):
            _fail(key, "a list without duplicates", value)
        return tuple(v.strip() for v in value)

    return check


def _one_of(*choices: str) -> Callable[[str, Any], str]:
    def check(key: str, value: Any) -> str:
        if isinstance(value, str) and value.lower() in choices:
            return value.lower()
        _fail(key, "one of " + ", ".join(repr(c) for c in choices), value)
        return ""  # unreachable

    return check


# kafka-python's assignors by their protocol names: the first three rebalance eagerly (every
# member gives up all its partitions, then gets its new share), cooperative-sticky
# incrementally (KIP-429: only the partitions that move are revoked, in a second round).
ASSIGNMENT_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _upper_one_of(*choices: str) -> Callable[[str, Any], str]:
    def check(key: str, value: Any) -> str:
        if isinstance(value, str) and value.upper() in choices:
            return value.upper()
        _fail(key, "one of " + ", ".join(repr(c) for c in choices if c), value)
        return ""  # unreachable

    return check


def _acks(key: str, value: Any) -> str:
    if value in ("all", "0", "1", 0, 1, -1, "-1"):
        return str(value)
    _fail(key, "'all', 1 or 0", value)
    return ""  # unreachable


def _replication_factor(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or value >= 1):
        _fail(key, "-1 (the broker's default) or a positive integer", value)
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        _fail(key, "true or false", value)
    return value


def _path(key: str, value: Any) -> Path:
    return Path(_nonempty_str(key, value))


def _secret(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"config: {key} must be a non-empty string")  # never echo a secret
    return value


def _finite_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(key, "a finite number", value)
    return float(value)


def _threshold(key: str, value: Any) -> float:
    """A score threshold: a finite number, or inf for never."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) \
            or value == -math.inf:
        _fail(key, "a number (inf: never)", value)
    return float(value)


def _header_name(key: str, value: Any) -> str:
    """An HTTP/mail header name (RFC 5322 field name characters), or empty for none."""
    if not isinstance(value, str) or any(not 33 <= ord(c) <= 126 or c == ":" for c in value):
        _fail(key, "a header name (printable ASCII without ':') or empty", value)
    return value


def _table(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(key, "a table", value)
    return dict(value)


SCHEMA: dict[str, tuple[type, dict[str, Callable[[str, Any], Any]]]] = {
    "kafka": (
        KafkaSettings,
        {
            "bootstrap_servers": _nonempty_str,
            "input_topics": _str_list(nonempty=True),
            "output_topic": _nonempty_str,
            "dead_letter_topic": _nonempty_str,
            "group_id": _nonempty_str,
            "group_instance_id": _str,
            "client_id": _nonempty_str,
            "start_offset": _one_of("earliest", "latest"),
            "assignment_strategy": _one_of(*ASSIGNMENT_STRATEGIES),
            "max_poll_records": _positive_int,
            "max_partition_fetch_bytes": _positive_int,
            "poll_timeout_ms": _positive_int,
            "stall_seconds": _positive_float,
            "session_timeout_ms": _positive_int,
            "producer_linger_ms": _positive_int,
            "producer_acks": _acks,
            "startup_timeout_seconds": _positive_float,
            "security_protocol": _upper_one_of(*SECURITY_PROTOCOLS),
            "sasl_mechanism": _upper_one_of("", *SASL_MECHANISMS),
            "sasl_username": _str,
            "sasl_password": _secret,
            "sasl_password_file": _path,
            "ssl_cafile": _path,
            "ssl_certfile": _path,
            "ssl_keyfile": _path,
            "ssl_check_hostname": _bool,
            "transactional_id": _str,
            "transaction_timeout_ms": _positive_int,
            "changelog_replication_factor": _replication_factor,
        },
    ),
    "model": (
        ModelSettings,
        {
            "kind": _nonempty_str,
            "preset": _nonempty_str,
            "labels": _str_list(nonempty=False),
            "options": _table,
            "max_tokens": _count,
            "expiry_floor": _count,
            "half_life_messages": _count,
        },
    ),
    "output": (OutputSettings, {"explain": _count}),
    "checkpoint": (
        CheckpointSettings,
        {"every_messages": _positive_int, "every_seconds": _positive_float},
    ),
    "feedback": (FeedbackSettings, {"max_ids": _positive_int, "max_bytes": _positive_int}),
    "metrics": (
        MetricsSettings,
        {
            "host": _nonempty_str,
            "port": _port,
            "window": _positive_int,
            "positive_class": _nonempty_str,
        },
    ),
    "logging": (
        LoggingSettings,
        {
            "level": _one_of("debug", "info", "warning", "error"),
            "format": _one_of("plain", "json"),
        },
    ),
    "limits": (LimitsSettings, {"max_value_bytes": _positive_int}),
    "pipeline": (PipelineSettings, {"prepare_process": _bool,
                                     "prepare_processes": _positive_int}),
    "http": (
        HttpSettings,
        {
            "host": _nonempty_str,
            "port": _port,
            "scorers": _count,
            "password": _secret,
            "password_file": _path,
            "tls_certfile": _path,
            "tls_keyfile": _path,
            "allow_plaintext": _bool,
            "max_body_bytes": _positive_int,
            "max_headers": _positive_int,
            "request_timeout_seconds": _positive_float,
            "max_in_flight": _positive_int,
            "keepalive_seconds": _positive_float,
            "spam_class": _nonempty_str,
            "add_header_score": _finite_float,
            "score_per_log_odds": _positive_float,
            "greylist_score": _threshold,
            "reject_score": _threshold,
            "verdict_header": _header_name,
            "explain": _count,
            "learn_topic": _str,
            "learn_timeout_seconds": _positive_float,
        },
    ),
}
# Tables passed through to a component that validates them itself (the featurizer).
FREE_TABLES = ("features",)


def _parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _apply_env(doc: dict[str, Any], environ: Mapping[str, str]) -> None:
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        if not all(path):
            raise ConfigError(f"config: environment variable {name} has an empty key part")
        node = doc
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"config: {name} overrides {part}, which is not a table")
            node = child
        node[path[-1]] = _parse_env_value(raw)


def load_settings(
    path: str | os.PathLike | None = None,
    *,
    text: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Read ``path`` (or ``text``), apply ``STREAMNB_*`` overrides from ``environ``, validate.

    ``environ`` defaults to :data:`os.environ`. Relative TLS and password file paths are
    resolved against the directory of the config file (or the working directory for ``text``).
    """
    base = Path.cwd()
    if text is None:
        if path is None:
            raise ConfigError("config: no file given")
        config_path = Path(path)
        try:
            text = config_path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"config: cannot read {config_path}: {error.strerror}") from None
        base = config_path.resolve().parent
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config: not valid TOML: {error}") from None
    if "password" in (doc.get("http") or {}):
        raise ConfigError(
            "config: http.password does not belong in the config file: set "
            "STREAMNB_HTTP__PASSWORD or http.password_file"
        )
    if "sasl_password" in (doc.get("kafka") or {}):
        raise ConfigError(
            "config: kafka.sasl_password does not belong in the config file: set "
            "STREAMNB_KAFKA__SASL_PASSWORD or kafka.sasl_password_file"
        )
    _apply_env(doc, os.environ if environ is None else environ)

    sections: dict[str, Any] = {}
    for table, value in doc.items():
        if table in FREE_TABLES:
            sections[table] = _table(table, value)
            continue
        if table not in SCHEMA:
            known = ", ".join(sorted([*SCHEMA, *FREE_TABLES]))
            raise ConfigError(f"config: unknown table [{table}] (known: {known})")
        cls, checks = SCHEMA[table]
        if not isinstance(value, dict):
            _fail(table, "a table", value)
        fields = {}
        for key, item in value.items():
            if key not in checks:
                known = ", ".join(sorted(checks))
                raise ConfigError(f"config: unknown key {table}.{key} (known: {known})")
            fields[key] = checks[key](f"{table}.{key}", item)
        sections[table] = cls(**fields)
    settings = Settings(**sections)
    _check_preset(settings.model)
    _check_class_offsets(settings.model)
    settings = Settings(**{**_as_dict(settings), "kafka": _resolve_security(settings.kafka, base),
                           "http": _resolve_http(settings.http, base)})
    if settings.model.max_tokens and settings.model.kind not in TEXT_KINDS:
        raise ConfigError(f"config: model.max_tokens applies to the text models (multinomial, "
                          f"bernoulli), not {settings.model.kind!r}: remove it or set it to 0")
    if settings.model.half_life_messages and settings.model.kind not in ("multinomial",
                                                                         "bernoulli"):
        raise ConfigError(f"config: model.half_life_messages applies to the text models "
                          f"(multinomial, bernoulli), not {settings.model.kind!r}: remove it "
                          "or set it to 0")
    if settings.model.half_life_messages and "half_life" in settings.model.options:
        raise ConfigError("config: model.options.half_life and model.half_life_messages both "
                          "set: keep model.half_life_messages")
    _check_verdict_header_ignored(settings)
    kafka = settings.kafka
    if settings.http.learn_topic and settings.http.learn_topic not in kafka.input_topics:
        raise ConfigError(f"config: http.learn_topic {settings.http.learn_topic!r} must be one "
                          f"of kafka.input_topics {list(kafka.input_topics)}: learns go to an "
                          "input the group reads")
    topics = {kafka.output_topic, kafka.dead_letter_topic}
    clash = topics.intersection(kafka.input_topics)
    if clash or kafka.output_topic == kafka.dead_letter_topic:
        raise ConfigError(
            "config: kafka.output_topic, kafka.dead_letter_topic and kafka.input_topics "
            f"must be different topics, got {sorted(clash or topics)}"
        )
    return settings


def _check_preset(model: ModelSettings) -> None:
    if model.preset is None:
        return
    from streamnb.models.presets import preset_options

    try:
        preset_options(model.kind, model.preset)
    except ValueError as error:
        raise ConfigError(f"config: model.preset: {error}") from None


def _check_class_offsets(model: ModelSettings) -> None:
    """model.options.class_offsets: a table of finite numbers, naming only classes of
    model.labels when that is fixed (an offset for a misspelt class would move nothing)."""
    if "class_offsets" not in model.options:
        return
    from streamnb.models._base import check_class_offsets

    key = "model.options.class_offsets"
    try:
        offsets = check_class_offsets(model.options["class_offsets"])
    except ValueError as error:
        raise ConfigError(f"config: {key}: {error}") from None
    unknown = sorted(set(offsets) - set(model.labels)) if model.labels else []
    if unknown:
        raise ConfigError(f"config: {key} names {', '.join(map(repr, unknown))}, not in "
                          f"model.labels {list(model.labels)}")


def _resolve_security(kafka: KafkaSettings, base: Path) -> KafkaSettings:
    """``kafka`` with its TLS and SASL settings checked, relative files resolved against
    ``base`` and the password read from ``sasl_password_file``."""
    changes: dict[str, Any] = {}
    for key in ("sasl_password_file", "ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(kafka, key)
        if path is None:
            continue
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise ConfigError(f"config: kafka.{key}: no readable file at {path}")
        changes[key] = path
    password = kafka.sasl_password
    if "sasl_password_file" in changes:
        if password:
            raise ConfigError(
                "config: kafka.sasl_password_file and STREAMNB_KAFKA__SASL_PASSWORD are both "
                "set: keep one"
            )
        try:
            password = changes["sasl_password_file"].read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"config: kafka.sasl_password_file: cannot read: {error}") from None
        if not password:
            raise ConfigError("config: kafka.sasl_password_file: the file is empty")
        changes["sasl_password"] = password
    sasl = kafka.security_protocol.startswith("SASL_")
    if sasl:
        if not kafka.sasl_mechanism:
            raise ConfigError(
                f"config: kafka.sasl_mechanism must be set for {kafka.security_protocol} "
                f"(one of {', '.join(SASL_MECHANISMS)})"
            )
        if not kafka.sasl_username:
            raise ConfigError(
                f"config: kafka.sasl_username must be set for {kafka.security_protocol}"
            )
        if not password:
            raise ConfigError(
                f"config: kafka.sasl_password_file (or STREAMNB_KAFKA__SASL_PASSWORD) must be set "
                f"for {kafka.security_protocol}"
            )
    elif kafka.sasl_mechanism or kafka.sasl_username or password:
        raise ConfigError(
            f"config: kafka.security_protocol is {kafka.security_protocol}: SASL settings "
            "(sasl_mechanism, sasl_username, password) need SASL_PLAINTEXT or SASL_SSL"
        )
    tls_files = [k for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if getattr(kafka, k)]
    if tls_files and not kafka.security_protocol.endswith("SSL"):
        raise ConfigError(
            f"config: kafka.{tls_files[0]} needs kafka.security_protocol SSL or SASL_SSL, "
            f"got {kafka.security_protocol}"
        )
    if kafka.ssl_keyfile and not kafka.ssl_certfile:
        raise ConfigError("config: kafka.ssl_keyfile needs kafka.ssl_certfile (the client's)")
    return replace(kafka, **changes) if changes else kafka


def _check_verdict_header_ignored(settings: Settings) -> None:
    """The front door's verdict header must be among the fields the featurizer ignores: a
    mail learned from a mailbox carries it, and the model would learn its own verdicts."""
    from streamnb.features.options import DEFAULT_IGNORE_FIELDS

    header = settings.http.verdict_header
    ignored = settings.features.get("ignore_fields", DEFAULT_IGNORE_FIELDS)
    if header and isinstance(ignored, list | tuple) and header.lower() not in {
            str(name).strip().lower() for name in ignored}:
        raise ConfigError(f"config: http.verdict_header {header!r} must be one of "
                          f"features.ignore_fields {list(ignored)}: the model would learn its "
                          "own verdicts from mail that carries it")


#: Hosts the front door may serve on without TLS.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def _resolve_http(http: HttpSettings, base: Path) -> HttpSettings:
    """``http`` with its files resolved against ``base``, the password read from
    ``password_file`` and the listener's exposure checked: anything but loopback needs TLS
    (or an explicit ``allow_plaintext``, for a network of its own such as a container's)."""
    changes: dict[str, Any] = {}
    for key in ("password_file", "tls_certfile", "tls_keyfile"):
        path = getattr(http, key)
        if path is None:
            continue
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise ConfigError(f"config: http.{key}: no readable file at {path}")
        changes[key] = path
    if "password_file" in changes:
        if http.password:
            raise ConfigError("config: http.password_file and STREAMNB_HTTP__PASSWORD are both "
                              "set: keep one")
        try:
            password = changes["password_file"].read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"config: http.password_file: cannot read: {error}") from None
        if not password:
            raise ConfigError("config: http.password_file: the file is empty")
        changes["password"] = password
    if bool(http.tls_certfile) != bool(http.tls_keyfile):
        raise ConfigError("config: http.tls_certfile and http.tls_keyfile go together: set both")
    if (http.port and http.host not in LOOPBACK_HOSTS and not http.tls_certfile
            and not http.allow_plaintext):
        raise ConfigError(
            f"config: http.host {http.host!r} is not loopback: set http.tls_certfile and "
            "http.tls_keyfile, or http.allow_plaintext = true on a network of its own")
    if math.isfinite(http.greylist_score) and http.greylist_score > http.add_header_score:
        raise ConfigError(f"config: http.greylist_score ({http.greylist_score}) must not be "
                          f"above http.add_header_score ({http.add_header_score}): greylisting "
                          "is the milder action")
    if http.reject_score < http.add_header_score:
        raise ConfigError(f"config: http.reject_score ({http.reject_score}) must not be below "
                          f"http.add_header_score ({http.add_header_score})")
    return replace(http, **changes) if changes else http


def _as_dict(settings: Settings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in Settings.__dataclass_fields__}
