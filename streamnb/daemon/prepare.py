"""Decoding and featurizing of input values, in this process or one batch ahead in a child.

Turning a record's value into the model's input (JSON decode, then the featurizer) is a pure
function of the value and the configured featurizer and model options, and it is about a third
of the daemon's per-record work on SMS. The model step, by contrast, must run in record order
in the daemon's process. :class:`ProcessPreparer` therefore decodes and featurizes a polled
batch in a child process (or several, each given a consecutive part of it) while the daemon
runs the model step of the batch before it: two cores busy instead of one, or more.
:class:`InProcessPreparer` has the same surface and computes at once (the test fakes use
it, and ``pipeline.prepare_process = false`` selects it).

A result is a plain tuple (cheap to pickle; the decode and featurizer errors travel as their
reason and detail strings, never as exception objects, whose constructors do not unpickle):

* ``(DECODE_ERROR, reason, detail)`` — the value is not a valid message or feedback;
* ``(FEEDBACK, id, label)``;
* ``(MESSAGE, id, label, x, x_json, notes)`` — the model input, its feedback-store encoding,
  and what the featurizer noted: ``("truncated", limit)`` for each limit that cut the message
  short, ``("defect", name)`` for each defect its reader found (usually ``()``);
* ``(REJECTED, id, label, reason, detail)`` — a message the featurizer could not read, with
  the reason and detail the daemon's dead letter carries;
* ``None`` for a value over ``limits.max_value_bytes``: it is never decoded (nor sent to the
  child); the daemon dead-letters it as ``too_large`` without looking at a result.

From the child, token counts (a ``dict``, or the featurizer's ``Counter``: the text models'
input) travel as their ``x_json`` and as token numbers (:class:`TokenNumbering`): the child
numbers each token the first time it sees it and sends, per batch, the new tokens once and
every message's numbers and counts as arrays. In the daemon such a message's model input is a
:class:`NumberedCounts`: the model step of a run of them reads the numbers straight into its
batch (``TokenNumbers`` in :mod:`streamnb.models._prequential`, which keeps each number's
model row), and every other use makes the dict from ``x_json`` (:func:`token_counts`, through
:func:`~streamnb.daemon.feedback.decode_x`), which gives back an equal dict in the same order.
A mail's dict rebuilt from its JSON (``orjson.loads``) and read again by the step cost the
daemon's main thread 56 µs on SpamAssassin, its numbers 17.5 (``bench.prepare_floor``, before
stored inputs were compressed: decompressing a mail's adds 8 µs to the first). Pickled
instead, a ``Counter`` is rebuilt through Python's ``Counter.update``: it cost more than
featurizing the mail in the daemon's own process.

>>> from tests.daemon.fakes import WordPipeline
>>> preparer = InProcessPreparer(WordPipeline(), max_value_bytes=100)
>>> values = [b'{"id": "a", "text": "hi hi"}', b"[1]", b"x" * 101]
>>> results = preparer.results(preparer.submit(values, ["in:0:0", "in:0:1", "in:0:2"]))
>>> results[0]
(2, 'a', None, {'hi': 2}, b'{"hi":2}', ())
>>> results[1:]
[(0, 'bad_json', 'expected a JSON object, got list'), None]
"""

from __future__ import annotations

import atexit
import multiprocessing
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamnb.codec import DecodeError, Feedback, decode
from streamnb.daemon.feedback import FeedbackStore, decode_x
from streamnb.models._prequential import NumberingTable, TokenNumbers, native

__all__ = [
    "DECODE_ERROR",
    "FEEDBACK",
    "MESSAGE",
    "REJECTED",
    "InProcessPreparer",
    "NumberedCounts",
    "PreparerError",
    "ProcessPreparer",
    "prepare_value",
    "token_counts",
    "with_numbered_counts",
    "with_token_counts",
]

DECODE_ERROR, FEEDBACK, MESSAGE, REJECTED = range(4)

Result = tuple | None


class PreparerError(RuntimeError):
    """The prepare process ended or failed: the batch's records cannot be processed."""


def prepare_value(pipeline: Any, value: bytes | None, default_id: str) -> tuple:
    """What the daemon needs of one value before the model step (see the module docstring)."""
    try:
        item = decode(value, default_id)
    except DecodeError as error:
        return (DECODE_ERROR, error.reason, error.detail)
    if type(item) is Feedback:
        return (FEEDBACK, item.id, item.label)
    try:
        prepared = pipeline.prepare(item)
        x = prepared.x
        x_json = FeedbackStore.encode_x(x)
    except Exception as error:  # noqa: BLE001 - any parse failure is a dead letter
        return (REJECTED, item.id, item.label,
                getattr(error, "reason", None) or "parse_error", str(error))
    if prepared.truncated or prepared.defects:
        return (MESSAGE, item.id, item.label, x, x_json, _notes(prepared))
    return (MESSAGE, item.id, item.label, x, x_json, ())


def _notes(prepared: Any) -> tuple[tuple[str, str], ...]:
    return (*(("truncated", limit) for limit in prepared.truncated),
            *(("defect", defect) for defect in prepared.defects))


def _prepare_batch(pipeline: Any, values: Sequence[bytes | None | bool],
                   default_ids: Sequence[str]) -> list[Result]:
    """Results of a batch in which ``False`` stands for a value too large to be looked at."""
    return [None if value is False else prepare_value(pipeline, value, default_id)
            for value, default_id in zip(values, default_ids, strict=True)]


def _without_token_counts(results: list[Result]) -> list[Result]:
    """``results`` for the pipe: a message's token counts (a ``dict``, or the featurizer's
    ``Counter``) are left to its ``x_json``. A ``Counter`` unpickles through its Python
    ``__init__`` and ``update``: a mail's took the daemon more than its featurizing saved."""
    return [(MESSAGE, r[1], r[2], None, r[4], r[5])
            if r and r[0] == MESSAGE and type(r[3]) in _TOKEN_COUNTS else r for r in results]


_TOKEN_COUNTS = (dict, Counter)


def _with_token_counts(results: list[Result]) -> list[Result]:
    """The inverse of :func:`_without_token_counts`."""
    return [(MESSAGE, r[1], r[2], decode_x(r[4]), r[4], r[5])
            if r and r[0] == MESSAGE and r[3] is None else r for r in results]


class TokenNumbering:
    """The child's numbering of its batches' tokens (a ``NumberingTable`` of
    :mod:`streamnb.models._prequential`, in C); after ``limit`` tokens it starts again (the
    daemon's copy of the tokens is as long as the child's)."""

    #: Tokens numbered before the numbering starts again: about 20 MB of tokens in each
    #: process. SpamAssassin's 6,046 mails hold about 190,000.
    LIMIT = 1 << 18

    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._numbering = NumberingTable()

    def number(self, results: list[Result]) -> tuple | None:
        """For the messages of ``results`` with token counts: ``(restarted, new_tokens,
        numbers, counts, positions, lengths)``, their tokens' numbers and counts
        concatenated in message and dict order, their places in ``results`` and their
        numbers of tokens; ``restarted`` when the numbering started again before this batch.
        None when the step cannot read a message's counts as arrays (a token not a ``str``,
        a count not an ``int`` in [1, 2**46)), or without the C step: the counts then travel
        as their JSON alone."""
        positions = [i for i, r in enumerate(results)
                     if r and r[0] == MESSAGE and type(r[3]) in _TOKEN_COUNTS]
        if not positions or not native():
            return None
        restarted = len(self._numbering.tokens) > self.limit
        numbering = NumberingTable() if restarted else self._numbering
        numbered = numbering.number([results[i][3] for i in positions])
        if numbered is None:
            return None  # (a new numbering is dropped: the daemon's copy is the old one)
        self._numbering = numbering
        new_tokens, numbers, counts, lengths = numbered
        return restarted, new_tokens, numbers, counts, positions, lengths


class NumberedCounts:
    """A message's token counts as the child numbered them: message ``index`` of ``poll``.
    The run's step reads them as numbers; anything else takes :func:`token_counts`."""

    __slots__ = ("poll", "index")

    def __init__(self, poll: NumberedPoll, index: int):
        self.poll, self.index = poll, index

    def __repr__(self) -> str:
        return f"NumberedCounts(message {self.index} of a poll)"


class NumberedPoll:
    """A batch's numbered messages: their tokens' numbers in ``numbering`` and counts,
    concatenated, message ``k`` from ``offsets[k]`` to ``offsets[k + 1]``."""

    __slots__ = ("numbering", "numbers", "counts", "offsets")

    def __init__(self, numbering: TokenNumbers, numbers: np.ndarray, counts: np.ndarray,
                 lengths: np.ndarray):
        self.numbering, self.numbers, self.counts = numbering, numbers, counts
        self.offsets = np.concatenate(([0], np.cumsum(lengths)))

    def arrays(self, members: Sequence[NumberedCounts]) -> tuple[np.ndarray, ...]:
        """The numbers, counts and lengths of ``members`` (messages of this poll, in order)."""
        index = np.fromiter((m.index for m in members), dtype=np.int64, count=len(members))
        offsets = self.offsets
        starts, stops = offsets[index], offsets[index + 1]
        if index[-1] - index[0] + 1 == index.size:  # consecutive: one slice
            part = slice(starts[0], stops[-1])
            return self.numbers[part], self.counts[part], stops - starts
        spans = [slice(a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
        return (np.concatenate([self.numbers[span] for span in spans]),
                np.concatenate([self.counts[span] for span in spans]), stops - starts)


def with_numbered_counts(numbering: TokenNumbers, results: list[Result],
                         numbered: tuple | None) -> list[Result]:
    """The child's ``results`` and ``numbered`` (:meth:`TokenNumbering.number`) as the daemon
    takes them: each numbered message's input a :class:`NumberedCounts`, ``numbering`` kept
    in step with the child's; without numbers, the counts made from their JSON."""
    if numbered is None:
        return _with_token_counts(results)
    restarted, new_tokens, numbers, counts, positions, lengths = numbered
    if restarted:
        numbering.restart()
    numbering.extend(new_tokens)
    poll = NumberedPoll(numbering, numbers, counts, lengths)
    for k, i in enumerate(positions):
        r = results[i]
        results[i] = (MESSAGE, r[1], r[2], NumberedCounts(poll, k), r[4], r[5])
    return results


def token_counts(x: Any, x_json: bytes) -> Any:
    """The model input ``x`` of a ``MESSAGE`` result, its dict made from ``x_json`` if the
    child numbered it."""
    return decode_x(x_json) if type(x) is NumberedCounts else x


def with_token_counts(result: Result) -> Result:
    """``result``, a numbered message's counts made a dict (see :func:`token_counts`)."""
    if result and result[0] == MESSAGE and type(result[3]) is NumberedCounts:
        return (MESSAGE, result[1], result[2], token_counts(result[3], result[4]), result[4],
                result[5])
    return result


def _stand_ins(values: Sequence[bytes | None], max_value_bytes: int) -> list[bytes | None | bool]:
    return [False if value is not None and len(value) > max_value_bytes else value
            for value in values]


class InProcessPreparer:
    """Computes each batch in :meth:`submit`, in this process, with ``pipeline``."""

    concurrent = False
    #: never waited for: each batch is computed in :meth:`submit`
    waited_seconds = 0.0

    def __init__(self, pipeline: Any, max_value_bytes: int):
        self.pipeline = pipeline
        self.max_value_bytes = max_value_bytes
        self._done: dict[int, list[Result]] = {}
        self._tickets = 0

    def submit(self, values: Sequence[bytes | None], default_ids: Sequence[str]) -> int:
        self._tickets += 1
        self._done[self._tickets] = _prepare_batch(
            self.pipeline, _stand_ins(values, self.max_value_bytes), default_ids)
        return self._tickets

    def results(self, ticket: int) -> list[Result]:
        return self._done.pop(ticket)

    def close(self) -> None:
        self._done.clear()


class ProcessPreparer:
    """The surface of :class:`InProcessPreparer`, computing in ``processes`` child processes.

    Each child builds its own pipeline as ``factory(*args)`` (for the daemon,
    :func:`streamnb.pipeline.build_pipeline` of the ``[model]`` and ``[features]`` settings,
    which is what the daemon's own pipeline is built from). A batch is cut into as many
    consecutive parts as there are children, one each, and its results are the parts' in
    order: batches are answered in the order they were submitted. A pipe is never written by
    both ends at once: :meth:`submit` first receives the results of every earlier ticket a
    child still owes before it sends that child a part (so a large batch can never block the
    parent's send while the child blocks sending results); the daemon's loop calls
    :meth:`results` for batch N before it submits batch N+1, so nothing is waited for there.

    A child ignores SIGINT and SIGTERM (the daemon decides when to stop) and ends when its
    pipe closes: on :meth:`close`, at interpreter exit, or when the daemon dies. If a child
    dies, or takes longer than ``timeout`` seconds (None: no limit; the daemon gives it
    ``kafka.stall_seconds``) to answer a batch, :meth:`results` (or :meth:`submit`) raises
    :class:`PreparerError` naming it. Each child numbers its tokens on its own, starting
    again after ``numbering_limit`` tokens (:class:`TokenNumbering`); a part's numbered
    messages share one :class:`NumberedPoll`, which the daemon's runs do not cross.
    """

    concurrent = True
    START_TIMEOUT = 60.0

    def __init__(self, factory: Callable[..., Any], args: tuple, max_value_bytes: int,
                 timeout: float | None = None, numbering_limit: int = TokenNumbering.LIMIT,
                 processes: int = 1):
        if processes < 1:
            raise ValueError(f"a ProcessPreparer needs at least one process, not {processes}")
        self.max_value_bytes = max_value_bytes
        self.timeout = timeout
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        self._children: list[_Child] = []
        try:
            for number in range(processes):
                name = "streamnb-prepare" if processes == 1 else f"streamnb-prepare-{number + 1}"
                self._children.append(_Child(context, factory, args, numbering_limit, name))
            for child in self._children:  # started together, then each waited for
                child.receive("start", self.START_TIMEOUT)
        except BaseException:
            self.close()
            raise
        #: ticket -> the children given a part of it, in the batch's order
        self._parts: dict[int, list[_Child]] = {}
        self._tickets = 0

    @property
    def pid(self) -> int | None:
        """The first child's pid (see :attr:`pids`)."""
        return self._children[0].process.pid

    @property
    def pids(self) -> list[int | None]:
        return [child.process.pid for child in self._children]

    @property
    def waited_seconds(self) -> float:
        """How long this process has waited, in all, for the children's results: near the
        time of its whole loop, the children bound the daemon's rate."""
        return sum(child.waited for child in self._children)

    @property
    def numberings(self) -> list[TokenNumbers]:
        """Each child's numbering of tokens as the daemon keeps it."""
        return [child.numbering for child in self._children]

    def submit(self, values: Sequence[bytes | None], default_ids: Sequence[str]) -> int:
        self._tickets += 1
        ticket = self._tickets
        stand_ins, default_ids = _stand_ins(values, self.max_value_bytes), list(default_ids)
        # parts of ceil(n / children) values: as many parts as children, fewer for a batch
        # of fewer values than children, one (maybe empty) at least
        size = -(-len(stand_ins) // len(self._children)) or 1
        parts = []
        for k, start in enumerate(range(0, max(len(stand_ins), 1), size)):
            child = self._children[k]
            child.send(ticket, (stand_ins[start:start + size], default_ids[start:start + size]),
                       self.timeout)
            parts.append(child)
        self._parts[ticket] = parts
        return ticket

    def results(self, ticket: int) -> list[Result]:
        parts = self._parts.pop(ticket, None)
        if parts is None:
            raise KeyError(f"no batch submitted as ticket {ticket}")
        if len(parts) == 1:
            return parts[0].results(ticket, self.timeout)
        results: list[Result] = []
        for child in parts:
            results += child.results(ticket, self.timeout)
        return results

    def close(self) -> None:
        """End the children: each exits when its pipe closes."""
        for child in self._children:
            child.close()


class _Child:
    """One prepare process of a :class:`ProcessPreparer`: its pipe, the tickets whose part it
    still owes (oldest first; it answers in order) and the daemon's copy of its numbering."""

    def __init__(self, context, factory: Callable[..., Any], args: tuple,
                 numbering_limit: int, name: str):
        self.conn, child_end = context.Pipe()
        self.process = context.Process(
            target=_run_preparer, args=(factory, args, child_end, numbering_limit),
            name=name, daemon=True,
        )
        self.process.start()
        child_end.close()
        # multiprocessing joins its children at exit; the child ends when its pipe does.
        atexit.register(self.conn.close)
        self.numbering = TokenNumbers()  # the child's TokenNumbering, and the tokens' rows
        self.owed: list[int] = []
        self.received: dict[int, list[Result]] = {}
        self.waited = 0.0  # seconds blocked until a batch's results began to arrive

    def send(self, ticket: int, part: tuple, timeout: float | None) -> None:
        while self.owed:
            self._receive_owed(timeout)
        try:
            self.conn.send(part)
        except (BrokenPipeError, ConnectionError, EOFError, OSError) as error:
            raise PreparerError(f"{self.name()} has ended: {error!r}") from error
        self.owed.append(ticket)

    def results(self, ticket: int, timeout: float | None) -> list[Result]:
        while ticket not in self.received:
            if not self.owed:
                raise KeyError(f"no batch submitted as ticket {ticket}")
            self._receive_owed(timeout)
        return self.received.pop(ticket)

    def _receive_owed(self, timeout: float | None) -> None:
        results, numbered = self.receive("prepare a batch", timeout, counted=True)
        self.received[self.owed[0]] = with_numbered_counts(self.numbering, results, numbered)
        self.owed.pop(0)

    def receive(self, what: str, timeout: float | None, counted: bool = False) -> Any:
        """The child's next answer; ``counted``: the time until it begins to arrive is added
        to :attr:`waited`."""
        try:
            started = time.perf_counter()
            if not self.conn.poll(timeout):  # (None: as long as it takes)
                raise PreparerError(f"{self.name()} did not {what} within {timeout:.0f} s")
            if counted:
                self.waited += time.perf_counter() - started
            status, detail = self.conn.recv()
        except (EOFError, ConnectionError, OSError) as error:
            self.process.join(1)
            raise PreparerError(
                f"{self.name()} ended (exit code {self.process.exitcode}) before it could "
                f"{what}") from error
        if status == "failed":
            raise PreparerError(f"{self.name()} could not {what}: {detail}")
        return detail

    def name(self) -> str:
        return f"the prepare process {self.process.name} (pid {self.process.pid})"

    def close(self) -> None:
        self.conn.close()
        atexit.unregister(self.conn.close)
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)


def _run_preparer(factory: Callable[..., Any], args: tuple, conn,
                  numbering_limit: int = TokenNumbering.LIMIT) -> None:
    """The child's loop: a batch ``(values, default_ids)`` in, ``("ok", (results, numbered))``
    out (``numbered``: :meth:`TokenNumbering.number` of the results)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        pipeline = factory(*args)
    except Exception as error:  # noqa: BLE001 - reported to the daemon, which fails to start
        conn.send(("failed", repr(error)))
        return
    conn.send(("ok", None))
    numbering = TokenNumbering(numbering_limit)
    while True:
        try:
            values, default_ids = conn.recv()
        except (EOFError, ConnectionError, OSError):  # closed by the daemon, or it is gone
            return
        try:
            results = _prepare_batch(pipeline, values, default_ids)
            numbered = numbering.number(results)
            reply = ("ok", (_without_token_counts(results), numbered))
        except Exception as error:  # noqa: BLE001 - the daemon fails, as it would in-process
            reply = ("failed", repr(error))
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionError, OSError):
            return
