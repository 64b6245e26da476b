"""Logging setup: plain text for people, JSON lines for log collectors.

Operators need the decisions (partition assignment, checkpoints, dead letters), not one line per
message, so streamnb logs those at INFO and anything per message at DEBUG. Extra fields passed
with ``logger.info(..., extra={...})`` become keys of the JSON object.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import IO

__all__ = ["configure_logging", "JsonFormatter", "PLAIN_FORMAT"]

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("plain", "json")

# Attributes every LogRecord has; anything else on a record came in through `extra=`.
_RECORD_ATTRS = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message and extra fields.

    >>> import io, json, logging
    >>> stream = io.StringIO()
    >>> handler = logging.StreamHandler(stream)
    >>> handler.setFormatter(JsonFormatter())
    >>> log = logging.getLogger("streamnb.example")
    >>> log.addHandler(handler)
    >>> log.propagate = False
    >>> log.warning("dead letter", extra={"reason": "bad_json", "partition": 3})
    >>> record = json.loads(stream.getvalue())
    >>> record["level"], record["message"], record["reason"], record["partition"]
    ('WARNING', 'dead letter', 'bad_json', 3)
    """

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class _PlainFormatter(logging.Formatter):
    """The plain format, with extra fields appended as ``key=value``."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = [
            f"{key}={value!r}" if isinstance(value, str) and " " in value else f"{key}={value}"
            for key, value in record.__dict__.items()
            if key not in _RECORD_ATTRS and not key.startswith("_")
        ]
        if not extras:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} {' '.join(extras)}{newline}{rest}"


def configure_logging(level: str = "INFO", fmt: str = "plain", stream: IO[str] | None = None
                      ) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (stderr) in ``fmt``.

    Calling it again replaces the handler it installed before, so it is safe to call twice.
    Raises ``ValueError`` for an unknown level or format.

    >>> import io, logging
    >>> out = io.StringIO()
    >>> handler = configure_logging("info", "plain", stream=out)
    >>> logging.getLogger("streamnb.daemon").info("assigned", extra={"partitions": "in-0"})
    >>> out.getvalue().split(" ", 2)[2]
    'INFO streamnb.daemon: assigned partitions=in-0\\n'
    >>> logging.getLogger().removeHandler(handler)
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {FORMATS}")
    numeric = logging.getLevelName(str(level).upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else _PlainFormatter(PLAIN_FORMAT))
    handler._streamnb = True  # marks the handler this function owns
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_streamnb", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # Libraries chatty at INFO would drown the decisions an operator looks for.
    logging.getLogger("kafka").setLevel(max(numeric, logging.WARNING))
    return handler
