"""The C reader of a fetched batch's records (``streamnb.daemon.records``) gives the records
kafka-python's own reader gives: offsets, timestamps, keys, values, headers and sizes, and the
same ``CorruptRecordError`` where a batch is damaged."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from streamnb.daemon import records

pytestmark = pytest.mark.skipif(records.read_records is None,
                                reason="the C extension streamnb.daemon._records is not built")

ATTRIBUTES_AT = 21  # a v2 batch header: offset 8, length 4, leader epoch 4, magic 1, crc 4
LOG_APPEND_TIME_BIT = 0x08

header_ = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20))
record_ = st.tuples(
    st.none() | st.binary(max_size=40),                      # key
    st.none() | st.binary(max_size=3000),                    # value
    st.lists(header_, max_size=3),                           # headers
    st.integers(0, 10**6),                                   # timestamp after the first
)


def build(rows, compression: int = 0, first_timestamp: int = 1_700_000_000_000,
          log_append_time: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 24)
    for offset, (key, value, headers, later) in enumerate(rows):
        builder.append(offset, timestamp=first_timestamp + later, key=key, value=value,
                       headers=headers)
    data = bytearray(builder.build())
    if log_append_time:
        data[ATTRIBUTES_AT + 1] |= LOG_APPEND_TIME_BIT
    return bytes(data)


def read(data: bytes, reader) -> list[tuple]:
    batch = DefaultRecordBatch(data)
    found = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers,
              r.size_in_bytes, type(r)) for r in reader(batch)]
    assert batch._pos == len(batch._buffer)  # the batch is read to its end either way
    return found


def stock(batch):
    return records.read_by_kafka_python(batch)


def in_c(batch):
    return records._iter_read_in_c(batch)


@settings(max_examples=300, deadline=None)
@given(st.lists(record_, min_size=1, max_size=30), st.sampled_from([0, 1]), st.booleans())
def test_a_batch_reads_as_kafka_pythons_reader_reads_it(rows, compression, log_append_time):
    data = build(rows, compression, log_append_time=log_append_time)
    ours = read(data, in_c)
    assert ours == read(data, stock)
    assert [(key, value, headers) for _, _, _, key, value, headers, _, _ in ours] == [
        (key, value, headers) for key, value, headers, _ in rows]


@settings(max_examples=500, deadline=None)
@given(st.lists(record_, min_size=1, max_size=8), st.data())
def test_a_damaged_batch_fails_as_kafka_pythons_reader_fails(rows, data):
    """Bytes of the records changed, or the batch cut short: the same records, or the same
    error (a value kafka-python would read beyond a 64-bit integer, which no broker writes,
    is left out)."""
    batch = bytearray(build(rows))
    header = DefaultRecordBatch.HEADER_STRUCT.size
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(header, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del batch[data.draw(st.integers(header, len(batch))):]
    damaged = bytes(batch)
    try:
        theirs = read(damaged, stock)
    except CorruptRecordError:
        theirs = None
    else:
        assume(all(-2**63 <= n < 2**63 for row in theirs for n in row[:2]))
    if theirs is None:
        with pytest.raises(CorruptRecordError):
            read(damaged, in_c)
    else:
        assert read(damaged, in_c) == theirs


def test_kafka_pythons_reader_is_compared_even_with_the_c_reader_installed(monkeypatch):
    monkeypatch.setattr(DefaultRecordBatch, "__iter__", records._iter_read_in_c)
    monkeypatch.setattr(records, "read_records", lambda buffer, pos, count: 1 / 0)
    data = build([(b"k", b"v", [], 0)])
    assert [r.value for r in records.read_by_kafka_python(DefaultRecordBatch(data))] == [b"v"]


def test_control_batches_and_batches_begun_are_left_to_kafka_python():
    data = build([(b"k", b"v", [], 0), (None, b"w", [], 1)])
    batch = DefaultRecordBatch(data)
    first = next(iter(batch))  # kafka-python's own __next__, one record
    assert first.value == b"v"
    assert records._iter_read_in_c(batch) is batch  # the rest record by record, as before
    assert [r.value for r in batch] == [b"w"]


def test_install_puts_the_c_reader_in_and_uninstall_takes_it_out(monkeypatch):
    monkeypatch.setattr(DefaultRecordBatch, "__iter__", records._STOCK_ITER)
    assert not records.installed()
    assert records.unusable() is None
    monkeypatch.setenv("STREAMNB_PURE_PYTHON", "1")
    assert records.install() is False and not records.installed()
    monkeypatch.delenv("STREAMNB_PURE_PYTHON")
    assert records.install() is True and records.installed()
    data = build([(b"k", b"v", [("h", b"x")], 0)])
    assert [r.value for r in DefaultRecordBatch(data)] == [b"v"]
    records.uninstall()
    assert not records.installed()


def test_a_kafka_python_whose_records_differ_keeps_its_own_reader(monkeypatch, caplog):
    monkeypatch.setattr(DefaultRecordBatch, "__iter__", records._STOCK_ITER)
    def misreads(buffer, pos, count):
        return [(1, 0, 0, b"?", b"?", [])] * count, len(buffer)

    monkeypatch.setattr(records, "read_records", misreads)
    assert "differ" in records.unusable()
    assert records.install() is False and not records.installed()
    assert "event=records_reader_stock" in caplog.text
