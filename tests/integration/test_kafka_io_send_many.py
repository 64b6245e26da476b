"""``KafkaIO.send_many`` on the real broker: the records a read_committed reader gets are those
of one ``send`` a record (keys, values, headers, order, partitions), an aborted transaction
shows none of them, and a failed batch, fencing and an oversized record are reported as
``send`` reports them."""

from __future__ import annotations

import contextlib
import logging
import random

import pytest
from kafka.errors import KafkaError, MessageSizeTooLargeError

from streamnb.daemon.changelog import changelog_topic
from streamnb.daemon.errors import FencedError
from streamnb.daemon.kafka_io import KafkaIO, create_topics, ensure_changelogs, read_all

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


class _NoWatchdog:
    def guard(self, what):
        return contextlib.nullcontext()


def _kafka_io(kafka_bootstrap: str, topic_prefix: str, transactional_id: str | None = None,
              topic_limits: dict[str, int] | None = None) -> KafkaIO:
    from streamnb.config import KafkaSettings

    topic, group = f"{topic_prefix}-in", f"{topic_prefix}-group"
    create_topics(kafka_bootstrap, {topic: 1, f"{topic_prefix}-out": 1, f"{topic_prefix}-dlq": 1})
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, input_topics=(topic,),
                             output_topic=f"{topic_prefix}-out",
                             dead_letter_topic=f"{topic_prefix}-dlq", group_id=group)
    changelogs = {topic: changelog_topic(group, topic)}
    ensure_changelogs(settings, changelogs)
    return KafkaIO(settings, lambda tps: None, lambda tps, lost: None, changelogs,
                   transactional_id or f"{group}-send-many", _NoWatchdog(), topic_limits)


def _read(kafka_bootstrap: str, topic: str, count: int) -> list[tuple]:
    records = read_all(kafka_bootstrap, topic, lambda got: len(got) >= count, timeout=60)
    assert len(records) == count
    return sorted((r.partition, r.offset, r.key, r.value, r.headers) for r in records)


def _by_partition(records: list[tuple]) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for partition, _, key, value, headers in records:
        out.setdefault(partition, []).append((key, value, headers))
    return out


def _records(rng: random.Random, count: int) -> list[tuple]:
    out = []
    for i in range(count):
        key = b"id-%d" % i
        value = None if rng.random() < 0.05 else rng.randbytes(rng.choice([0, 90, 700, 3000]))
        if rng.random() < 0.2:
            out.append((key, value, [("h", b"%d" % i), ("\u00e9", b"")]))
        else:
            out.append((key, value))
    return out


def test_the_installed_kafka_python_takes_the_fast_path(kafka_bootstrap, topic_prefix, caplog):
    """Fails when an upgrade of kafka-python changes what ``_BulkAppend`` relies on: the daemon
    still works (one ``send`` a record), but at the old cost, which should not go unnoticed."""
    with caplog.at_level(logging.DEBUG, logger="streamnb.kafka"):
        io = _kafka_io(kafka_bootstrap, topic_prefix)
    try:
        assert io.send_many_fallback is None
        assert io._bulk is not None
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("send_many")]
        assert said == ["send_many: records added to kafka-python's batches a batch at a time"]
    finally:
        io.close()


@pytest.mark.parametrize("partition", [None, 2])
def test_records_read_back_are_those_of_one_send_a_record(kafka_bootstrap, topic_prefix,
                                                          partition):
    """Three partitions (the key chooses one, or the partition is given); batches of at most
    20,000 bytes (the smaller topic limit), so the records fill many batches; some records
    sent one at a time between the calls, into the same batches."""
    one, many = f"{topic_prefix}-one", f"{topic_prefix}-many"
    create_topics(kafka_bootstrap, {one: 3, many: 3})
    io = _kafka_io(kafka_bootstrap, topic_prefix, topic_limits={one: 20_000, many: 1 << 20})
    rng = random.Random(7)
    records = _records(rng, 1500)
    try:
        assert io._bulk is not None
        for record in records:
            io.send(one, *record, partition=partition)
        start = 0
        while start < len(records):
            end = min(len(records), start + rng.choice([1, 2, 50, 400]))
            io.send_many(many, records[start:end], partition=partition)
            if end < len(records):
                io.send(many, *records[end], partition=partition)
                end += 1
            start = end
        io.commit({})
    finally:
        io.close()
    theirs = _read(kafka_bootstrap, one, len(records))
    ours = _read(kafka_bootstrap, many, len(records))
    assert _by_partition(ours) == _by_partition(theirs)
    assert len(_by_partition(ours)) == (3 if partition is None else 1)
    assert [offset for _, offset, *_ in ours] == [offset for _, offset, *_ in theirs]


def test_an_aborted_transaction_shows_nothing_to_read_committed(kafka_bootstrap, topic_prefix):
    io = _kafka_io(kafka_bootstrap, topic_prefix)
    out = io.settings.output_topic
    try:
        io.send_many(out, [(b"aborted-%d" % i, b"v") for i in range(500)])
        io.producer.flush(timeout=30)  # in the log, then aborted (not just dropped unsent)
        io.abort()
        io.send_many(out, [(b"kept", b"v")])
        io.commit({})
    finally:
        io.close()
    assert [key for _, _, key, _, _ in _read(kafka_bootstrap, out, 1)] == [b"kept"]
    everything = read_all(kafka_bootstrap, out, lambda got: len(got) >= 501, timeout=30,
                          isolation_level="read_uncommitted")
    assert len(everything) == 501


@pytest.mark.parametrize("how", ["send", "send_many"])
def test_a_failed_batch_makes_the_commit_raise(kafka_bootstrap, topic_prefix, how):
    """The broker refuses a whole batch for one of its records (a compacted topic takes no
    record without a key): every record of it is reported failed, the refused one with the
    broker's reason, as kafka-python's per-record futures report them; the commit raises,
    and nothing of the transaction is committed."""
    compacted = f"{topic_prefix}-compacted"
    create_topics(kafka_bootstrap, {compacted: 1}, {compacted: {"cleanup.policy": "compact"}})
    transactional_id = f"{topic_prefix}-failed"
    io = _kafka_io(kafka_bootstrap, topic_prefix, transactional_id)
    records = [(None if i == 7 else b"k%d" % i, b"v" * 50) for i in range(20)]
    try:
        if how == "send":
            for record in records:
                io.send(compacted, *record)
        else:
            io.send_many(compacted, records)
        io.producer.flush(timeout=30)
        failed = [type(error).__name__ for error in io._errors]
        assert failed == ["KafkaError"] * 7 + ["InvalidRecordError"] + ["KafkaError"] * 12
        with pytest.raises(KafkaError, match="InvalidRecordError"):
            io.commit({})
    finally:
        io.close()
    after = _kafka_io(kafka_bootstrap, topic_prefix, transactional_id)
    try:
        after.send_many(compacted, [(b"after", b"v")])
        after.commit({})
    finally:
        after.close()
    assert [key for _, _, key, _, _ in _read(kafka_bootstrap, compacted, 1)] == [b"after"]


def test_a_fenced_producer_is_detected_at_the_commit(kafka_bootstrap, topic_prefix):
    io = _kafka_io(kafka_bootstrap, topic_prefix, transactional_id=f"{topic_prefix}-fenced")
    out = io.settings.output_topic
    try:
        io.send_many(out, [(b"zombie-%d" % i, b"v") for i in range(100)])
        newer = _kafka_io(kafka_bootstrap, topic_prefix,
                          transactional_id=f"{topic_prefix}-fenced")
        try:
            with pytest.raises(FencedError):
                io.send_many(out, [(b"late", b"v")])
                io.commit({})
            newer.send_many(out, [(b"newer", b"v")])
            newer.commit({})
        finally:
            newer.close()
    finally:
        with contextlib.suppress(KafkaError, FencedError):
            io.close()
    assert [key for _, _, key, _, _ in _read(kafka_bootstrap, out, 1)] == [b"newer"]


def test_an_oversized_record_is_refused_before_it_is_sent(kafka_bootstrap, topic_prefix):
    """As ``send``: the records before it go into the transaction, it raises, nothing after
    it is sent (the daemon's room checks keep such records from the producer)."""
    io = _kafka_io(kafka_bootstrap, topic_prefix)
    out = io.settings.output_topic
    largest = io.producer.config["max_request_size"]
    try:
        with pytest.raises(MessageSizeTooLargeError):
            io.send_many(out, [(b"a", b"1"), (b"b", b"x" * largest), (b"c", b"3")])
        io.commit({})
    finally:
        io.close()
    assert [key for _, _, key, _, _ in _read(kafka_bootstrap, out, 1)] == [b"a"]


def test_a_kafka_python_not_as_expected_gets_one_send_a_record(kafka_bootstrap, topic_prefix,
                                                               monkeypatch, caplog):
    from streamnb.daemon import kafka_io

    monkeypatch.setattr(kafka_io._BulkAppend, "unusable",
                        classmethod(lambda cls, producer: "ProducerBatch has no records"))
    with caplog.at_level(logging.DEBUG, logger="streamnb.kafka"):
        io = _kafka_io(kafka_bootstrap, topic_prefix)
    out = io.settings.output_topic
    sent = []
    monkeypatch.setattr(io, "send", lambda *args, **kwargs: sent.append((args, kwargs)))
    try:
        assert io._bulk is None and io.send_many_fallback == "ProducerBatch has no records"
        assert ("send_many: one KafkaProducer.send a record (ProducerBatch has no records)"
                in [r.getMessage() for r in caplog.records])
        io.send_many(out, [(b"a", b"1"), (b"b", b"2", [("h", b"x")])], partition=0)
        assert sent == [((out, b"a", b"1"), {"partition": 0}),
                        ((out, b"b", b"2", [("h", b"x")]), {"partition": 0})]
    finally:
        io.close()


def test_a_producer_with_a_serializer_is_not_taken_past(kafka_bootstrap):
    from kafka import KafkaProducer

    from streamnb.daemon.kafka_io import _BulkAppend

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, value_serializer=str.encode)
    try:
        assert _BulkAppend.unusable(producer) == "a serializer is configured"
    finally:
        producer.close(timeout=5)
    plain = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        assert _BulkAppend.unusable(plain) is None  # not transactional: the path holds too
    finally:
        plain.close(timeout=5)
