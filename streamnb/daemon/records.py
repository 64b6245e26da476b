"""kafka-python's consumer reading a fetched batch's records in C.

kafka-python (3.0.x) reads every record of a v2 batch in Python: ``DefaultRecordBatch``
iterates over itself, and each ``__next__`` reads one record's varints and fields
(``_read_msg``). On the SMS stream that reading was 14% of the daemon's main
thread (py-spy's samples of ``_read_msg`` and ``decode_varint``). :func:`install` gives the
batch an ``__iter__`` that reads all its records at once with ``streamnb.daemon._records``
(C) and makes the same ``DefaultRecord`` objects of them, so the fetcher's loop
(``Fetcher.PartitionRecords._unpack_records``: CRC checks, aborted transactions, control
batches, offsets) is kafka-python's own, unchanged.

What stays with kafka-python's reader: control batches (the transaction markers, which its
fetcher reads one record at a time through ``next(batch)``), a batch partly read already, and
everything where the C extension is not built (``STREAMNB_PURE_PYTHON=1``) or kafka-python's
internals are not the ones read here (:func:`unusable`). The records, offsets, timestamps,
keys, values and headers are those of kafka-python's reader
(``tests/daemon/test_records.py``, hypothesis over batches kafka-python's builder makes,
compressed or not, and over corrupt ones). One difference: a batch with a corrupt record
raises ``CorruptRecordError`` before any of its records is returned, where kafka-python's
reader returns those before it first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from kafka.errors import CorruptRecordError
from kafka.record.default_records import (
    DefaultRecord,
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
)

from streamnb.features.native import PURE_PYTHON_ENV

try:
    from streamnb.daemon._records import read_records
except ImportError:  # no compiler, or STREAMNB_PURE_PYTHON: kafka-python's reader
    read_records = None

__all__ = ["install", "installed", "read_by_kafka_python", "uninstall", "unusable"]

log = logging.getLogger("streamnb.kafka")

_STOCK_ITER = DefaultRecordBatch.__iter__


def unusable() -> str | None:
    """Why the C reader cannot stand in for kafka-python's here, or None if it can: a sample
    batch (keys, null values, headers) read by both must give the same records."""
    if read_records is None:
        return "the C extension streamnb.daemon._records is not built"
    try:
        sample = _sample_batch()
        ours = [_fields(r) for r in _iter_read_in_c(DefaultRecordBatch(sample))]
        theirs = [_fields(r) for r in read_by_kafka_python(DefaultRecordBatch(sample))]
    except Exception as error:  # noqa: BLE001 - any change of kafka-python's internals
        return f"kafka-python's record batches are not the ones read here ({error!r})"
    if ours != theirs:
        return "kafka-python's records differ from the C reader's on a sample batch"
    return None


def read_by_kafka_python(batch: DefaultRecordBatch) -> Iterator[Any]:
    """The records of ``batch`` as kafka-python's own reader gives them, one ``__next__``
    each, whether or not the C reader is installed (``for r in batch`` would take it)."""
    _STOCK_ITER(batch)
    while True:
        try:
            yield DefaultRecordBatch.__next__(batch)
        except StopIteration:
            return


def _sample_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"v" * 300, headers=[])
    builder.append(1, timestamp=1_700_000_000_005, key=None, value=None,
                   headers=[("h", b"x"), ("none", None)])
    return bytes(builder.build())


def _fields(record: Any) -> tuple:
    return (record.offset, record.timestamp, record.timestamp_type, record.key, record.value,
            record.headers, record.size_in_bytes)


def installed() -> bool:
    return DefaultRecordBatch.__iter__ is _iter_read_in_c


def install() -> bool:
    """Make every v2 batch read its records in C, in this process; True if it does (a second
    call changes nothing). Where it cannot (:func:`unusable`) kafka-python's reader stays, and
    a warning says why."""
    if installed():
        return True
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        log.debug("records are read by kafka-python's Python reader: %s=%s",
                  PURE_PYTHON_ENV, os.environ[PURE_PYTHON_ENV])
        return False
    why = unusable()
    if why is not None:
        log.warning("records are read by kafka-python's Python reader: %s "
                    "event=records_reader_stock", why)
        return False
    DefaultRecordBatch.__iter__ = _iter_read_in_c
    return True


def uninstall() -> None:
    """kafka-python's reader again (for tests and benchmarks that compare the two)."""
    DefaultRecordBatch.__iter__ = _STOCK_ITER


def _iter_read_in_c(batch: DefaultRecordBatch) -> Any:
    batch._maybe_uncompress()
    if batch.is_control_batch or batch._next_record_index:
        return batch  # kafka-python's own __next__, record by record
    buffer = batch._buffer
    try:
        rows, end = read_records(buffer, batch._pos, batch._num_records)
    except ValueError as error:
        raise CorruptRecordError(f"Found invalid record structure: {error!r}") from None
    if end != len(buffer):
        raise CorruptRecordError(
            f"{len(buffer) - end} unconsumed bytes after all records consumed")
    batch._pos = end
    batch._next_record_index = batch._num_records
    base_offset, timestamp_type = batch.base_offset, batch.timestamp_type
    # a log-append-time batch's records all carry the broker's time, its max_timestamp
    appended = batch.max_timestamp if timestamp_type == batch.LOG_APPEND_TIME else None
    first = batch.first_timestamp
    return iter([DefaultRecord(length, base_offset + offset_delta,
                               first + ts_delta if appended is None else appended,
                               timestamp_type, key, value, headers)
                 for length, ts_delta, offset_delta, key, value, headers in rows])
