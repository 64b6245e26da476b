"""Structured logging: one JSON object per line with the extra fields, or plain text."""

from __future__ import annotations

import io
import json
import logging

import pytest

from streamnb.logs import configure_logging


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_level_logger_message_and_extra_fields(restore_root_logger):
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    log = logging.getLogger("streamnb.daemon")
    log.info("checkpoint written", extra={"offsets": {"in-0": 17}, "seconds": 0.012})
    log.warning("dead letter", extra={"reason": "bad_json", "partition": 2, "offset": 99})
    log.debug("per-message noise")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = map(json.loads, lines)
    assert first["level"] == "INFO"
    assert first["logger"] == "streamnb.daemon"
    assert first["message"] == "checkpoint written"
    assert first["offsets"] == {"in-0": 17}
    assert first["time"].endswith("+00:00")
    assert (second["reason"], second["partition"], second["offset"]) == ("bad_json", 2, 99)


def test_json_keeps_exceptions_on_one_line(restore_root_logger):
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("streamnb").exception("failed", extra={"obj": object()})
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert "ValueError: boom" in record["exception"]
    assert record["obj"].startswith("<object")  # not JSON-serialisable: written with str()


def test_plain_format_and_level(restore_root_logger):
    out = io.StringIO()
    configure_logging("warning", "plain", stream=out)
    logging.getLogger("streamnb.daemon").info("hidden")
    logging.getLogger("streamnb.daemon").warning("revoked", extra={"partitions": "in-0,in-1"})
    text = out.getvalue()
    assert "hidden" not in text
    assert "WARNING streamnb.daemon: revoked partitions=in-0,in-1" in text


def test_calling_twice_does_not_duplicate_lines(restore_root_logger):
    out = io.StringIO()
    configure_logging("INFO", "plain", stream=out)
    configure_logging("INFO", "plain", stream=out)
    logging.getLogger("streamnb").info("once")
    assert out.getvalue().count("once") == 1


@pytest.mark.parametrize(("level", "fmt"), [("LOUD", "plain"), ("INFO", "xml")])
def test_bad_arguments_are_value_errors(level, fmt, restore_root_logger):
    with pytest.raises(ValueError):
        configure_logging(level, fmt)
