"""kafka-python's consumer records become the daemon's :class:`Record`, field for field."""

from __future__ import annotations

from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import TopicPartition

from streamnb.daemon.kafka_io import Record, _records


def test_consumer_records_become_records_with_their_fields_and_headers():
    items = [
        ConsumerRecord("in", 3, None, 41, 1_700_000_000_000, 0, b"k", b"v", [], None, 1, 1, -1),
        ConsumerRecord("in", 3, 5, 42, 1_700_000_000_001, 0, None, None,
                       [("h", b"1"), ("h", b"2")], None, -1, -1, 10),
    ]
    records = _records(TopicPartition("in", 3), items)
    assert records == [
        Record("in", 3, 41, b"k", b"v", (), 1_700_000_000_000),
        Record("in", 3, 42, None, None, (("h", b"1"), ("h", b"2")), 1_700_000_000_001),
    ]
    assert all(type(record) is Record for record in records)
    assert records[1].tp == ("in", 3) and records[1].headers[1] == ("h", b"2")
    assert records[0].timestamp_ms == 1_700_000_000_000
