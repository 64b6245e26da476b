"""Everything that talks to Kafka: with :mod:`streamnb.daemon.records` (kafka-python's
record batches read in C), the only module that imports ``kafka`` (kafka-python).

The daemon sees partitions as ``(topic, partition)`` tuples and records as :class:`Record`, so
the loop can be tested against an in-memory fake with the same surface as :class:`KafkaIO`
(``tests/daemon/fakes.py``): the group consumer of the inputs (``poll``, ``seek``,
``highwater``, ``committed``), the transaction (``send``, ``commit``, ``abort``) and the
changelog reader (``tail_*``).

Why the producer is in the daemon's process: the commit protocol needs the producer's
transaction and the consumer's group metadata together (``send_offsets_to_transaction``), in
order with the rebalance callbacks, which commit before partitions are given up. A producer in
a child process (what the daemon used for its at-least-once outputs) would need a
request-reply round trip for each of those steps and a way to fence the child with the
parent; one transactional producer next to the consumer has neither problem.

Threading note (kafka-python 3): rebalance callbacks run on the consumer's IO thread while the
caller's ``poll`` waits for the rebalance to finish, so they never overlap the processing of a
batch. They may use the producer and the changelog reader (other clients with their own IO),
but not this consumer's coordinator: :meth:`KafkaIO.committed` is called from the loop.

>>> Record("mail", 0, 7, b"m1", b"{}", (), 0).tp
('mail', 0)
"""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
import types
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    MessageSizeTooLargeError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)
from kafka.partitioner import DefaultPartitioner
from kafka.producer.producer_batch import ProducerBatch
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.record.util import encode_varint
from kafka.structs import MemberState, OffsetAndMetadata

from streamnb.config import KafkaSettings
from streamnb.daemon import records
from streamnb.daemon.errors import ChangelogTopicError, FencedError

try:  # where kafka-python 3 keeps it; only the start-up lookup of the group coordinator uses it
    from kafka.protocol.metadata import CoordinatorType
except ImportError:  # pragma: no cover - another kafka-python: the first commit looks it up
    CoordinatorType = None

__all__ = [
    "KAFKA_DEFAULT_MAX_MESSAGE_BYTES", "KafkaIO", "KeyHashPartitioner", "Record", "TP",
    "SOCKET_READ_BYTES", "client_config", "murmur2", "read_sockets_in_larger_chunks",
    "ChangelogFollower", "committed_offsets", "create_topics", "end_offsets",
    "ensure_changelogs", "learn_producer", "open_admin", "produce", "producer_config",
    "read_all", "read_to_end", "record_size", "topic_limits",
]

log = logging.getLogger("streamnb.kafka")

TP = tuple[str, int]


#: The most one ``recv`` takes from a broker's socket. kafka-python 3 reads 4 KiB a call: a
#: fetch of 4 MiB of mail is a thousand calls, and each gives up the GIL and must win it back
#: from the loop's thread, which holds it while it featurizes (the fetch read at the next
#: poll, the loop waiting). Larger reads cut the IO thread's CPU a mail and the loop's waits.
SOCKET_READ_BYTES = 256 * 1024
#: kafka-python's read size, a constant of the transports' ``_sock_recv``.
_KAFKA_PYTHON_READ_BYTES = 4096


def read_sockets_in_larger_chunks() -> list[str]:
    """Make kafka-python's transports read up to :data:`SOCKET_READ_BYTES` a ``recv``
    instead of 4 KiB, in this process; the reasons of the transports left as they are
    (empty: all done, or done before).

    Each transport's ``_sock_recv`` is replaced by the very same function with its one read
    size changed (its code's constant), so kafka-python's own reading, errors and logging
    stay as they are. A kafka-python whose ``_sock_recv`` is not that (no such method, or not
    exactly one constant 4096 next to ``recv``) keeps its own, and the daemon runs as
    before."""
    try:
        from kafka.net import transport
    except ImportError as error:  # pragma: no cover - another kafka-python layout
        return [f"kafka.net.transport: {error}"]
    left = []
    for name in ("KafkaTCPTransport", "KafkaSSLTransport"):
        owner = getattr(transport, name, None)
        function = None if owner is None else owner.__dict__.get("_sock_recv")
        if getattr(function, "_streamnb_read_bytes", None) == SOCKET_READ_BYTES:
            continue
        code = getattr(function, "__code__", None)
        sizes = [] if code is None else [
            i for i, c in enumerate(code.co_consts) if type(c) is int
            and c == _KAFKA_PYTHON_READ_BYTES]
        if len(sizes) != 1 or "recv" not in code.co_names:
            left.append(f"{name}._sock_recv is not the one this replaces")
            continue
        consts = list(code.co_consts)
        consts[sizes[0]] = SOCKET_READ_BYTES
        larger = types.FunctionType(code.replace(co_consts=tuple(consts)), function.__globals__,
                                    function.__name__, function.__defaults__,
                                    function.__closure__)
        larger.__qualname__, larger.__doc__ = function.__qualname__, function.__doc__
        larger._streamnb_read_bytes = SOCKET_READ_BYTES
        owner._sock_recv = larger
    return left


class PendingOffsetsAreNotErrors(logging.Filter):
    """kafka-python logs each retry of an offset fetch that a pending transaction holds
    (``UNSTABLE_OFFSET_COMMIT``, a retriable error it retries itself) at ERROR, and a
    partition's new owner waits for its previous owner's commit that way by design (KIP-447's
    ``require_stable``; "Assignment, revocation, failover" in docs/daemon.md). Those records
    are kept at DEBUG; every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "UnstableOffsetCommitError" in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _quiet_pending_offset_fetches() -> None:
    logger = logging.getLogger("kafka.coordinator.consumer")
    if not any(isinstance(f, PendingOffsetsAreNotErrors) for f in logger.filters):
        logger.addFilter(PendingOffsetsAreNotErrors())


class Record(NamedTuple):
    """One input record, decoupled from kafka-python's types (a named tuple: made for every
    polled record, it costs a third of a frozen dataclass's 0.6 µs)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)


def _records(tp: TopicPartition, items) -> list[Record]:
    """kafka-python's consumer records of one partition as our own :class:`Record`: built as
    the tuple it is (a named tuple's ``__new__`` is a Python function: 266 against 167 ns a
    record, polls of 500)."""
    topic, partition, new = tp.topic, tp.partition, tuple.__new__
    return [
        new(Record, (topic, partition, r.offset, r.key, r.value,
                     tuple(r.headers) if r.headers else (), r.timestamp))
        for r in items
    ]


def _polled(consumer: KafkaConsumer, timeout_ms: int) -> list[Record]:
    """One poll of a consumer without a group, as :class:`Record` s."""
    records: list[Record] = []
    for tp, items in consumer.poll(timeout_ms=timeout_ms).items():
        records.extend(_records(tp, items))
    return records


def _lag(consumer: KafkaConsumer) -> int:
    """Records between a consumer's positions and the ends of its partitions, as of its last
    fetch (a partition not fetched yet counts as caught up)."""
    lag = 0
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is not None:
            lag += max(0, high - consumer.position(tp))
    return lag


# kafka.assignment_strategy -> kafka-python's assignor (config.ASSIGNMENT_STRATEGIES).
ASSIGNORS = {
    assignor.name: assignor
    for assignor in (RangePartitionAssignor, RoundRobinPartitionAssignor,
                     StickyPartitionAssignor, CooperativeStickyAssignor)
}


def _tps(partitions: Iterable[TopicPartition]) -> list[TP]:
    return sorted((p.topic, p.partition) for p in partitions)


# kafka-python's batch size (outputs and changelog records), unless a topic accepts less: a
# mail's changelog records are about 8 KB (its feedback entry's token counts, most of it), and
# producing SpamAssassin's commits (51 MB in 525 records) took 20-30 us a mail of CPU in
# batches of 256 KiB against 11-15 in batches of 1 MiB (Kafka's default max.message.bytes
# is 1 MiB and 12 bytes; a record larger than the batch size is a batch of its own).
PRODUCER_BATCH_BYTES = 1024 * 1024
#: The transactional producer's retry_backoff_ms (kafka-python's default: 100). kafka-python
#: sleeps this long before every retried transactional request, and looks a coordinator up
#: after waiting as long: a new transaction's AddPartitionsToTxn or AddOffsetsToTxn that meets
#: CONCURRENT_TRANSACTIONS (the previous commit's markers still being written, tens of ms)
#: waited 100-270 ms, and every producer's first send_offsets_to_transaction 200 ms (the
#: group coordinator's lookup, then its connection). The Java client retries these after
#: 20 ms (ADD_PARTITIONS_RETRY_BACKOFF_MS). kafka-python has one setting for every retry, so
#: a produce request refused by a moving partition leader is also retried after 10 ms (until
#: the new leader is known: a broker that cannot be reached is retried on
#: reconnect_backoff_ms, exponentially, as before).
TRANSACTION_RETRY_BACKOFF_MS = 10
# Kafka's default max.message.bytes (1 MiB + 12), for a topic whose limit cannot be read.
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1048588


def client_config(settings: KafkaSettings) -> dict:
    """The connection and security arguments every kafka-python client of the daemon gets
    (consumer, producer child, admin client), from the ``[kafka]`` settings.

    >>> from streamnb.config import KafkaSettings
    >>> sorted(client_config(KafkaSettings()))
    ['bootstrap_servers', 'security_protocol']
    >>> config = client_config(KafkaSettings(security_protocol="SASL_SSL",
    ...     sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="pw"))
    >>> config["sasl_mechanism"], config["sasl_plain_username"], config["ssl_check_hostname"]
    ('SCRAM-SHA-512', 'u', True)
    """
    config: dict = {
        "bootstrap_servers": settings.bootstrap_servers,
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol.startswith("SASL_"):
        config["sasl_mechanism"] = settings.sasl_mechanism
        config["sasl_plain_username"] = settings.sasl_username
        config["sasl_plain_password"] = settings.sasl_password
    if settings.security_protocol.endswith("SSL"):
        config["ssl_check_hostname"] = settings.ssl_check_hostname
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(settings, key) is not None:
                config[key] = str(getattr(settings, key))
    return config


def record_size(key: bytes | None, value: bytes | None, headers=None) -> int:
    """The bytes one record takes in a record batch of its own: what the producer checks
    against ``max_request_size`` and the broker against the topic's ``max.message.bytes``."""
    return DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers or [])


_MURMUR_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_WORDS = struct.Struct("<I").iter_unpack


def murmur2(data: bytes) -> int:
    """The Java client's murmur2 of ``data``, as kafka-python's pure-Python
    ``kafka.partitioner.default.murmur2`` computes it, reading the key in 4-byte words (2.8x
    faster on a 47-byte SpamAssassin key: 2.8 against 8.0 µs).

    >>> from kafka.partitioner.default import murmur2 as kafka_python_murmur2
    >>> murmur2(b"sms-1234-0") == kafka_python_murmur2(b"sms-1234-0")
    True
    """
    length = len(data)
    h = 0x9747B28C ^ length
    end = length & ~3
    for (k,) in _WORDS(data[:end]):
        k = (k * _MURMUR_M) & _MASK32
        k = ((k ^ (k >> 24)) * _MURMUR_M) & _MASK32
        h = ((h * _MURMUR_M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h = ((h ^ data[end]) * _MURMUR_M) & _MASK32
    h ^= h >> 13
    h = (h * _MURMUR_M) & _MASK32
    return h ^ (h >> 15)


class KeyHashPartitioner(DefaultPartitioner):
    """kafka-python's default partitioner, choosing the same partition for every record at a
    fraction of its cost: a keyed record goes to ``murmur2(key) & 0x7fffffff`` modulo the
    topic's partition count, among its partitions in order, and one without a key to a random
    available partition (the default's own code). Half of kafka-python's ``send`` of a
    prediction was the default's choice (16 against 8.4 µs with an explicit partition, on the
    local broker): it lists the topic's partitions twice, sorts them and hashes the key byte by
    byte in Python even when the topic has a single partition, which takes no hash here."""

    def partition(self, topic, key, serialized_key, value, serialized_value, cluster):
        if serialized_key is None:
            return super().partition(topic, key, serialized_key, value, serialized_value,
                                     cluster)
        partitions = cluster.partitions_for_topic(topic)
        if partitions is None:
            raise ValueError(f"Topic {topic} not found in ClusterMetadata")
        if len(partitions) == 1:
            (only,) = partitions
            return only
        ordered = sorted(partitions)
        return ordered[(murmur2(serialized_key) & 0x7FFFFFFF) % len(ordered)]


def producer_config(settings: KafkaSettings, topic_limits: dict[str, int] | None = None) -> dict:
    """kafka-python ``KafkaProducer`` arguments for the daemon's outputs; ``topic_limits`` maps
    each topic it writes to what a record batch there may take (its ``max.message.bytes``).

    A request may carry the largest record any topic accepts; a batch, which kafka-python fills
    with records of one partition up to ``batch_size`` bytes, must fit the topic that accepts
    least (the broker checks the whole batch against ``max.message.bytes``)."""
    limits = list((topic_limits or {}).values()) or [KAFKA_DEFAULT_MAX_MESSAGE_BYTES]
    return {
        **client_config(settings),
        "client_id": f"{settings.client_id}-producer",
        "acks": settings.producer_acks if settings.producer_acks == "all" else int(
            settings.producer_acks
        ),
        "linger_ms": settings.producer_linger_ms,
        "batch_size": min(PRODUCER_BATCH_BYTES, min(limits)),
        "max_request_size": max(limits),
        "enable_idempotence": settings.producer_acks == "all",
        "partitioner": KeyHashPartitioner(),
    }


def transactional_producer_config(settings: KafkaSettings, transactional_id: str,
                                  topic_limits: dict[str, int] | None = None) -> dict:
    """The producer of the commit protocol: idempotent, acks=all, one transactional id."""
    return {
        **producer_config(settings, topic_limits),
        "acks": "all",
        "enable_idempotence": True,
        "transactional_id": transactional_id,
        "transaction_timeout_ms": settings.transaction_timeout_ms,
        "retry_backoff_ms": TRANSACTION_RETRY_BACKOFF_MS,
    }


# ---------------------------------------------------------------------- many records at once
# kafka-python's KafkaProducer.send costs 12-14 us of CPU a record on a 90-byte prediction: its
# checks, a debug log line whose str(self) is built on every call, the transaction manager's
# partition check under its lock, the accumulator's per-partition lock, a FutureRecordMetadata
# per record and the batch builder's Python varints. KafkaIO.send_many hands a list of records
# of one topic to the accumulator in one call instead (_BulkAppend), through kafka-python's
# internals, which it checks once at start-up (_BulkAppend.unusable) and else leaves alone.

def _varint_bytes(value: int) -> bytes:
    """``value`` as the record format writes it (zigzag varint; kafka-python's encoder)."""
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


# The varints of 0..8191 (lengths and offset deltas of small records), made once (300 KB).
_SMALL_VARINTS = 1 << 13
_VARINTS = [_varint_bytes(n) for n in range(_SMALL_VARINTS)]
_NULL = _varint_bytes(-1)  # the length of a null key or value
_NO_HEADERS = _VARINTS[0]
_BYTE_LIKE = (bytes, bytearray, memoryview)


def _varint(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < _SMALL_VARINTS else _varint_bytes(value)


class _Delivery:
    """Reports the delivery failures of the records one ``send_many`` call put in one producer
    batch, from the batch's own result, instead of a ``FutureRecordMetadata`` for each record
    (what kafka-python's per-record futures would report: ``record_exceptions_fn`` of each
    record's index). It stands in the batch's ``_record_futures`` once for each of those records,
    so a batch that the broker refuses for its size, which kafka-python splits and re-binds
    record by record (``RecordAccumulator.split_and_reenqueue`` calls ``rebind``), still reports
    each record from the batch it moved to."""

    __slots__ = ("on_error", "first", "count", "moved")

    def __init__(self, on_error: Callable[[BaseException], None], produce_future, first: int,
                 count: int):
        self.on_error = on_error
        self.first = first
        self.count = count
        self.moved: dict | None = None
        produce_future.add_callback(self._done)

    def _done(self, result) -> None:
        if result[2] is not None:
            self._fail(result[2], range(self.first, self.first + self.count))

    def _fail(self, record_error, indices) -> None:
        for index in indices:
            error = record_error(index)
            self.on_error(error() if type(error) is type else error)

    def rebind(self, produce_future, index: int) -> None:
        """One of the records now has ``index`` in the batch of ``produce_future``."""
        moved = self.moved
        if moved is None:
            moved = self.moved = {}
        indices = moved.get(produce_future)
        if indices is None:
            indices = moved[produce_future] = []
            produce_future.add_callback(self._done_moved, indices)
        indices.append(index)

    def _done_moved(self, indices: list[int], result) -> None:
        if result[2] is not None:
            self._fail(result[2], indices)


class _BulkAppend:
    """Adds many records of one topic to a kafka-python producer's open transaction at once:
    each record checked as ``KafkaProducer.send`` checks it (the same errors, raised at the same
    record, the records before it added), the transaction manager told of each partition once,
    the accumulator's lock of a partition taken once a batch, the records written into the
    current batch's builder as its own ``append`` writes them (with the varints of small
    numbers looked up), a new batch made by kafka-python's own ``RecordAccumulator.append``
    when one is full (its sender then woken, as ``send`` wakes it), and each batch's delivery
    failures reported per record (:class:`_Delivery`). The records of one call get one
    timestamp (``send`` takes the clock at every record, a few microseconds apart).

    It reads and writes kafka-python's internals (3.0.x): :meth:`unusable` checks them once,
    including a batch built both ways byte for byte, and :class:`KafkaIO` falls back to one
    ``send`` a record when they are not as expected."""

    def __init__(self, producer: KafkaProducer, on_error: Callable[[BaseException], None]):
        self.producer = producer
        self.accumulator = producer._accumulator
        self.manager = producer._transaction_manager
        self.sender = producer._sender
        self.metadata = producer._metadata
        self.partitioner = producer.config["partitioner"]
        self.max_request_size = producer.config["max_request_size"]
        self.on_error = on_error

    @classmethod
    def unusable(cls, producer: KafkaProducer) -> str | None:
        """Why ``producer`` cannot take this path (None: it can)."""
        try:
            config, accumulator = producer.config, producer._accumulator
            if config["key_serializer"] is not None or config["value_serializer"] is not None:
                return "a serializer is configured"
            if not isinstance(config["partitioner"], DefaultPartitioner):
                return f"partitioner {type(config['partitioner']).__name__}"
            if accumulator.config["message_version"] != 2:
                return f"record format v{accumulator.config['message_version']}"
            manager = producer._transaction_manager
            needed = [
                (producer, "_closed"), (producer, "_metadata"), (producer._sender, "wakeup"),
                (producer._metadata, "partitions_for_topic"), (accumulator, "_batches"),
                (accumulator, "_tp_lock"), (accumulator, "_closed"), (accumulator, "append"),
                (accumulator._appends_in_progress, "increment"),
                (accumulator._appends_in_progress, "decrement"),
            ]
            if manager is not None:
                needed += [(manager, "maybe_add_partition_to_transaction"),
                           (manager, "is_transactional")]
            for owner, name in needed:
                if not hasattr(owner, name):
                    return f"{type(owner).__name__} has no {name}"
            split = getattr(type(accumulator), "split_and_reenqueue", None)
            if split is not None and not {"rebind", "_record_futures"} <= set(
                    split.__code__.co_names):
                return "split_and_reenqueue does not rebind each record's future"
            return cls._builds_what_kafka_python_builds(accumulator.config["compression_attrs"])
        except (AttributeError, KeyError, TypeError) as error:
            return f"{type(error).__name__}: {error}"

    @classmethod
    def _builds_what_kafka_python_builds(cls, compression: int) -> str | None:
        """A batch filled by :meth:`_fill` against one filled by kafka-python's
        ``ProducerBatch.try_append``: None if they are the same, byte for byte."""
        records = [(b"k", b"v" * 200, []), (None, b"value", []), (b"tombstone", None, []),
                   (b"", b"", [("h", b"1"), ("\u00e9", b"")]), (b"k" * 300, b"v", [])]
        base, tp = 1_700_000_000_123, TopicPartition("t", 0)
        theirs = ProducerBatch(tp, MemoryRecordsBuilder(2, compression, 1 << 16))
        for i, (key, value, headers) in enumerate(records):
            theirs.try_append(base + 7 * i, key, value, headers)
        ours = ProducerBatch(tp, MemoryRecordsBuilder(2, compression, 1 << 16))
        ours.try_append(base, *records[0])
        tail = records[1:]
        appended = sum(cls._fill(ours, [cls._body(*record)], 0, base + 7 * i, lambda e: None)
                       for i, record in enumerate(tail, start=1))
        if appended != len(tail):
            return f"{appended} of {len(tail)} records appended in the self-test"
        if ours.records.next_offset() != theirs.records.next_offset():
            return "the offsets differ in the self-test"
        if (ours.max_record_size, len(ours._record_futures)) != (
                theirs.max_record_size, len(theirs._record_futures)):
            return "the batch's sizes or futures differ in the self-test"
        ours.records.close()
        theirs.records.close()
        if bytes(ours.records.buffer()) != bytes(theirs.records.buffer()):
            return "the batches differ byte for byte in the self-test"
        return None

    @staticmethod
    def _body(key, value, headers=None) -> bytes:
        """A record's key, value and headers as a batch holds them (after its attributes,
        timestamp and offset), with ``KafkaProducer.send``'s checks of their types."""
        if key is None:
            if value is None:
                raise ValueError("Need at least one: key or value")
            key_length, key = _NULL, b""
        elif type(key) in _BYTE_LIKE:
            key_length = _varint(len(key))
        else:
            raise TypeError(f"Unsupported type for serialized key: {type(key)}")
        if value is None:
            value_length, value = _NULL, b""
        elif type(value) in _BYTE_LIKE:
            value_length = _varint(len(value))
        else:
            raise TypeError(f"Unsupported type for serialized value: {type(value)}")
        if headers is None:
            return b"".join((key_length, key, value_length, value, _NO_HEADERS))
        if not isinstance(headers, list):
            raise TypeError("headers must be list-type")
        if not headers:
            return b"".join((key_length, key, value_length, value, _NO_HEADERS))
        parts = [key_length, key, value_length, value, _varint(len(headers))]
        for item in headers:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], bytes)):
                raise TypeError("All headers items must be (str, bytes) tuples")
            name = item[0].encode("utf-8")
            parts += (_varint(len(name)), name, _varint(len(item[1])), item[1])
        return b"".join(parts)

    @staticmethod
    def _fill(batch, bodies: list[bytes], start: int, timestamp: int,
              on_error: Callable[[BaseException], None]) -> int:
        """Append ``bodies[start:]`` to ``batch`` (open, not empty; the caller holds its
        partition's lock) while they fit, as ``DefaultRecordBatchBuilder.append`` writes them;
        returns how many it appended."""
        records = batch.records
        builder = records._builder
        buffer, limit = builder._buffer, builder._batch_size
        offset = first = records._next_offset
        head = b"\x00" + _varint(timestamp - builder._first_timestamp)  # attributes, delta
        size, largest, varints, small = len(buffer), 0, _VARINTS, _SMALL_VARINTS
        for i in range(start, len(bodies)):
            body = bodies[i]
            offset_part = varints[offset] if offset < small else _varint_bytes(offset)
            length = len(head) + len(offset_part) + len(body)
            if length < small:  # one bytes object, one append (faster than four)
                record = b"".join((varints[length], head, offset_part, body))
                if size + len(record) > limit:
                    break
                buffer += record
                length = len(record)
            else:  # a large body is copied once, into the batch
                length_part = _varint_bytes(length)
                length += len(length_part)
                if size + length > limit:
                    break
                buffer += length_part
                buffer += head
                buffer += offset_part
                buffer += body
            size += length
            if length > largest:
                largest = length
            offset += 1
        count = offset - first
        if count:
            records._next_offset = offset
            builder._num_records += count
            builder._last_offset = offset - 1
            if builder._max_timestamp < timestamp:
                builder._max_timestamp = timestamp
            if largest > batch.max_record_size:
                batch.max_record_size = largest
            batch.last_append = time.monotonic()
            batch._record_futures.extend(
                [_Delivery(on_error, batch.produce_future, first, count)] * count)
        return count

    def send(self, topic: str, records: list[tuple], partition: int | None,
             send_one: Callable[..., None]) -> None:
        """Add ``records`` (``(key, value)`` or ``(key, value, headers)``) to ``topic``, in
        order; ``send_one(topic, key, value, headers, partition)`` sends one the way
        ``KafkaProducer.send`` does, for what this path leaves to it."""
        if self.producer._closed:
            raise IllegalStateError("KafkaProducer already closed!")
        partitions = self.metadata.partitions_for_topic(topic)
        if partitions is None or (partition is None and len(partitions) > 1
                                  and any(record[0] is None for record in records)):
            # The topic's metadata is not known yet (send waits for it, and fails its records
            # when the broker refuses), or keyless records go to the sticky partitioner.
            for record in records:
                send_one(topic, *record, partition=partition)
            return
        if partition is not None:
            if partition < 0:
                raise ValueError("partition must be >= 0")
            if partition not in partitions:
                raise ValueError(f"Unrecognized partition {partition} for topic {topic}")
        elif len(partitions) == 1:
            (partition,) = partitions
        # Every record is checked, in order, before any is added: the records before one that
        # send would refuse are added, in their partitions, and it raises.
        bodies, refused = self._bodies(records)
        records = records[:len(bodies)]
        if partition is not None:
            self._append(TopicPartition(topic, partition), records, bodies)
        else:
            by_partition: dict[int, tuple[list, list]] = {}
            choose, metadata = self.partitioner.partition, self.metadata
            for record, body in zip(records, bodies, strict=True):
                chosen = choose(topic, record[0], record[0], record[1], record[1], metadata)
                members = by_partition.get(chosen)
                if members is None:
                    members = by_partition[chosen] = ([], [])
                members[0].append(record)
                members[1].append(body)
            for chosen, (members, their_bodies) in by_partition.items():
                self._append(TopicPartition(topic, chosen), members, their_bodies)
        if refused is not None:
            raise refused

    def _bodies(self, records: list[tuple]) -> tuple[list[bytes], BaseException | None]:
        """Each record's body, up to the first that ``KafkaProducer.send`` would refuse, and
        the error it would raise for it (None: none)."""
        bodies: list[bytes] = []
        body_of, most = self._body, self.max_request_size - _RECORD_ESTIMATE_OVERHEAD
        for record in records:
            try:
                body = body_of(*record)
            except (TypeError, ValueError) as error:
                return bodies, error
            if len(body) > most:
                return bodies, MessageSizeTooLargeError(
                    f"The message is {len(body) + _RECORD_ESTIMATE_OVERHEAD} bytes when "
                    "serialized which is larger than the maximum request size you have "
                    "configured with the max_request_size configuration")
            bodies.append(body)
        return bodies, None

    def _append(self, tp: TopicPartition, records: list[tuple], bodies: list[bytes]) -> None:
        if not bodies:
            return
        manager = self.manager
        if manager is not None and manager.is_transactional():
            manager.maybe_add_partition_to_transaction(tp)
        self._add(tp, records, bodies)

    def _add(self, tp: TopicPartition, records: list[tuple], bodies: list[bytes]) -> None:
        accumulator, on_error, fill = self.accumulator, self.on_error, self._fill
        timestamp = int(time.time() * 1000)
        lock = accumulator._tp_lock(tp)
        done, count, wake = 0, len(bodies), False
        accumulator._appends_in_progress.increment()
        try:
            while done < count:
                with lock:
                    if accumulator._closed:
                        raise IllegalStateError("RecordAccumulator is closed")
                    batches = accumulator._batches[tp]
                    batch = batches[-1] if batches else None
                    if (batch is not None and not batch.records._closed
                            and batch.records._builder._first_timestamp is not None):
                        done += fill(batch, bodies, done, timestamp, on_error)
                        wake = len(batches) > 1 or batch.records.is_full()
                if done < count:
                    # No open batch, or it is full: kafka-python's own path makes the next
                    # one, with this record in it.
                    key, value, *headers = records[done]
                    result = accumulator.append(tp, timestamp, key, value,
                                                (headers[0] if headers else None) or [])
                    result[0].add_errback(on_error)
                    done += 1
                    if result[1] or result[2]:
                        self.sender.wakeup()
                        wake = False
        finally:
            accumulator._appends_in_progress.decrement()
        if wake:
            self.sender.wakeup()


# A record's size as KafkaProducer.send estimates it, less its key, value and headers.
_RECORD_ESTIMATE_OVERHEAD = (DefaultRecordBatchBuilder.HEADER_STRUCT.size
                             + DefaultRecordBatchBuilder.MAX_RECORD_OVERHEAD)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, io: KafkaIO):
        self.io = io

    def on_partitions_revoked(self, revoked):
        if revoked:
            self.io.on_revoked(_tps(revoked), lost=False)
            if self.io.incremental and self.io.consumer.assignment():
                # An incremental revocation comes after the join has completed, and the
                # partitions kept are processed on; kafka-python calls on_assigned only when
                # some are added, so say here that this member's rebalance is over (the
                # daemon's stall timer, started by the revocation, stops).
                self.io.on_assigned([])

    def on_partitions_assigned(self, assigned):
        self.io.on_assigned(_tps(assigned))

    def on_partitions_lost(self, lost):
        if lost:
            self.io.on_revoked(_tps(lost), lost=True)


_FENCING = (ProducerFencedError, CommitFailedError, FencedInstanceIdError,
            IllegalGenerationError, UnknownMemberIdError)


def _raise_fenced(error: BaseException) -> None:
    """Raise :class:`FencedError` if ``error`` (or the error it wraps: kafka-python reports a
    fenced producer's later sends as a plain ``KafkaError`` holding the first) says that a
    newer producer or group member has taken over."""
    chain: list = []
    link: BaseException | None = error
    while link is not None and len(chain) < 10:  # a rebalance listener's error, say
        chain.append(link)
        link = link.__cause__
    causes = chain + [arg for e in chain for arg in getattr(e, "args", ())]
    for cause in causes:
        if isinstance(cause, FencedError):
            raise cause from error
        if isinstance(cause, _FENCING) or cause is ProducerFencedError:
            raise FencedError(f"{type(cause).__name__}: {cause}") from error


class KafkaIO:
    """The group consumer of the inputs, the transactional producer of everything the daemon
    writes, and the reader of the changelog partitions it does not own.

    ``on_assigned(tps)`` and ``on_revoked(tps, lost)`` are called from rebalances (on the
    consumer's IO thread, while :meth:`poll` waits). ``changelogs`` maps each input topic to
    its changelog topic; :func:`ensure_changelogs` has checked or created them.
    ``topic_limits`` maps each topic the daemon writes to the largest record it accepts (see
    :func:`topic_limits`); :meth:`room` answers from it, so the daemon never hands the
    producer a record that would fail the transaction.

    Reading inputs with ``isolation_level=read_committed`` also makes the group's offset fetch
    wait for a pending transaction's offsets (KIP-447's ``require_stable``), so a partition's
    new owner never starts from offsets that a dying owner's commit is about to move.

    Two small clients of their own answer the questions a partition's new owner asks from the
    rebalance callback, where this consumer's coordinator may not be used (see the threading
    note): the offset fetch above, and the changelog partitions' high watermarks
    (``read_uncommitted`` ends), whose gap to the ``read_committed`` ends shows a transaction
    still unresolved there (:meth:`settle_offsets`, :meth:`tail_highwaters`).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        on_assigned: Callable[[list[TP]], None],
        on_revoked: Callable[[list[TP], bool], None],
        changelogs: dict[str, str],
        transactional_id: str,
        watchdog: Any,
        topic_limits: dict[str, int] | None = None,
    ):
        self.settings = settings
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.changelogs = changelogs
        self.watchdog = watchdog
        self.transactional_id = transactional_id
        self.topic_limits = dict(topic_limits or {})
        self.in_transaction = False
        self.transaction_began = 0.0
        # Cooperative (KIP-429): rebalances revoke and assign only the partitions that move,
        # and the others are processed through them; eager: every partition is revoked first.
        self.incremental = settings.assignment_strategy == "cooperative-sticky"
        self._errors: list[BaseException] = []
        self._errors_lock = threading.Lock()
        _quiet_pending_offset_fetches()
        for reason in read_sockets_in_larger_chunks():
            log.debug("socket reads of kafka-python's size (4 KiB): %s", reason)
        records.install()  # fetched batches' records read in C (streamnb.daemon.records)
        self.producer = KafkaProducer(
            **transactional_producer_config(settings, transactional_id, self.topic_limits))
        try:
            # Fences any earlier producer with this id and aborts its open transaction.
            with self.watchdog.guard("init_transactions"):
                self.producer.init_transactions()
        except ProducerFencedError as error:
            raise FencedError(f"transactional id {transactional_id!r}: {error}") from None
        #: Why :meth:`send_many` sends one record at a time (None: it adds them a batch at
        #: a time, see _BulkAppend).
        self.send_many_fallback = _BulkAppend.unusable(self.producer)
        self._bulk = (None if self.send_many_fallback is not None
                      else _BulkAppend(self.producer, self._on_error))
        log.debug("send_many: %s", "records added to kafka-python's batches a batch at a time"
                  if self._bulk is not None else
                  f"one KafkaProducer.send a record ({self.send_many_fallback})")
        self.reader = KafkaConsumer(
            **client_config(settings),
            client_id=f"{settings.client_id}-changelog",
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_poll_records=5000,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
        )
        # Never subscribes: only fetches the group's committed offsets (require_stable).
        self.offsets_reader = KafkaConsumer(
            **client_config(settings),
            client_id=f"{settings.client_id}-offsets",
            group_id=settings.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        self.ends_reader = KafkaConsumer(
            **client_config(settings),
            client_id=f"{settings.client_id}-ends",
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_uncommitted",
        )
        self.consumer = KafkaConsumer(
            **client_config(settings),
            client_id=settings.client_id,
            group_id=settings.group_id,
            group_instance_id=settings.group_instance_id or None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset=settings.start_offset,
            partition_assignment_strategy=[ASSIGNORS[settings.assignment_strategy]],
            max_poll_records=settings.max_poll_records,
            max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=max(1000, settings.session_timeout_ms // 4),
            # A topic created after start-up is noticed (and assigned) within this time.
            metadata_max_age_ms=10_000,
        )
        self._warm_up_producer()

    def _warm_up_producer(self) -> None:
        """Ask now what the producer would otherwise find out in the loop, on its first
        prediction and its first commit: the metadata of the output and changelog topics
        (``send`` waits for it, 2 ms a topic on the local broker, with the first SMS batch's
        records waiting behind it) and the group's coordinator, which
        ``send_offsets_to_transaction`` looks up before its first ``TxnOffsetCommit`` and
        then retries that after ``retry_backoff_ms`` (12 ms of the first commit, traced in
        kafka-python's DEBUG log). The lookup is queued and answered by the producer's network
        thread while the state is read from the changelog. Only topics that exist are asked
        for (asking creates a topic where the broker auto-creates them, and waits up to
        ``max_block_ms`` where it does not): the dead-letter topic, or an output topic not
        created yet, is left to its first record, as before."""
        for topic in (self.settings.output_topic, *self.changelogs.values()):
            if self.consumer.partitions_for_topic(topic):  # known to exist (cached metadata)
                self.producer.partitions_for(topic)
        # kafka-python has no public call for it: another version without these members
        # simply looks the coordinator up in its first commit, as before.
        manager = getattr(self.producer, "_transaction_manager", None)
        lookup = getattr(manager, "_lookup_coordinator", None)
        sender = getattr(self.producer, "_sender", None)
        if (CoordinatorType is not None and lookup is not None and sender is not None
                and manager.coordinator(CoordinatorType.GROUP) is None):
            lookup(CoordinatorType.GROUP, self.settings.group_id)
            sender.wakeup()

    def group_coordinator_known(self) -> bool:
        """Whether the transactional producer knows the group's coordinator (which
        :meth:`_warm_up_producer` asked for)."""
        manager = getattr(self.producer, "_transaction_manager", None)
        return (CoordinatorType is not None and manager is not None
                and manager.coordinator(CoordinatorType.GROUP) is not None)

    def subscribe(self) -> None:
        """Join the group (after the state is read: the first rebalance may come at once)."""
        self.consumer.subscribe(list(self.settings.input_topics), listener=_Listener(self))

    # ------------------------------------------------------------------ consuming
    def poll(self, timeout_ms: int) -> list[Record]:
        """The next batch (at most ``max_poll_records``), in offset order within a partition."""
        try:
            batches = self.consumer.poll(timeout_ms=timeout_ms)
        except KafkaError as error:
            _raise_fenced(error)
            raise
        records: list[Record] = []
        for tp, items in batches.items():
            records.extend(_records(tp, items))
        return records

    def seek(self, tp: TP, offset: int) -> None:
        self.consumer.seek(TopicPartition(*tp), offset)

    def highwater(self, tp: TP) -> int | None:
        return self.consumer.highwater(TopicPartition(*tp))

    def stable_generation(self) -> int | None:
        """The group generation this member has joined and received its assignment in, or
        None while it is joining. A cooperative join that adds no partition (a standby
        daemon in a group with more members than partitions, or a member that only gave
        partitions up) calls no listener: this is how the daemon sees it complete."""
        membership = self.consumer.group_metadata()
        if membership.state is not MemberState.STABLE:
            return None
        return membership.generation_id

    def joining(self) -> bool:
        """True while a join of the group is in flight. kafka-python's ``poll`` returns when
        its timeout ends even if the JoinGroup it sent has not been answered (the next poll
        waits on the same request), and the broker may complete that join, a generation
        later, while the loop works between polls: a commit then carries the generation the
        group has just left, and the broker refuses it (``ILLEGAL_GENERATION``) as it would
        a zombie's. With the cooperative protocol the member keeps processing the partitions
        it holds meanwhile, so this window is met in normal operation."""
        return self.consumer.group_metadata().state is MemberState.REBALANCING

    def committed(self, tp: TP) -> int | None:
        """The group's committed offset of ``tp`` (None: never committed)."""
        return self.consumer.committed(TopicPartition(*tp), timeout_ms=30_000)

    def settle_offsets(self, tps: list[TP], timeout: float) -> bool:
        """Wait until no transaction holds pending offsets of the input partitions ``tps``
        (a previous owner's last commit, or a zombie's): the group's offset fetch with
        ``require_stable`` answers only then. False if that took longer than ``timeout``
        seconds. Safe in a rebalance callback (a client of its own)."""
        deadline = time.monotonic() + timeout
        for tp in tps:
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                self.offsets_reader.committed(TopicPartition(*tp), timeout_ms=left_ms)
            except KafkaError:
                return False
        return True

    def input_partitions(self) -> list[TP]:
        return [(topic, p) for topic in self.settings.input_topics
                for p in sorted(self.consumer.partitions_for_topic(topic) or ())]

    # ------------------------------------------------------------------ the transaction
    def room(self, topic: str, key: bytes | None, headers=None) -> int:
        """How many value bytes a record with ``key`` and ``headers`` may carry to ``topic``
        (negative: not even an empty value fits)."""
        limit = self.topic_limits.get(topic, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
        # The value's length varint grows with it: up to 5 bytes, counted here.
        return limit - record_size(key, b"", headers) - 5

    def begin(self) -> None:
        if not self.in_transaction:
            self.producer.begin_transaction()
            self.in_transaction = True
            self.transaction_began = time.monotonic()

    def transaction_age(self) -> float:
        """Seconds since the open transaction began (0.0: none is open). The broker aborts a
        transaction older than ``kafka.transaction_timeout_ms``."""
        return time.monotonic() - self.transaction_began if self.in_transaction else 0.0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record to the open transaction (opened if need be)."""
        try:
            self.begin()
            future = self.producer.send(topic, value=value, key=key, headers=headers,
                                        partition=partition)
        except KafkaError as error:
            self._raise_if_fenced(error)
            raise
        future.add_errback(self._on_error)

    def send_many(self, topic: str, records: list[tuple], partition: int | None = None) -> None:
        """Add ``records``, each ``(key, value)`` or ``(key, value, headers)``, to the open
        transaction (opened if need be), in order: what :meth:`send` of each in turn does
        (the same partitions, the same errors raised at the same record, a failed delivery
        reported at the commit), at a fraction of its cost (``_BulkAppend``)."""
        if not records:
            return
        bulk = self._bulk
        if bulk is None:
            for record in records:
                self.send(topic, *record, partition=partition)
            return
        try:
            self.begin()
            bulk.send(topic, records, partition, self._send_one)
        except KafkaError as error:
            self._raise_if_fenced(error)
            raise

    def _send_one(self, topic, key, value, headers=None, partition=None) -> None:
        self.producer.send(topic, value=value, key=key, headers=headers,
                           partition=partition).add_errback(self._on_error)

    def _on_error(self, error: BaseException) -> None:
        with self._errors_lock:
            self._errors.append(error)

    def commit(self, offsets: dict[TP, int]) -> None:
        """Send ``offsets`` (next offset to read, per input partition) into the transaction
        with the group's metadata, and commit it. Raises :class:`FencedError` when a newer
        producer or group member has taken over, ``KafkaError`` on any other failure (the
        transaction is then not committed)."""
        self.begin()
        try:
            if offsets:
                payload = {TopicPartition(*tp): OffsetAndMetadata(off, "", -1)
                           for tp, off in offsets.items()}
                with self.watchdog.guard("send_offsets_to_transaction"):
                    self.producer.send_offsets_to_transaction(
                        payload, self.consumer.group_metadata())
            with self.watchdog.guard("commit_transaction"):
                self.producer.commit_transaction()
        except KafkaError as error:
            self._raise_if_fenced(error)
            raise
        finally:
            self.in_transaction = False
        with self._errors_lock:
            errors, self._errors = self._errors, []
        if errors:  # not expected after a successful commit, but never ignored
            raise KafkaDeliveryError(f"{len(errors)} record(s) not delivered: {errors[0]!r}")

    def _raise_if_fenced(self, error: KafkaError) -> None:
        """Raise :class:`FencedError` if ``error`` is, or soon turns out to be, fencing.

        When a newer producer has bumped the epoch, kafka-python's producer first takes the
        broker's ``InvalidProducerEpoch`` for a recoverable error and starts bumping its own
        epoch (KIP-360), refusing sends meanwhile (``IllegalStateError``); the bump then fails
        with ``ProducerFenced``. So a refused send waits a few seconds for that verdict.
        """
        _raise_fenced(error)
        manager = getattr(self.producer, "_transaction_manager", None)
        deadline = time.monotonic() + 10.0
        while manager is not None and time.monotonic() < deadline:
            last = manager.last_error
            if last is not None:
                _raise_fenced(last)
            if not manager.is_bumping_epoch():
                return
            time.sleep(0.05)

    def abort(self) -> None:
        if not self.in_transaction:
            return
        try:
            with self.watchdog.guard("abort_transaction"):
                self.producer.abort_transaction()
        finally:
            self.in_transaction = False
            with self._errors_lock:
                self._errors = []

    # ------------------------------------------------------------------ changelog reader
    def changelog_of(self, tp: TP) -> TP:
        return (self.changelogs[tp[0]], tp[1])

    def tail_assign(self, tps: dict[TP, int | None]) -> None:
        """Read these changelog partitions, each from its given offset (None: from its
        start); partitions already read and not given keep their positions."""
        current = {(tp.topic, tp.partition) for tp in self.reader.assignment()}
        wanted = set(tps) | current
        self.reader.assign([TopicPartition(*tp) for tp in sorted(wanted)])
        for tp, offset in tps.items():
            if offset is None:
                self.reader.seek_to_beginning(TopicPartition(*tp))
            else:
                self.reader.seek(TopicPartition(*tp), offset)

    def tail_unassign(self, tps: list[TP]) -> None:
        drop = set(tps)
        keep = [tp for tp in self.reader.assignment() if (tp.topic, tp.partition) not in drop]
        self.reader.assign(keep)

    def tail_assignment(self) -> list[TP]:
        return _tps(self.reader.assignment())

    def tail_poll(self, timeout_ms: int) -> list[Record]:
        if not self.reader.assignment():
            return []
        return _polled(self.reader, timeout_ms)

    def tail_positions(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: self.reader.position(TopicPartition(*tp)) for tp in tps}

    def tail_lag(self) -> int:
        """Records between the reader's positions and the ends of its partitions, as of the
        last fetch (a partition not fetched yet counts as caught up)."""
        return _lag(self.reader)

    def tail_ends(self, tps: list[TP]) -> dict[TP, int]:
        """The read_committed end (last stable offset) of each changelog partition."""
        ends = self.reader.end_offsets([TopicPartition(*tp) for tp in tps])
        return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}

    def tail_highwaters(self, tps: list[TP]) -> dict[TP, int]:
        """The high watermark (read_uncommitted end) of each changelog partition: past the
        read_committed end while a transaction that wrote there is unresolved."""
        ends = self.ends_reader.end_offsets([TopicPartition(*tp) for tp in tps])
        return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}

    def close(self, timeout: float = 5.0) -> None:
        try:
            if self.in_transaction:
                with contextlib.suppress(KafkaError, RuntimeError):
                    self.abort()
            self.consumer.close(autocommit=False, timeout_ms=int(timeout * 1000))
        finally:
            try:
                self.reader.close(autocommit=False, timeout_ms=int(timeout * 1000))
            finally:
                try:
                    for client in (self.offsets_reader, self.ends_reader):
                        client.close(autocommit=False, timeout_ms=int(timeout * 1000))
                finally:
                    self.producer.close(timeout=timeout)


def learn_producer(settings: KafkaSettings, max_value_bytes: int) -> KafkaProducer:
    """The front door's producer of learns (:mod:`streamnb.serve.learning`): idempotent,
    ``acks=all``, no linger (a learn's reply waits for its acknowledgement), room for the
    largest input record."""
    config = producer_config(settings)
    config.update(client_id=f"{settings.client_id}-learns", acks="all",
                  enable_idempotence=True, linger_ms=0,
                  max_request_size=max(config["max_request_size"], max_value_bytes + 1024))
    return KafkaProducer(**config)


class ChangelogFollower:
    """Reads whole changelog topics without a group, and keeps reading them: a standby
    scorer's view of a group's state (:mod:`streamnb.serve.standby`). ``read_committed``,
    large fetches (a restore reads whole changelogs)."""

    def __init__(self, settings: KafkaSettings):
        self.consumer = KafkaConsumer(
            **client_config(settings), client_id=f"{settings.client_id}-standby",
            group_id=None, enable_auto_commit=False, isolation_level="read_committed",
            max_poll_records=5000, fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024)

    def assign_from_start(self, topics: Iterable[str]) -> list[TP]:
        """Read every partition of ``topics`` from its first offset; raises
        :class:`KafkaReadError` for a topic that does not exist."""
        tps = []
        for topic in topics:
            numbers = self.consumer.partitions_for_topic(topic)
            if not numbers:
                raise KafkaReadError(f"topic {topic} does not exist")
            tps.extend(TopicPartition(topic, p) for p in sorted(numbers))
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        return _tps(tps)

    def ends(self) -> dict[TP, int]:
        """The read_committed end of every assigned partition."""
        ends = self.consumer.end_offsets(list(self.consumer.assignment()))
        return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}

    def positions(self) -> dict[TP, int]:
        return {(tp.topic, tp.partition): self.consumer.position(tp)
                for tp in self.consumer.assignment()}

    def poll(self, timeout_ms: int) -> list[Record]:
        return _polled(self.consumer, timeout_ms)

    def lag(self) -> int:
        """Records between the positions and the ends, as of the last fetch."""
        return _lag(self.consumer)

    def close(self) -> None:
        self.consumer.close(autocommit=False)


def ensure_changelogs(settings: KafkaSettings, changelogs: dict[str, str]) -> None:
    """Create each missing changelog topic (compacted, the input's partition count) and check
    each existing one; :class:`ChangelogTopicError` names a topic that cannot be used."""
    admin = KafkaAdminClient(**client_config(settings), client_id=f"{settings.client_id}-admin")
    try:
        existing = set(admin.list_topics())
        described = {t["name"]: t for t in admin.describe_topics(
            [t for t in {*changelogs, *changelogs.values()} if t in existing])}
        for input_topic, changelog in changelogs.items():
            if input_topic not in described:
                raise ChangelogTopicError(
                    f"input topic {input_topic} does not exist: create it before starting the "
                    f"daemon (its changelog {changelog} needs its partition count)")
            partitions = len(described[input_topic]["partitions"])
            if changelog not in described:
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics({changelog: {
                        "num_partitions": partitions,
                        "replication_factor": settings.changelog_replication_factor,
                        "configs": {"cleanup.policy": "compact"},
                    }}, wait_for_metadata=True)
                log.info("created changelog topic %s (%d partitions, compacted)", changelog,
                         partitions, extra={"event": "changelog_created", "topic": changelog})
                continue
            have = len(described[changelog]["partitions"])
            if have != partitions:
                raise ChangelogTopicError(
                    f"changelog topic {changelog} has {have} partition(s) but input topic "
                    f"{input_topic} has {partitions}: it cannot hold that input's state "
                    "(delete it, or use another group_id)")
            configs = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, changelog, None)],
                config_filter="all")
            policy = configs["topic"][changelog].get("cleanup.policy", {}).get("value", "delete")
            if "compact" not in str(policy).split(","):
                raise ChangelogTopicError(
                    f"changelog topic {changelog} has cleanup.policy={policy}: it must be "
                    "compact, or its old records are deleted and the state with them")
    finally:
        admin.close()


class KafkaDeliveryError(RuntimeError):
    """The producer could not deliver a record of the transaction."""


# ---------------------------------------------------------------------- start-up
def open_admin(settings: KafkaSettings, timeout: float) -> KafkaAdminClient:
    """An admin client connected within ``timeout`` seconds (kafka-python raises
    ``KafkaTimeoutError`` when no bootstrap server answered, or an authentication error)."""
    return KafkaAdminClient(
        **client_config(settings),
        client_id=f"{settings.client_id}-admin",
        bootstrap_timeout_ms=int(timeout * 1000),
        request_timeout_ms=int(timeout * 1000),
    )


def topic_limits(admin: KafkaAdminClient, topics: Iterable[str]) -> dict[str, int]:
    """Each topic's ``max.message.bytes``: the largest record batch the broker accepts there.

    A topic whose limit cannot be read (it does not exist yet and the broker creates it on
    first use, or the user lacks DescribeConfigs on it: the broker then answers with no
    configs) gets the broker's ``message.max.bytes``, which is what a new topic is created
    with, or Kafka's default; a warning says so.
    """
    topics = sorted(set(topics))
    described = admin.describe_configs(
        [ConfigResource("TOPIC", topic, ["max.message.bytes"]) for topic in topics],
        config_filter="all",
    ).get("topic", {})
    default = None
    limits = {}
    for topic in topics:
        entry = described.get(topic, {}).get("max.message.bytes")
        if entry and entry.get("value"):
            limits[topic] = int(entry["value"])
            continue
        if default is None:
            default = _broker_max_message_bytes(admin)
        limits[topic] = default
        log.warning(
            "max.message.bytes of topic %s could not be read (it does not exist yet, or this "
            "user may not describe its configs): records to it are sized for %d bytes",
            topic, default, extra={"event": "topic_limit_assumed", "topic": topic},
        )
    return limits


def _broker_max_message_bytes(admin: KafkaAdminClient) -> int:
    try:
        brokers = admin.describe_cluster().get("brokers") or []
        node = str(brokers[0]["broker_id"])
        described = admin.describe_configs(
            [ConfigResource("BROKER", node, ["message.max.bytes"])], config_filter="all"
        )
        return int(described["broker"][node]["message.max.bytes"]["value"])
    except (KafkaError, KeyError, IndexError, TypeError, ValueError):
        return KAFKA_DEFAULT_MAX_MESSAGE_BYTES


# ---------------------------------------------------------------------- tools
# Small helpers for scripts, tests and benchmarks, so they need not import kafka themselves.


def create_topics(
    bootstrap: str, partitions: dict[str, int], configs: dict[str, dict[str, str]] | None = None
) -> None:
    """Create topics with the given partition counts (replication 1) and topic ``configs``
    (e.g. ``{"max.message.bytes": "2000"}``); existing ones are kept."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="streamnb-admin")
    try:
        for name, count in partitions.items():
            spec = {"num_partitions": count, "replication_factor": 1}
            if configs and name in configs:
                spec["configs"] = configs[name]
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics({name: spec}, wait_for_metadata=True)
    finally:
        admin.close()


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple],
    rate: float | None = None,
) -> int:
    """Send ``(key, value)`` pairs (or ``(key, value, partition)``) to ``topic`` and wait for
    all of them; returns the count. Without a partition, the key chooses it.

    With ``rate`` (records per second) sending is paced evenly instead of as fast as possible.
    """
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=256 * 1024)
    count = 0
    start = time.perf_counter()
    try:
        for key, value, *partition in records:
            if rate:
                delay = start + count / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            producer.send(topic, value=value, key=key,
                          partition=partition[0] if partition else None)
            count += 1
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    return count


def read_all(
    bootstrap: str,
    topic: str,
    until: Callable[[list[Record]], bool],
    timeout: float = 60.0,
    isolation_level: str = "read_committed",
) -> list[Record]:
    """Read ``topic`` from the beginning until ``until(records_so_far)`` holds or time runs out.

    ``read_committed`` (the default, and what readers of the daemon's outputs use) sees only
    committed transactions; ``read_uncommitted`` also sees open and aborted ones.
    """
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation_level,
    )
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while not until(records) and time.monotonic() < deadline:
            for tp, items in consumer.poll(timeout_ms=200).items():
                records.extend(_records(tp, items))
    finally:
        consumer.close(autocommit=False)
    return records


class KafkaReadError(RuntimeError):
    """A topic could not be read to its end (missing, unreachable, or too slow)."""


def read_to_end(settings: KafkaSettings, topic: str, timeout: float = 120.0
                ) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """Every committed record of ``topic`` as ``(key, value)``, by partition, from its start to
    its end as of now (``read_committed``, with the daemon's connection and security settings):
    how ``streamnb explain --changelog`` reads the group's state."""
    try:
        consumer = KafkaConsumer(
            **client_config(settings), client_id=f"{settings.client_id}-reader", group_id=None,
            enable_auto_commit=False, isolation_level="read_committed")
    except KafkaError as error:
        raise KafkaReadError(f"{settings.bootstrap_servers}: {error}") from None
    try:
        numbers = consumer.partitions_for_topic(topic)
        if not numbers:
            raise KafkaReadError(f"topic {topic} does not exist (has a daemon of this group run?)")
        parts = [TopicPartition(topic, p) for p in sorted(numbers)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out: dict[int, list[tuple[bytes | None, bytes | None]]] = {tp.partition: [] for tp in parts}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise KafkaReadError(f"topic {topic}: not read to its end in {timeout:g} s")
            for tp, items in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend((r.key, r.value) for r in items)
        return out
    except KafkaError as error:
        raise KafkaReadError(f"topic {topic}: {error}") from None
    finally:
        consumer.close(autocommit=False)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[TP, int]:
    """The offsets group ``group`` has committed for ``topic`` (partitions never committed are
    left out); waits for a pending transaction's offsets, as a new owner's fetch does."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, isolation_level="read_committed")
    try:
        out = {}
        for p in sorted(consumer.partitions_for_topic(topic) or ()):
            offset = consumer.committed(TopicPartition(topic, p), timeout_ms=30_000)
            if offset is not None:
                out[(topic, p)] = offset
        return out
    finally:
        consumer.close(autocommit=False)


def end_offsets(bootstrap: str, topic: str) -> dict[TP, int]:
    """The current end offset of every partition of ``topic``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        result = consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return {(tp.topic, tp.partition): off for tp, off in result.items()}
    finally:
        consumer.close(autocommit=False)
