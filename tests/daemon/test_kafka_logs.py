"""What the daemon makes of kafka-python's log records."""

from __future__ import annotations

import logging

from kafka.errors import UnstableOffsetCommitError

from streamnb.daemon.kafka_io import PendingOffsetsAreNotErrors, _quiet_pending_offset_fetches


def _log_as_kafka_python_does(logger: logging.Logger, error: Exception) -> None:
    # kafka/coordinator/consumer.py, _handle_offset_fetch_response
    logger.error("Unknown error fetching offsets for %s: %s",
                 "TopicPartition(topic='in', partition=1)", error)


def test_an_offset_fetch_waiting_for_a_pending_commit_is_not_logged_as_an_error(caplog):
    logger = logging.getLogger("kafka.coordinator.consumer")
    _quiet_pending_offset_fetches()
    _quiet_pending_offset_fetches()  # once per daemon: the filter is added once
    assert sum(isinstance(f, PendingOffsetsAreNotErrors) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO, logger="kafka"):
        _log_as_kafka_python_does(logger, UnstableOffsetCommitError())
        _log_as_kafka_python_does(logger, RuntimeError("a real failure"))
    assert [(r.levelname, "UnstableOffsetCommitError" in r.getMessage())
            for r in caplog.records] == [("ERROR", False)]
    with caplog.at_level(logging.DEBUG, logger="kafka"):
        caplog.clear()
        _log_as_kafka_python_does(logger, UnstableOffsetCommitError())
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
