"""A poll of mail-sized input records is bounded by ``max_poll_records``, not by kafka-python's
1 MiB a partition (the real broker)."""

from __future__ import annotations

import time

import pytest

from streamnb.daemon.kafka_io import produce
from tests.integration.test_kafka_io_warm_up import _kafka_io

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

RECORD_BYTES = 20_000  # a long mail as raw_b64


def first_poll(io, count: int) -> list:
    """The first non-empty poll of ``io`` after ``count`` records of RECORD_BYTES went to its
    input topic."""
    produce(io.settings.bootstrap_servers, io.settings.input_topics[0],
            ((f"m{i}".encode(), bytes([65 + i % 26]) * RECORD_BYTES) for i in range(count)))
    io.subscribe()
    deadline = time.monotonic() + 60
    records = []
    while not records and time.monotonic() < deadline:
        records = io.poll(200)
    return records


def test_a_poll_of_mail_sized_records_takes_more_than_one_mebibyte(kafka_bootstrap,
                                                                    topic_prefix):
    io = _kafka_io(kafka_bootstrap, topic_prefix)
    try:
        records = first_poll(io, 2 * io.settings.max_partition_fetch_bytes // RECORD_BYTES)
        got = sum(len(record.value) for record in records)
        assert got > 1024 * 1024, f"the first poll took {len(records)} records, {got} bytes"
        assert len(records) <= io.settings.max_poll_records
        assert [r.offset for r in records] == list(range(len(records)))  # in order, from 0
    finally:
        io.close()


def test_kafka_max_partition_fetch_bytes_bounds_a_poll(kafka_bootstrap, topic_prefix):
    """An operator short of memory sets the fetch back to kafka-python's 1 MiB."""
    io = _kafka_io(kafka_bootstrap, topic_prefix, max_partition_fetch_bytes=1024 * 1024)
    try:
        records = first_poll(io, 4 * 1024 * 1024 // RECORD_BYTES)
        got = sum(len(record.value) for record in records)
        assert 0 < got <= 1024 * 1024 + RECORD_BYTES, (len(records), got)
    finally:
        io.close()
