"""A poll of mail-sized input records is bounded by ``max_poll_records``, not by kafka-python's
1 MiB a partition (the real broker)."""

from __future__ import annotations

import time

import pytest

from streamnb.daemon.kafka_io import INPUT_PARTITION_FETCH_BYTES, produce
from tests.integration.test_kafka_io_warm_up import _kafka_io

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

RECORD_BYTES = 20_000  # a long mail as raw_b64


def test_a_poll_of_mail_sized_records_takes_more_than_one_mebibyte(kafka_bootstrap,
                                                                    topic_prefix):
    io = _kafka_io(kafka_bootstrap, topic_prefix)
    try:
        topic = io.settings.input_topics[0]
        count = 2 * INPUT_PARTITION_FETCH_BYTES // RECORD_BYTES
        produce(kafka_bootstrap, topic,
                ((f"m{i}".encode(), bytes([65 + i % 26]) * RECORD_BYTES) for i in range(count)))
        io.subscribe()
        deadline = time.monotonic() + 60
        records = []
        while not records and time.monotonic() < deadline:
            records = io.poll(200)
        got = sum(len(record.value) for record in records)
        assert got > 1024 * 1024, f"the first poll took {len(records)} records, {got} bytes"
        assert len(records) <= io.settings.max_poll_records
        assert [r.offset for r in records] == list(range(len(records)))  # in order, from 0
    finally:
        io.close()
