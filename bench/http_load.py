"""The load generator of ``bench.bench_checks``: HTTP/1.1 checks over raw sockets.

asyncio protocols on raw sockets, every request encoded before the clock starts, an answer
parsed for its status line and Content-Length only, so the client costs far less than the
servers it loads (its CPU a check is measured with it). A closed loop keeps C requests in
flight; an open loop sends at fixed intended times and measures each latency from its
intended send time, so a queue at the server counts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import socket
import time
from dataclasses import dataclass, field

#: How long a run of the load generator waits for its last answers.
ANSWER_TIMEOUT = 60.0


def check_request(raw: bytes, close: bool = False) -> bytes:
    """The bytes of ``POST /checkv2`` with ``raw`` as its body."""
    return (b"POST /checkv2 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + (b"Connection: close\r\n" if close else b"")
            + b"Content-Length: %d\r\n\r\n" % len(raw) + raw)


# ---------------------------------------------------------------------- the load generator
class _Connection(asyncio.Protocol):
    """One client connection: sends a request, reads its answer (status line, Content-Length
    and the body's bytes; nothing else is parsed) and hands it to its :class:`Load`."""

    def __init__(self, load: Load):
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.need = -1  # bytes of the whole answer, once its head is read
        self.body_at = 0
        self.status = 0
        self.close_after = False
        self.current = -1  # the request in flight
        self.dropped = False  # closed by the load itself: connection_lost changes nothing

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.load.opening -= 1
        self.load.connections_open.add(self)
        self.load.ready(self)

    def send(self, i: int) -> None:
        self.current = i
        self.transport.write(self.load.requests[i % len(self.load.requests)])

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if self.need < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).lower()
            self.status = int(head[9:12])
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                raise RuntimeError(f"an answer without Content-Length: {head[:200]!r}")
            stop = head.find(b"\r", at + 17)
            self.need = end + 4 + int(head[at + 17:stop if stop >= 0 else len(head)])
            self.body_at = end + 4
            self.close_after = b"\r\nconnection: close" in head
        if len(buffer) < self.need:
            return
        body = bytes(buffer[self.body_at:self.need]) if self.load.keep_bodies else None
        del buffer[:self.need]
        self.need = -1
        i, self.current = self.current, -1
        self.load.replied(self, i, self.status, body, self.close_after)

    def connection_lost(self, exc) -> None:
        self.load.connections_open.discard(self)
        if not self.dropped:
            self.load.lost(self)


class Load:
    """Requests sent over a pool of at most ``max_connections`` connections to
    127.0.0.1:``port``: request ``i`` is ``requests[i % len(requests)]``, each submitted with
    the time it was meant to be sent; one waits for a free connection if there is none (its
    latency, from that time, includes the wait). A connection the server closes is replaced
    by a new one for the next request."""

    def __init__(self, port: int, requests: list[bytes], max_connections: int,
                 keep_bodies: bool = False):
        self.loop = asyncio.get_running_loop()
        self.port = port
        self.requests = requests
        self.max_connections = max_connections
        self.keep_bodies = keep_bodies
        self.connections = 0  # open or opening
        self.opening = 0
        self.connections_open: set[_Connection] = set()
        self.opened = 0
        self.connect_failures = 0
        self.idle: list[_Connection] = []
        self.pending: collections.deque[int] = collections.deque()
        self.intended: list[float] = []
        self.answered: list[float] = []
        self.statuses: list[int] = []
        self.bodies: dict[int, bytes] = {}
        self.completed = 0
        self.expected: int | None = None
        self.done = self.loop.create_future()
        self.on_reply = None
        self._tasks: set[asyncio.Task] = set()

    # --- requests
    def submit(self, at: float) -> None:
        i = len(self.intended)
        self.intended.append(at)
        self.answered.append(-1.0)
        self.statuses.append(-1)
        if self.idle:
            self.idle.pop().send(i)
            return
        self.pending.append(i)
        self._reopen()

    def _record(self, i: int, status: int, body: bytes | None = None) -> None:
        self.answered[i] = self.loop.time()
        self.statuses[i] = status
        if body is not None:
            self.bodies[i] = body
        self.completed += 1
        self.check_done()

    def check_done(self) -> None:
        if (self.expected is not None and self.completed >= self.expected
                and not self.done.done()):
            self.done.set_result(None)

    # --- connections
    def _open(self) -> None:
        self.connections += 1
        self.opening += 1
        self.opened += 1
        task = self.loop.create_task(self.loop.create_connection(
            lambda: _Connection(self), "127.0.0.1", self.port))
        self._tasks.add(task)
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is None:
            return  # connection_made has put it to work
        self.connections -= 1
        self.opening -= 1
        self.connect_failures += 1
        if self.pending:  # the server is gone (or full): the oldest waiting request fails
            self._record(self.pending.popleft(), 0)
            self._next()
        if self.pending and not task.cancelled():
            self.loop.call_later(0.01, self._reopen)

    def _reopen(self) -> None:
        """Open a connection for a waiting request that none being opened will take."""
        if len(self.pending) > self.opening and self.connections < self.max_connections:
            self._open()

    def ready(self, connection: _Connection) -> None:
        if self.pending:
            connection.send(self.pending.popleft())
        else:
            self.idle.append(connection)

    def replied(self, connection: _Connection, i: int, status: int, body: bytes | None,
                close: bool) -> None:
        self._record(i, status, body)
        if close:
            connection.dropped = True
            connection.transport.close()
            self.connections -= 1
            self._reopen()
        else:
            self.ready(connection)
        self._next()

    def _next(self) -> None:
        if self.on_reply is not None:  # a closed loop sends its next request
            self.on_reply()

    def lost(self, connection: _Connection) -> None:
        self.connections -= 1
        with contextlib.suppress(ValueError):
            self.idle.remove(connection)
        self._reopen()
        if connection.current >= 0:
            self._record(connection.current, 0)
            self._next()

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for connection in list(self.connections_open):
            connection.dropped = True
            connection.transport.close()

    # --- results
    def result(self, wall: float, cpu: float) -> Run:
        return Run(wall=wall, cpu=cpu, intended=self.intended, answered=self.answered,
                   status=self.statuses, connections=self.opened, bodies=self.bodies)


@dataclass
class Run:
    """One run of the load generator against one server: each request's intended send time,
    answer time (``loop.time()``, i.e. ``time.monotonic()``) and status (0: no answer, the
    connection refused or lost; -1: none before the run gave up waiting)."""

    wall: float  # seconds from the first request's intended time to the last answer
    cpu: float  # this process's CPU seconds meanwhile
    intended: list[float]
    answered: list[float]
    status: list[int]
    connections: int  # opened
    bodies: dict[int, bytes] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return len(self.intended)

    @property
    def ok(self) -> int:
        return self.status.count(200)

    @property
    def statuses(self) -> dict[int, int]:
        return dict(collections.Counter(self.status))

    @functools.cached_property
    def latencies(self) -> list[float]:
        """Seconds from the intended send time to the answer, of the 200 answers, sorted."""
        return sorted(a - t for a, t, s in zip(self.answered, self.intended, self.status,
                                                strict=True) if s == 200)

    def percentile(self, q: float) -> float:
        return quantile(self.latencies, q)

    def within(self, start: float, end: float) -> Run:
        """The requests meant to be sent from ``start`` to ``end`` (``time.monotonic()``)."""
        kept = [i for i, t in enumerate(self.intended) if start <= t <= end]
        return Run(wall=end - start, cpu=self.cpu, intended=[self.intended[i] for i in kept],
                   answered=[self.answered[i] for i in kept],
                   status=[self.status[i] for i in kept], connections=self.connections)


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` (nearest rank below, as bench_daemon's).

    >>> quantile([1, 2, 3, 4], 0.5), quantile([1, 2, 3, 4], 0.99)
    (3, 4)
    """
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


async def _closed_loop(port: int, requests: list[bytes], n: int, concurrency: int,
                       keep_bodies: bool) -> Run:
    load = Load(port, requests, concurrency, keep_bodies)
    load.expected = n

    def next_one() -> None:
        if len(load.intended) < n:
            load.submit(load.loop.time())

    load.on_reply = next_one
    cpu, started = time.process_time(), load.loop.time()
    for _ in range(min(concurrency, n)):
        load.submit(started)
    try:
        await asyncio.wait_for(load.done, ANSWER_TIMEOUT + n / 10)
        return load.result(load.loop.time() - started, time.process_time() - cpu)
    finally:
        load.close()


def closed_loop(port: int, requests: list[bytes], n: int, concurrency: int,
                keep_bodies: bool = False) -> Run:
    """``n`` requests, ``concurrency`` of them in flight at every moment: each answer sends
    the next (a closed loop: the server's pace sets the rate)."""
    return asyncio.run(_closed_loop(port, requests, n, concurrency, keep_bodies))


async def _open_loop(port: int, requests: list[bytes], rate: float, n: int | None,
                     stop, max_connections: int) -> Run:
    load = Load(port, requests, max_connections)
    loop = load.loop
    cpu, started = time.process_time(), loop.time() + 0.01
    i = 0
    while (n is None or i < n) and not (stop is not None and stop()):
        delay = started + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        now = loop.time()
        while (n is None or i < n) and started + i / rate <= now:
            load.submit(started + i / rate)  # the time it was meant to go: a queue counts
            i += 1
    load.expected = i
    load.check_done()
    with contextlib.suppress(TimeoutError):  # the unanswered stay -1
        await asyncio.wait_for(load.done, ANSWER_TIMEOUT)
    try:
        return load.result(loop.time() - started, time.process_time() - cpu)
    finally:
        load.close()


def open_loop(port: int, requests: list[bytes], rate: float, n: int | None = None,
              stop=None, max_connections: int = 32) -> Run:
    """Requests at ``rate`` a second, their send times fixed in advance (evenly spaced), until
    ``n`` are sent or ``stop()`` returns true; latency from each one's intended time."""
    return asyncio.run(_open_loop(port, requests, rate, n, stop, max_connections))


# ---------------------------------------------------------------------- the servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, alive=lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or not alive():
                raise RuntimeError(f"nothing answers on 127.0.0.1:{port}") from None
            time.sleep(0.02)
