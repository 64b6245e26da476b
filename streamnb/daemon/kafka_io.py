"""Everything that talks to Kafka: the only module that imports ``kafka`` (kafka-python).

The daemon sees partitions as ``(topic, partition)`` tuples and records as :class:`Record`, so
the loop can be tested against an in-memory fake with the same small surface as
:class:`KafkaIO`: ``poll``, ``seek``, ``seek_to_beginning``, ``seek_to_end``, ``commit``,
``highwater``, ``send``, ``flush``, ``close``.

Producing runs in a child process by default (``kafka.producer_process``): kafka-python's
producer spends as much CPU per record as its consumer, and in the daemon's process it competes
for the GIL with the model; in a child it runs on another core. Records reach the child in one
pipe message per batch, and :meth:`KafkaIO.flush` still returns only once every record is
acknowledged by the broker (or raises).

Threading note (kafka-python 3): rebalance callbacks run on the consumer's IO thread while the
caller's ``poll`` waits for the rebalance to finish, so they never overlap the processing of a
batch. A blocking commit is not allowed on that thread; :meth:`KafkaIO.commit` with
``wait=False`` is what the revocation path uses.

>>> Record("mail", 0, 7, b"m1", b"{}", (), 0).tp
('mail', 0)
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import OffsetAndMetadata

from streamnb.config import KafkaSettings

__all__ = [
    "KafkaIO",
    "Record",
    "TP",
    "client_config",
    "create_topics",
    "produce",
    "producer_config",
    "read_all",
    "record_size",
]

log = logging.getLogger("streamnb.kafka")

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Record:
    """One input record, decoupled from kafka-python's types."""

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
    """kafka-python's consumer records of one partition as our own :class:`Record`."""
    topic, partition = tp.topic, tp.partition
    return [
        Record(topic, partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp)
        for r in items
    ]


def _tps(partitions: Iterable[TopicPartition]) -> list[TP]:
    return sorted((p.topic, p.partition) for p in partitions)


# kafka-python's own batch size for the outputs, unless a topic accepts less.
PRODUCER_BATCH_BYTES = 256 * 1024
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


def producer_config(settings: KafkaSettings, max_record_bytes: int | None = None) -> dict:
    """kafka-python ``KafkaProducer`` arguments for the daemon's outputs; ``max_record_bytes``
    is the largest record an output topic accepts (its ``max.message.bytes``)."""
    limit = max_record_bytes or KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    return {
        **client_config(settings),
        "client_id": f"{settings.client_id}-producer",
        "acks": settings.producer_acks if settings.producer_acks == "all" else int(
            settings.producer_acks
        ),
        "linger_ms": settings.producer_linger_ms,
        "batch_size": min(PRODUCER_BATCH_BYTES, limit),
        "max_request_size": limit,
        "enable_idempotence": settings.producer_acks == "all",
    }


class _Listener(ConsumerRebalanceListener):
    def __init__(self, io: KafkaIO):
        self.io = io

    def on_partitions_revoked(self, revoked):
        if revoked:
            self.io.on_revoked(_tps(revoked), lost=False)

    def on_partitions_assigned(self, assigned):
        self.io.on_assigned(_tps(assigned))

    def on_partitions_lost(self, lost):
        if lost:
            self.io.on_revoked(_tps(lost), lost=True)


class KafkaIO:
    """A consumer in a group (manual commits, batched polls) plus an asynchronous producer.

    ``on_assigned(tps)`` and ``on_revoked(tps, lost)`` are called from rebalances.
    ``topic_limits`` maps each output topic to the largest record it accepts (see
    :func:`topic_limits`); :meth:`room` answers from it, so the daemon never hands the
    producer a record that would fail.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        on_assigned: Callable[[list[TP]], None],
        on_revoked: Callable[[list[TP], bool], None],
        topic_limits: dict[str, int] | None = None,
    ):
        self.settings = settings
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.topic_limits = dict(topic_limits or {})
        self.producer = (ProducerProcess if settings.producer_process else Producer)(
            producer_config(settings, max(self.topic_limits.values(), default=None))
        )
        self.consumer = KafkaConsumer(
            **client_config(settings),
            client_id=settings.client_id,
            group_id=settings.group_id,
            group_instance_id=settings.group_instance_id or None,
            enable_auto_commit=False,
            auto_offset_reset=settings.start_offset,
            max_poll_records=settings.max_poll_records,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=max(1000, settings.session_timeout_ms // 4),
            # A topic created after start-up is noticed (and assigned) within this time.
            metadata_max_age_ms=10_000,
        )
        # Know the input topics' partitions before joining the group: a group leader that
        # joins without them assigns nothing until the next metadata refresh.
        for topic in settings.input_topics:
            if not self.consumer.partitions_for_topic(topic):
                log.warning("input topic %s does not exist (yet)", topic)
        self.consumer.subscribe(list(settings.input_topics), listener=_Listener(self))

    # ------------------------------------------------------------------ consuming
    def poll(self, timeout_ms: int) -> list[Record]:
        """The next batch (at most ``max_poll_records``), in offset order within a partition."""
        self.producer.push()  # the outputs of the batch just processed
        batches = self.consumer.poll(timeout_ms=timeout_ms)
        records: list[Record] = []
        for tp, items in batches.items():
            records.extend(_records(tp, items))
        return records

    def seek(self, tp: TP, offset: int) -> None:
        self.consumer.seek(TopicPartition(*tp), offset)

    def seek_to_beginning(self, tp: TP) -> None:
        self.consumer.seek_to_beginning(TopicPartition(*tp))

    def seek_to_end(self, tp: TP) -> None:
        self.consumer.seek_to_end(TopicPartition(*tp))

    def highwater(self, tp: TP) -> int | None:
        return self.consumer.highwater(TopicPartition(*tp))

    def commit(self, offsets: dict[TP, int], wait: bool = True) -> bool:
        """Commit ``offsets`` (the next offset to read per partition) to the group.

        These commits only feed lag dashboards: the daemon resumes from its checkpoint, so a
        failed commit is logged and otherwise harmless.
        """
        if not offsets:
            return True
        payload = {
            TopicPartition(*tp): OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()
        }
        try:
            if wait:
                self.consumer.commit(payload, timeout_ms=5000)
            else:
                self.consumer.commit_async(payload)
        except (KafkaError, RuntimeError) as error:
            log.warning("offset commit failed (lag metrics only): %s", error)
            return False
        return True

    # ------------------------------------------------------------------ producing
    def room(self, topic: str, key: bytes | None, headers=None) -> int:
        """How many value bytes a record with ``key`` and ``headers`` may carry to ``topic``
        (negative: not even an empty value fits)."""
        limit = self.topic_limits.get(topic, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
        # The value's length varint grows with it: up to 5 bytes, counted here.
        return limit - record_size(key, b"", headers) - 5

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue a record; delivery is confirmed by :meth:`flush`."""
        self.producer.send(topic, key, value, headers)

    def flush(self, timeout: float = 30.0) -> None:
        """Block until every queued record is acknowledged; raise if any delivery failed."""
        self.producer.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        try:
            self.consumer.close(autocommit=False, timeout_ms=int(timeout * 1000))
        finally:
            self.producer.close(timeout)


class Producer:
    """kafka-python's producer in this process, collecting delivery errors for :meth:`flush`."""

    def __init__(self, config: dict):
        self._errors: list[BaseException] = []
        self._errors_lock = threading.Lock()
        self._producer = KafkaProducer(**config)

    def _on_error(self, error: BaseException) -> None:
        with self._errors_lock:
            self._errors.append(error)

    def send(self, topic: str, key: bytes | None, value: bytes, headers=None) -> None:
        try:
            future = self._producer.send(topic, value=value, key=key, headers=headers)
        except KafkaError as error:  # e.g. MessageSizeTooLargeError: reported by flush
            self._on_error(error)
            return
        future.add_errback(self._on_error)

    def push(self) -> None:
        """Nothing to do: records go to kafka-python's accumulator as they are sent."""

    def take_errors(self, timeout: float) -> list[str]:
        """Wait for every queued record's acknowledgement; the delivery errors since last time."""
        self._producer.flush(timeout=timeout)
        with self._errors_lock:
            errors, self._errors = self._errors, []
        return [repr(error) for error in errors]

    def flush(self, timeout: float) -> None:
        errors = self.take_errors(timeout)
        if errors:
            raise KafkaDeliveryError(f"{len(errors)} output record(s) not delivered: {errors[0]}")

    def close(self, timeout: float) -> None:
        self._producer.close(timeout=timeout)


class ProducerProcess:
    """The same surface as :class:`Producer`, with kafka-python's producer in a child process.

    ``send`` only appends to a list; the list goes to the child in one pipe message when
    :meth:`push` is called (the daemon's :meth:`KafkaIO.poll` does, so outputs leave at the
    end of each batch) or on :meth:`flush`. The child ignores SIGINT and SIGTERM (the daemon
    decides when to stop) and ends when the pipe closes, also when the daemon is killed.
    """

    START_TIMEOUT = 60.0

    def __init__(self, config: dict):
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        self._conn, child_end = context.Pipe()
        self._process = context.Process(
            target=_run_producer, args=(config, child_end), name="streamnb-producer", daemon=True
        )
        self._process.start()
        child_end.close()
        # At interpreter exit, multiprocessing joins its children; a child that was never
        # closed (the daemon failed to start, say) ends when its pipe does, so close it first.
        atexit.register(self._conn.close)
        self._pending: list[tuple] = []
        self._reply("start", self.START_TIMEOUT)

    def send(self, topic: str, key: bytes | None, value: bytes, headers=None) -> None:
        self._pending.append((topic, key, value, headers))

    def push(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._request(("send", pending))

    def flush(self, timeout: float) -> None:
        self.push()
        self._request(("flush", timeout))
        errors = self._reply("flush", timeout + 10)
        if errors:
            raise KafkaDeliveryError(f"{len(errors)} output record(s) not delivered: {errors[0]}")

    def close(self, timeout: float) -> None:
        try:
            if self._process.is_alive():
                self.push()
                self._request(("close", timeout))
                self._reply("close", timeout + 10)
        except KafkaDeliveryError as error:
            log.warning("producer process: %s", error)
        finally:
            self._conn.close()
            atexit.unregister(self._conn.close)
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()

    def _request(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, ConnectionError, EOFError) as error:
            raise KafkaDeliveryError(f"the producer process has ended: {error!r}") from error

    def _reply(self, what: str, timeout: float) -> list[str]:
        """The child's answer to ``what``: the delivery errors, or a failure to start."""
        if not self._conn.poll(timeout):
            raise KafkaDeliveryError(f"the producer process did not {what} within {timeout:.0f} s")
        try:
            status, detail = self._conn.recv()
        except (EOFError, ConnectionError) as error:
            raise KafkaDeliveryError(
                f"the producer process ended (exit code {self._process.exitcode})") from error
        if status == "failed":
            raise KafkaDeliveryError(f"the producer process could not {what}: {detail}")
        return detail


def _run_producer(config: dict, conn) -> None:
    """The child's loop: ("send", records) / ("flush", timeout) / ("close", timeout)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        producer = Producer(config)
    except Exception as error:  # noqa: BLE001 - reported to the daemon, which fails to start
        conn.send(("failed", repr(error)))
        return
    conn.send(("ok", []))
    while True:
        try:
            request, argument = conn.recv()
        except (EOFError, ConnectionError):  # the daemon is gone: deliver what is queued
            producer.close(5.0)
            return
        if request == "send":
            for topic, key, value, headers in argument:
                producer.send(topic, key, value, headers)
            continue
        try:
            reply = ("ok", producer.take_errors(argument))
        except Exception as error:  # noqa: BLE001 - e.g. a flush timeout: the daemon decides
            reply = ("failed", repr(error))
        if request == "close":
            producer.close(argument)
        conn.send(reply)
        if request == "close":
            return


class KafkaDeliveryError(RuntimeError):
    """The producer could not deliver an output or dead-letter record."""


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
    records: Iterable[tuple[bytes | None, bytes]],
    rate: float | None = None,
) -> int:
    """Send ``(key, value)`` pairs to ``topic`` and wait for all of them; returns the count.

    With ``rate`` (records per second) sending is paced evenly instead of as fast as possible.
    """
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=256 * 1024)
    count = 0
    start = time.perf_counter()
    try:
        for key, value in records:
            if rate:
                delay = start + count / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            producer.send(topic, value=value, key=key)
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
) -> list[Record]:
    """Read ``topic`` from the beginning until ``until(records_so_far)`` holds or time runs out."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
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


def end_offsets(bootstrap: str, topic: str) -> dict[TP, int]:
    """The current end offset of every partition of ``topic``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        result = consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return {(tp.topic, tp.partition): off for tp, off in result.items()}
    finally:
        consumer.close(autocommit=False)
