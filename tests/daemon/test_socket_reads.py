"""kafka-python's transports, made to read larger chunks of a broker's socket, read the same
bytes and report the same errors as kafka-python's own code, in fewer ``recv`` calls; a
kafka-python whose reading is not the one replaced keeps its own."""

from __future__ import annotations

import importlib.util
import os
import types

import pytest
from kafka.errors import KafkaConnectionError
from kafka.net import transport

from streamnb.daemon.kafka_io import SOCKET_READ_BYTES, read_sockets_in_larger_chunks

TRANSPORTS = ("KafkaTCPTransport", "KafkaSSLTransport")


class BufferedSocket:
    """A non-blocking socket holding ``data``: ``recv`` hands it out as a socket does (at
    most what is asked), then raises ``BlockingIOError``, or returns b"" once ``closed``."""

    def __init__(self, data: bytes, closed: bool = False):
        self.data, self.closed, self.asked = data, closed, []

    def recv(self, size: int) -> bytes:
        self.asked.append(size)
        if not self.data:
            if self.closed:
                return b""
            raise BlockingIOError
        chunk, self.data = self.data[:size], self.data[size:]
        return chunk


def stock_transport_module() -> types.ModuleType:
    """A fresh copy of kafka-python's transport module, its methods as kafka-python ships them
    (whatever this process has done to the imported one)."""
    spec = importlib.util.spec_from_file_location("stock_kafka_transport", transport.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(function, sock: BufferedSocket) -> tuple[bytes, type | None]:
    data, error = function(types.SimpleNamespace(_sock=sock))
    return data, type(error) if error is not None else None


@pytest.mark.parametrize("name", TRANSPORTS)
@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("size", [0, 1, 4096, 4097, 1 << 20, 3 * SOCKET_READ_BYTES + 5])
def test_a_transport_reads_what_kafka_pythons_own_reads_in_fewer_calls(name, closed, size):
    assert read_sockets_in_larger_chunks() == []
    stock = getattr(stock_transport_module(), name).__dict__["_sock_recv"]
    larger = getattr(transport, name).__dict__["_sock_recv"]
    data = os.urandom(size)
    theirs, ours = BufferedSocket(data, closed), BufferedSocket(data, closed)
    assert read(larger, ours) == read(stock, theirs)
    assert read(larger, BufferedSocket(data, closed))[0] == data
    assert read(larger, BufferedSocket(data, closed))[1] == (KafkaConnectionError if closed
                                                            else None)
    assert set(ours.asked) == {SOCKET_READ_BYTES} and set(theirs.asked) == {4096}
    # a call a full chunk, and the one that finds the socket empty (or closed)
    assert len(ours.asked) == -(-size // SOCKET_READ_BYTES) + 1
    # the very same code, but for the one constant
    assert larger.__code__.co_code == stock.__code__.co_code
    assert larger.__code__.co_names == stock.__code__.co_names


def test_making_them_read_larger_chunks_again_changes_nothing():
    read_sockets_in_larger_chunks()
    functions = [getattr(transport, name).__dict__["_sock_recv"] for name in TRANSPORTS]
    assert read_sockets_in_larger_chunks() == []
    assert [getattr(transport, name).__dict__["_sock_recv"] for name in TRANSPORTS] == functions


def test_a_transport_whose_reading_is_not_the_one_replaced_keeps_its_own(monkeypatch):
    def own_reading(self):
        return self._sock.recv(8192), None

    monkeypatch.setattr(transport.KafkaTCPTransport, "_sock_recv", own_reading)
    assert read_sockets_in_larger_chunks() == [
        "KafkaTCPTransport._sock_recv is not the one this replaces"]
    assert transport.KafkaTCPTransport.__dict__["_sock_recv"] is own_reading
    assert read(own_reading, BufferedSocket(b"x" * 10_000))[0] == b"x" * 8192
