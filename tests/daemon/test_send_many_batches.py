"""``KafkaIO.send_many``'s path into kafka-python's batches (``_BulkAppend``) writes what
kafka-python's own ``ProducerBatch.try_append`` writes, byte for byte, refuses what
``KafkaProducer.send`` refuses, and reports a failed batch's records as kafka-python's
per-record futures report them, a split batch's included. The real broker's side is in
tests/integration/test_kafka_io_send_many.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.errors import KafkaError, MessageSizeTooLargeError
from kafka.producer.producer_batch import ProducerBatch
from kafka.producer.record_accumulator import RecordAccumulator
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.structs import TopicPartition

from streamnb.daemon.kafka_io import _BulkAppend

TP = TopicPartition("out", 0)
TIMESTAMP = 1_764_633_600_000

# lengths past the table of small varints (8,192), without drawing each byte
large = st.tuples(st.binary(max_size=8), st.integers(8180, 8300)).map(
    lambda drawn: drawn[0] + b"\xab" * drawn[1])
keys = st.one_of(st.none(), st.binary(max_size=40), large)
values = st.one_of(st.none(), st.binary(max_size=300), large)
headers = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=20)), max_size=3)
records = st.lists(
    st.tuples(keys, values, headers).filter(lambda r: r[0] is not None or r[1] is not None),
    min_size=1, max_size=40)


def _batch(batch_size: int) -> ProducerBatch:
    return ProducerBatch(TP, MemoryRecordsBuilder(2, 0, batch_size))


@given(records=records, skipped=st.integers(0, 20_000), later_ms=st.integers(-5, 10**6),
       batch_size=st.sampled_from([300, 2_000, 20_000, 1 << 20]))
@settings(max_examples=400, deadline=None)
def test_a_batch_filled_at_once_is_what_kafka_python_appends_byte_for_byte(
        records, skipped, later_ms, batch_size):
    first, rest = records[0], records[1:]
    theirs, ours = _batch(batch_size), _batch(batch_size)
    for batch in (theirs, ours):
        assert batch.try_append(TIMESTAMP, *first) is not None  # a batch's first record
        batch.records.skip(skipped)  # offsets past the table of small varints
    taken = 0
    for record in rest:  # kafka-python's appends, until the batch is full
        if theirs.try_append(TIMESTAMP + later_ms, *record) is None:
            break
        taken += 1
    bodies = [_BulkAppend._body(*record) for record in rest]
    assert _BulkAppend._fill(ours, bodies, 0, TIMESTAMP + later_ms, lambda e: None) == taken
    assert ours.records.next_offset() == theirs.records.next_offset()
    assert ours.max_record_size == theirs.max_record_size
    assert len(ours._record_futures) == len(theirs._record_futures)
    assert ours.records.is_full() == theirs.records.is_full()
    for batch in (theirs, ours):
        batch.records.close()
    assert bytes(ours.records.buffer()) == bytes(theirs.records.buffer())
    read = [(r.key, r.value, r.headers) for b in MemoryRecords(ours.records.buffer()) for r in b]
    assert read == [(k, v, list(h)) for k, v, h in records[:1 + taken]]


def test_the_installed_kafka_python_passes_the_self_test():
    assert _BulkAppend._builds_what_kafka_python_builds(0) is None


@pytest.mark.parametrize("record, error", [
    ((None, None), ValueError),
    (("key", b"v"), TypeError),
    ((b"k", "value"), TypeError),
    ((b"k", b"v", ("h", b"1")), TypeError),
    ((b"k", b"v", [("h", "1")]), TypeError),
    ((b"k", b"v", [(b"h", b"1")]), TypeError),
    ((b"k", b"v", [("h", b"1", b"2")]), TypeError),
])
def test_a_record_kafka_producer_send_refuses_is_refused(record, error):
    with pytest.raises(error):
        _BulkAppend._body(*record)


class _Manager:
    def __init__(self):
        self.added: list = []

    def is_transactional(self):
        return True

    def maybe_add_partition_to_transaction(self, tp):
        self.added.append(tp)


class _Metadata:
    def partitions_for_topic(self, topic):
        return {0, 1, 2}


def _bulk_recording_appends() -> tuple[_BulkAppend, list]:
    """A ``_BulkAppend`` whose appends to the accumulator are recorded instead."""
    from types import SimpleNamespace

    from streamnb.daemon.kafka_io import KeyHashPartitioner

    bulk = _BulkAppend.__new__(_BulkAppend)
    bulk.producer, bulk.metadata = SimpleNamespace(_closed=False), _Metadata()
    bulk.partitioner, bulk.manager, bulk.max_request_size = KeyHashPartitioner(), _Manager(), 1000
    appended: list = []
    bulk._add = lambda tp, records, bodies: appended.append(
        (tp.partition, list(records), [_BulkAppend._body(*r) for r in records] == bodies))
    return bulk, appended


@pytest.mark.parametrize("partition", [None, 1])
def test_a_record_over_max_request_size_is_refused_after_the_records_before_it(partition):
    """What ``KafkaProducer.send`` does record by record: the ones before it are added (in
    every partition they go to), the oversized one raises, none after it is added."""
    bulk, appended = _bulk_recording_appends()
    records = [(b"key-%d" % i, b"v") for i in range(30)]
    records[20] = (b"big", b"x" * 1000)
    with pytest.raises(MessageSizeTooLargeError):
        bulk.send("out", records, partition, None)
    added = sorted(r for _, members, _ in appended for r in members)
    assert added == sorted(records[:20])
    assert all(same for _, _, same in appended)
    partitions = {p for p, _, _ in appended}
    assert partitions == ({0, 1, 2} if partition is None else {1})
    assert sorted(tp.partition for tp in bulk.manager.added) == sorted(partitions)
    for _, members, _ in appended:  # each partition's records in their order
        assert members == [r for r in records[:20] if r in members]
    appended.clear()
    bulk.manager.added.clear()
    with pytest.raises(MessageSizeTooLargeError):  # the first refused: nothing added
        bulk.send("out", [(b"big", b"x" * 1000), (b"a", b"1")], partition, None)
    assert appended == [] and bulk.manager.added == []


def test_a_keyed_record_goes_to_the_partition_send_would_choose():
    from kafka.partitioner import DefaultPartitioner

    bulk, appended = _bulk_recording_appends()
    records = [(b"key-%d" % i, b"v") for i in range(100)]
    bulk.send("out", records, None, None)

    class Cluster:
        def topics(self, exclude_internal_topics=True):
            return {"out"}

        def partitions_for_topic(self, topic):
            return {0, 1, 2}

        available_partitions_for_topic = partitions_for_topic

    for p, members, _ in appended:
        assert {DefaultPartitioner().partition("out", k, k, v, v, Cluster())
                for k, v in members} == {p}
    assert sum(len(m) for _, m, _ in appended) == 100 and len(appended) == 3


def _mixed_batch(errors: list) -> ProducerBatch:
    """A batch of kafka-python's own appends (a future each) and two ``_fill`` calls."""
    batch = _batch(1 << 20)
    for i in range(3):
        batch.try_append(TIMESTAMP, b"f%d" % i, b"v", []).add_errback(errors.append)
    _BulkAppend._fill(batch, [_BulkAppend._body(b"b%d" % i, b"v") for i in range(5)], 0,
                      TIMESTAMP, errors.append)
    batch.try_append(TIMESTAMP, b"f3", b"v", []).add_errback(errors.append)
    _BulkAppend._fill(batch, [_BulkAppend._body(b"c%d" % i, b"v") for i in range(4)], 0,
                      TIMESTAMP, errors.append)
    return batch


def test_a_failed_batch_reports_each_record_as_kafka_python_futures_do():
    errors: list = []
    batch = _mixed_batch(errors)
    batch.complete_exceptionally(KafkaError("refused"), lambda index: KafkaError(index))
    assert sorted(error.args[0] for error in errors) == list(range(13))


def test_an_aborted_batch_reports_each_record():
    errors: list = []
    batch = _mixed_batch(errors)
    batch.abort(KafkaError("aborted"))
    assert len(errors) == 13 and all(error.args == ("aborted",) for error in errors)


def test_a_delivered_batch_reports_nothing():
    errors: list = []
    _mixed_batch(errors).complete(100, -1)
    assert errors == []


def test_a_batch_split_for_its_size_reports_each_record_from_its_new_batch():
    errors: list = []
    batch = _mixed_batch(errors)
    batch.records.close()
    accumulator = RecordAccumulator(batch_size=1 << 20)
    assert accumulator.split_and_reenqueue(batch) == 2
    halves = list(accumulator._batches[TP])
    assert [h.record_count for h in halves] == [7, 6]
    assert [len(h._record_futures) for h in halves] == [7, 6]
    halves[0].complete(0, -1)
    assert errors == []
    halves[1].complete_exceptionally(KafkaError("too large"), lambda index: KafkaError(index))
    assert sorted(error.args[0] for error in errors) == list(range(6))
    # each record of the failed half reported once, by its index there
    assert len(errors) == 6
