"""``streamnb run``: Kafka in, predictions out, learning from labels and late feedback.

The loop is prequential: every message is predicted by the current model **before** anything
is learned from it. An unlabelled message's prediction goes to the output topic; a labelled
message's prediction feeds the accuracy metrics and then the model learns it. Feedback
(``{"type": "feedback", "id": ..., "label": ...}``) is applied through the
:class:`~streamnb.daemon.feedback.FeedbackStore`, which makes it idempotent. Anything that cannot be
used goes to the dead-letter topic with its original bytes and a reason.

State is kept per input partition ("slices", see ``docs/daemon.md``): each slice is a model
holding what was learned from that partition, plus the next offset it covers. The model used
for predictions is the sum of the assigned slices. :meth:`Daemon.checkpoint` writes all of it
in one atomic file; on assignment the daemon loads a partition's slice and seeks to exactly its
saved offset, so every label is counted once whatever moment the process died.

The Kafka side is injected (``io_factory``) so the loop can be tested against an in-memory
fake; :class:`~streamnb.daemon.kafka_io.KafkaIO` is the real one.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamnb import __version__
from streamnb.codec import Feedback, encode
from streamnb.config import ConfigError, Settings, load_settings
from streamnb.daemon import startup
from streamnb.daemon.checkpoint import (
    CheckpointError,
    check_daemon_body,
    read_checkpoint,
    write_checkpoint,
)
from streamnb.daemon.feedback import FeedbackStore, decide
from streamnb.daemon.outputs import fit_dead_letter
from streamnb.daemon.prepare import (
    DECODE_ERROR,
    FEEDBACK,
    MESSAGE,
    REJECTED,
    InProcessPreparer,
    prepare_value,
)
from streamnb.logs import configure_logging

__all__ = ["Daemon", "add_arguments", "build_daemon", "main", "slice_key"]

log = logging.getLogger("streamnb.daemon")

TP = tuple[str, int]
# Dead letters of one reason logged individually before the log only counts them.
DEAD_LETTER_LOG_FIRST = 10
# Lag of every assigned partition is refreshed this often (a scrape interval is seconds).
LAG_REPORT_SECONDS = 1.0


@dataclass(slots=True)
class _NewMessage:
    """A message read and featurized, not yet scored; ``started`` is when its record's
    processing began (the start of its latency)."""

    record: Any
    key: str
    msg_id: str
    label: str | None
    x: Any
    x_json: bytes
    started: float


@dataclass(slots=True)
class _InFlight:
    """A polled batch handed to the preparer, not yet processed; ``generation`` is the
    daemon's rebalance generation right after the poll that returned it (None: polled before
    a seek back, to be dropped)."""

    records: list
    ticket: Any
    generation: int | None


def _predicted(proba: dict[str, float]) -> str | None:
    # Ties go to the first class in sorted order, as the models' own predict_one does.
    return max(sorted(proba), key=proba.__getitem__) if proba else None


def slice_key(tp: TP) -> str:
    """The checkpoint key of a partition (topic names cannot contain ``:``).

    >>> slice_key(("mail", 3))
    'mail:3'
    """
    return f"{tp[0]}:{tp[1]}"


def _tp(key: str) -> TP:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


class Daemon:
    """The processing loop, rebalance handling and checkpoint protocol.

    ``new_model()`` makes an empty model, ``load_model(state)`` rebuilds one from
    ``to_state()``; ``pipeline.prepare(message).x`` is the model input; ``metrics`` follows
    the :mod:`streamnb.metrics` API; ``io_factory(on_assigned, on_revoked)`` returns the Kafka
    side (:class:`~streamnb.daemon.kafka_io.KafkaIO` or a fake with the same methods).
    ``preparer`` decodes and featurizes polled batches (:mod:`streamnb.daemon.prepare`; by default
    in this process with ``pipeline``); ``pipelined`` (by default: when the preparer runs
    concurrently) makes :meth:`step` prepare each batch while the one before is processed.

    With the in-memory fakes of the test suite:

    >>> import pathlib, tempfile, orjson
    >>> from tests.daemon.fakes import FakeKafka, make_daemon, settings_for
    >>> kafka = FakeKafka({"in": 1})
    >>> _ = kafka.append("in", orjson.dumps({"id": "a", "text": "win cash", "label": "spam"}))
    >>> _ = kafka.append("in", orjson.dumps({"id": "b", "text": "win big"}))
    >>> daemon = make_daemon(settings_for(pathlib.Path(tempfile.mkdtemp())), kafka)
    >>> daemon.process(daemon.io.poll(0))
    >>> daemon.checkpoint("example")  # flushes the prediction for "b"
    >>> orjson.loads(kafka.all("out")[0].value)["label"], daemon.offsets
    ('spam', {'in:0': 2})
    """

    def __init__(
        self,
        settings: Settings,
        pipeline: Any,
        new_model: Callable[[], Any],
        load_model: Callable[[dict], Any],
        metrics: Any,
        io_factory: Callable[..., Any],
        preparer: Any = None,
        pipelined: bool | None = None,
    ):
        self.settings = settings
        self.pipeline = pipeline
        self.new_model = new_model
        self.load_model = load_model
        self.metrics = metrics
        self.labels = frozenset(settings.model.labels)
        self.max_value_bytes = settings.limits.max_value_bytes

        self.slices: dict[str, Any] = {}  # assigned partitions: key -> model
        self.parked: dict[str, Any] = {}  # known but not assigned (checkpoint, revoked)
        self.offsets: dict[str, int] = {}  # key -> next offset the slice covers
        self.live: Any = new_model()  # sum of the assigned slices: the model that predicts
        # output.explain: the k tokens that weighed most, with each prediction (0: none)
        self.explain_k = settings.output.explain
        if self.explain_k:
            unavailable = getattr(self.live, "explanation_unavailable",
                                  lambda: "this model has no per-token explanation")()
            if unavailable is not None:
                raise ValueError(f"output.explain: {unavailable}")
        self.store = FeedbackStore(settings.feedback.max_ids, settings.feedback.max_bytes)

        self.lock = threading.RLock()
        self.stopping = False
        self.pending = 0  # records applied since the last checkpoint
        self.last_checkpoint = time.monotonic()
        self.dead_letter_counts: Counter[str] = Counter()
        self.featurizer_reasons_logged: set[tuple[str, str]] = set()
        # Counter metrics are added up per batch: one call per batch instead of per message;
        # so are the latency histograms' observations.
        self._tally: Counter[tuple[str, str | None]] = Counter()
        self._latencies: list[float] = []
        self._end_to_end: list[float] = []
        self.checkpoints_written = 0
        # Set when an unexpected error may have left a record half applied: from then on no
        # checkpoint is written, so a restart replays from the last consistent one.
        self.failed = False
        # When the group last took partitions away (or the daemon started) without giving the
        # new assignment yet; None once an assignment (possibly empty) has arrived.
        self.rebalancing_since: float | None = time.monotonic()
        # Bumped by every revocation and assignment: a batch polled in an earlier generation
        # is not processed (see step()).
        self.generation = 0
        self.preparer = preparer or InProcessPreparer(pipeline, self.max_value_bytes)
        self.pipelined = self.preparer.concurrent if pipelined is None else pipelined
        self._in_flight: _InFlight | None = None
        self.poll_guard: contextlib.AbstractContextManager = contextlib.nullcontext()

        self._load_checkpoint()
        self.io = io_factory(self.on_assigned, self.on_revoked)

    # ------------------------------------------------------------------ start-up
    def _load_checkpoint(self) -> None:
        body = read_checkpoint(self.settings.checkpoint.path)
        if body is None:
            log.info("no checkpoint at %s: starting empty", self.settings.checkpoint.path)
            return
        check_daemon_body(self.settings.checkpoint.path, body)
        model = body["model"]
        if model.get("kind") != self.settings.model.kind:
            raise CheckpointError(
                f"{self.settings.checkpoint.path} holds a {model.get('kind')!r} model but "
                f"model.kind is {self.settings.model.kind!r}: move the checkpoint away or "
                "change the config"
            )
        try:
            for key, part in body["slices"].items():
                self.parked[key] = self.load_model(part["model"])
                self.offsets[key] = int(part["next_offset"])
            self.store = FeedbackStore.from_state(
                body["feedback"], self.settings.feedback.max_ids, self.settings.feedback.max_bytes
            )
            if body.get("metrics") is not None:
                self.metrics.load_state(body["metrics"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            raise CheckpointError(
                f"{self.settings.checkpoint.path}: checkpoint body does not have the expected "
                f"shape: {type(error).__name__}: {error}"
            ) from None
        log.info(
            "loaded checkpoint %s: %d partition slice(s), %d remembered id(s)",
            self.settings.checkpoint.path,
            len(self.parked),
            len(self.store),
            extra={"event": "checkpoint_loaded", "offsets": dict(self.offsets)},
        )

    # ------------------------------------------------------------------ rebalance
    def on_assigned(self, tps: list[TP]) -> None:
        """Load each newly assigned partition's slice and seek to exactly its saved offset."""
        with self.lock:
            self.generation += 1
            self.rebalancing_since = None
            decisions = {}
            for tp in tps:
                key = slice_key(tp)
                if key in self.slices:
                    continue
                if key in self.parked and key in self.offsets:
                    self.slices[key] = self.parked.pop(key)
                    self.io.seek(tp, self.offsets[key])
                    decisions[key] = f"resume at {self.offsets[key]}"
                else:
                    # No state for this partition: read it from the configured end. Offsets
                    # committed in Kafka are never used to resume, because without the slice
                    # they cover, resuming there would silently drop what it had learned.
                    self.slices[key] = self.new_model()
                    self.parked.pop(key, None)
                    self.offsets.pop(key, None)
                    if self.settings.kafka.start_offset == "earliest":
                        self.io.seek_to_beginning(tp)
                    else:
                        self.io.seek_to_end(tp)
                    decisions[key] = f"no checkpoint: start at {self.settings.kafka.start_offset}"
            self._rebuild_live()
        log.info(
            "partitions assigned: %s",
            ", ".join(f"{k} ({d})" for k, d in decisions.items()) or "none new",
            extra={"event": "assigned", "partitions": decisions},
        )

    def on_revoked(self, tps: list[TP], lost: bool = False) -> None:
        """Checkpoint before giving partitions up, then take their slices out of the model."""
        with self.lock:
            self.generation += 1
            self.rebalancing_since = time.monotonic()
            if self.pending and not self.failed:
                # kafka-python runs this on its IO thread, where a blocking commit is not
                # allowed; the asynchronous one is enough for lag dashboards.
                self.checkpoint("revoked" if not lost else "lost", commit=not lost, wait=False)
            for tp in tps:
                key = slice_key(tp)
                model = self.slices.pop(key, None)
                if model is not None and key in self.offsets:
                    self.parked[key] = model  # nothing read yet: nothing worth keeping
                self.metrics.forget_partition(*tp)
            self._rebuild_live()
        log.info(
            "partitions %s: %s",
            "lost" if lost else "revoked",
            ", ".join(slice_key(tp) for tp in tps),
            extra={"event": "lost" if lost else "revoked", "partitions": tps},
        )

    def _rebuild_live(self) -> None:
        if len(self.slices) == 1:
            # One partition (the common case): the slice *is* the live model, learned once.
            (self.live,) = self.slices.values()
            return
        live = self.new_model()
        for model in self.slices.values():
            live += model
        self.live = live

    # ------------------------------------------------------------------ processing
    def process(self, records: list, prepared: list | None = None) -> None:
        """Apply one polled batch (records in offset order within each partition).

        ``prepared`` holds the preparer's result for each record (:mod:`streamnb.daemon.prepare`);
        None computes them here, record by record.

        Consecutive plain new messages (see :meth:`_read_new`) are scored and learned with one
        ``prequential_many`` call of the live model, when that model is also the slice that
        learns them (one assigned partition); every other record goes through
        :meth:`_process_one`, after the run before it. Either way each record's outputs,
        metrics and store updates are those of processing the records one by one, in order.
        """
        with self.lock:
            run: list[_NewMessage] = []
            run_ids: set[str] = set()
            for index, record in enumerate(records):
                key = slice_key((record.topic, record.partition))
                if key not in self.slices:
                    continue  # revoked while the batch was in flight: its new owner reads it
                started = time.perf_counter()
                result = self._prepare(record) if prepared is None else prepared[index]
                if result is not None and result[0] == MESSAGE and result[5]:
                    self._featurizer_noted(result[1], result[5])
                if self._batches(key):
                    new = self._read_new(record, key, result, run_ids, started)
                    if new is not None:
                        run.append(new)
                        run_ids.add(new.msg_id)
                        continue
                    self._apply_run(run)
                    run, run_ids = [], set()
                self._process_one(record, key, result, started)
                self.offsets[key] = record.offset + 1
            self._apply_run(run)
            self.pending += len(records)
            self._flush_tally()

    def _batches(self, key: str) -> bool:
        """Whether records of ``key`` may be scored in runs: the live model is the slice
        (learning goes to one model) and it has the batch step (the test fakes may not)."""
        return self.live is self.slices[key] and hasattr(self.live, "prequential_many")

    def _prepare(self, record) -> tuple | None:
        """The preparer's result for ``record``, computed here (None when it is too large)."""
        value = record.value
        if value is not None and len(value) > self.max_value_bytes:
            return None
        return prepare_value(
            self.pipeline, value, f"{record.topic}:{record.partition}:{record.offset}"
        )

    def _read_new(
        self, record, key: str, result: tuple | None, run_ids: set[str], started: float
    ) -> _NewMessage | None:
        """``record`` as a plain new message: decoded, its label allowed, featurized, its id
        neither remembered nor among ``run_ids`` (earlier in the run). None otherwise, with
        nothing done: the per-record path then handles it (dead letter, feedback, duplicate
        id)."""
        if result is None or result[0] != MESSAGE:
            return None  # too large, a decode error, feedback, or rejected by the featurizer
        msg_id, label, x, x_json = result[1:5]
        if not self._label_allowed(label) or msg_id in self.store or msg_id in run_ids:
            return None
        if label is None and self.explain_k:
            # An explanation is computed on the model that predicted: one message at a time.
            return None
        return _NewMessage(record, key, msg_id, label, x, x_json, started)

    def _apply_run(self, run: list[_NewMessage]) -> None:
        """Score and learn a run of plain new messages with one ``prequential_many`` call."""
        if not run:
            return
        updates = self.live.n_updates
        try:
            probas = self.live.prequential_many(
                [new.x for new in run], [new.label for new in run]
            )
        except Exception:  # noqa: BLE001 - a rejected input: handled one record at a time
            if self.live.n_updates != updates:
                raise  # partly learned: only a restart from the last checkpoint is exact
            for new in run:
                self._predict_and_learn(new)
                self.offsets[new.key] = new.record.offset + 1
            return
        for new, proba in zip(run, probas, strict=True):
            self._record_scored(new, proba, updates)
            if new.label is not None:
                updates += 1
            self.offsets[new.key] = new.record.offset + 1

    def report_lag(self) -> None:
        """Set the lag of every assigned partition whose high watermark is known.

        Every assigned partition, not only those that just returned records: after a
        rebalance a caught-up partition returns nothing, and its lag series must still exist.
        """
        with self.lock:
            for key in self.slices:
                tp = _tp(key)
                high = self.io.highwater(tp)
                if high is not None and key in self.offsets:
                    self.metrics.set_lag(tp[0], tp[1], max(0, high - self.offsets[key]))

    def _flush_tally(self) -> None:
        for (name, arg), n in self._tally.items():
            if arg is None:
                getattr(self.metrics, name)(n)
            else:
                getattr(self.metrics, name)(arg, n)
        self._tally.clear()
        if self._latencies:
            self.metrics.observe_latencies(self._latencies)
            self._latencies = []
        if self._end_to_end:
            self.metrics.observe_end_to_end_many(self._end_to_end)
            self._end_to_end = []

    def _process_one(self, record, key: str, result: tuple | None, started: float) -> None:
        if result is None:  # the preparers leave values over limits.max_value_bytes unread
            self._dead_letter(
                record, "too_large", f"{len(record.value)} bytes > limits.max_value_bytes"
            )
            return
        kind = result[0]
        if kind == DECODE_ERROR:
            self._dead_letter(record, result[1], result[2])
            return
        if kind == FEEDBACK:
            self._tally["consumed", "feedback"] += 1
            self._feedback(Feedback(id=result[1], label=result[2]), record)
            return
        self._message(result, record, key, started)

    def _label_allowed(self, label: str | None) -> bool:
        return label is None or not self.labels or label in self.labels

    def _label_ok(self, label: str | None, record) -> bool:
        if self._label_allowed(label):
            return True
        self._dead_letter(
            record, "unknown_label", f"{label!r:.80} is not in model.labels {sorted(self.labels)}"
        )
        return False

    def _message(self, result: tuple, record, key: str, started: float) -> None:
        """A decoded message (``result`` is MESSAGE or REJECTED): its label is checked before
        its featurizing error, as the dead letter's reason has always been chosen."""
        kind, msg_id, label = result[:3]
        if not self._label_ok(label, record):
            return
        if kind == REJECTED:
            self._dead_letter(record, result[3], result[4])
            return
        x, x_json = result[3:5]
        self._predict_and_learn(_NewMessage(record, key, msg_id, label, x, x_json, started))

    def _predict_and_learn(self, new: _NewMessage) -> None:
        """Predict a prepared message, then learn it (or its label, for a known id)."""
        try:
            proba = self.live.predict_proba_one(new.x)
        except Exception as error:  # noqa: BLE001 - e.g. a vector of the wrong length
            self._dead_letter(new.record, "model_rejected", str(error))
            return
        msg_id, key, label = new.msg_id, new.key, new.label
        entry = self.store.get(msg_id)
        if label is None:
            self._tally["consumed", "unlabelled"] += 1
            if entry is None:
                self.store.remember(msg_id, key, new.x_json, None)
            self._emit(msg_id, _predicted(proba), proba, new.record, new.started, x=new.x)
            return

        self._tally["consumed", "labelled"] += 1
        if entry is not None and entry.label is not None:
            # The id was learned already: scoring it again, by a model that knows it, would
            # inflate accuracy. It is counted as a duplicate; its label acts as feedback.
            self._tally["duplicate_message", None] += 1
        else:
            self.metrics.observe_labelled(label, _predicted(proba), proba)
        if entry is None:
            try:
                self._learn(key, new.x, label)
            except Exception as error:  # noqa: BLE001
                self._dead_letter(new.record, "model_rejected", str(error))
                return
            self.store.remember(msg_id, key, new.x_json, label)
        else:
            # The same id again (a producer retry, or a re-sent message): each id counts once,
            # under its latest label, exactly as feedback would treat it.
            self._apply_label(msg_id, entry, label)
        self._latencies.append(time.perf_counter() - new.started)

    def _record_scored(self, new: _NewMessage, proba: dict, model_updates: int) -> None:
        """What :meth:`_predict_and_learn` does besides the model's step, for a new message
        whose prediction is ``proba`` and which the model has already learned if labelled;
        ``model_updates`` is the live model's update count when it was predicted."""
        msg_id, label = new.msg_id, new.label
        if label is None:
            self._tally["consumed", "unlabelled"] += 1
            self.store.remember(msg_id, new.key, new.x_json, None)
            self._emit(msg_id, _predicted(proba), proba, new.record, new.started,
                       model_updates)
            return
        self._tally["consumed", "labelled"] += 1
        self.metrics.observe_labelled(label, _predicted(proba), proba)
        self._tally["learned", label] += 1
        self.store.remember(msg_id, new.key, new.x_json, label)
        self._latencies.append(time.perf_counter() - new.started)

    def _feedback(self, feedback: Feedback, record) -> None:
        if not self._label_ok(feedback.label, record):
            return
        entry = self.store.get(feedback.id)
        if entry is None or (entry.slice not in self.slices and entry.slice not in self.parked):
            self.metrics.feedback_outcome("unknown_id")
            self._dead_letter(
                record,
                "unknown_id",
                f"id {feedback.id!r:.80} is not among the {len(self.store)} remembered messages "
                "(aged out, or never seen by this daemon)",
            )
            return
        self._apply_label(feedback.id, entry, feedback.label)

    def _apply_label(self, msg_id: str, entry, label: str) -> None:
        outcome = decide(entry, label)
        if outcome == "learned":
            self._learn(entry.slice, entry.x, label)
        elif outcome == "relabelled":
            x = entry.x
            self._learn(entry.slice, x, entry.label, unlearn=True)
            self.metrics.unlearned(entry.label)
            self._learn(entry.slice, x, label)
            self.metrics.relabelled()
        if outcome != "duplicate":
            self.store.set_label(msg_id, label)
        self.metrics.feedback_outcome(outcome)

    def _learn(self, key: str, x: Any, label: str, unlearn: bool = False) -> None:
        """Add (or remove) one labelled input to the slice ``key`` and to the live model."""
        model = self.slices.get(key)
        assigned = model is not None
        if not assigned:
            model = self.parked[key]  # feedback for a message of a partition given up since
        if unlearn:
            model.unlearn_one(x, label)
            if assigned and self.live is not model:
                self.live.unlearn_one(x, label)
            return
        model.learn_one(x, label)
        if assigned and self.live is not model:
            self.live.learn_one(x, label)
        self._tally["learned", label] += 1

    def _emit(self, msg_id: str, predicted, proba: dict, record, started: float,
              model_updates: int | None = None, x: Any = None) -> None:
        """``x``: the model input, to explain the prediction with (``output.explain``); the
        live model must still be the one that predicted it."""
        prediction = {
            "id": msg_id,
            "label": predicted,
            "probabilities": proba,
            "score": proba[predicted] if predicted is not None else None,
            "model_updates": self.live.n_updates if model_updates is None else model_updates,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
        }
        if self.explain_k and x is not None:
            prediction["explanation"] = self.live.explain_log_odds(x, self.explain_k)
        latency = time.perf_counter() - started
        prediction["latency_seconds"] = latency
        key, value = msg_id.encode("utf-8", "surrogatepass"), encode(prediction)
        room = self.io.room(self.settings.kafka.output_topic, key, None)
        if len(value) > room:  # a poison pill for the producer: the input is dead-lettered
            self._dead_letter(record, "output_too_large", f"the prediction takes {len(value)} "
                              f"bytes, the output topic accepts {max(room, 0)} with its key")
            return
        self.io.send(self.settings.kafka.output_topic, key, value)
        self._tally["prediction_emitted", None] += 1
        self._latencies.append(latency)
        if record.timestamp_ms and record.timestamp_ms > 0:
            self._end_to_end.append(max(0.0, time.time() - record.timestamp_ms / 1000))

    def _dead_letter(self, record, reason: str, detail: str) -> None:
        headers = list(record.headers) + [
            ("streamnb.reason", reason.encode()),
            ("streamnb.detail", detail[:1000].encode("utf-8", "replace")),
            ("streamnb.source.topic", record.topic.encode()),
            ("streamnb.source.partition", str(record.partition).encode()),
            ("streamnb.source.offset", str(record.offset).encode()),
        ]
        topic = self.settings.kafka.dead_letter_topic
        self.io.send(topic, *fit_dead_letter(self.io, topic, record.key, record.value, headers))
        self.metrics.dead_lettered(reason)
        self.dead_letter_counts[reason] += 1
        count = self.dead_letter_counts[reason]
        if count <= DEAD_LETTER_LOG_FIRST or count % 1000 == 0:
            log.warning(
                "dead letter %s/%d/%d: %s: %.200s%s",
                record.topic,
                record.partition,
                record.offset,
                reason,
                detail,
                " (further ones of this reason are counted, not logged)"
                if count == DEAD_LETTER_LOG_FIRST
                else "",
                extra={
                    "event": "dead_letter",
                    "reason": reason,
                    "topic": record.topic,
                    "partition": record.partition,
                    "offset": record.offset,
                    "count": count,
                },
            )

    def _featurizer_noted(self, msg_id: str, notes: tuple) -> None:
        """Count what the featurizer cut short or found broken; log each reason's first."""
        for kind, reason in notes:
            self.metrics.featurizer_event(kind, reason)
            if (kind, reason) not in self.featurizer_reasons_logged:
                self.featurizer_reasons_logged.add((kind, reason))
                log.warning(
                    "featurizer: message %.200r %s (%s); further ones are counted in "
                    "streamnb_featurizer_events_total, not logged",
                    msg_id,
                    "was cut short by its limit" if kind == "truncated" else "has a defect",
                    reason,
                    extra={"event": "featurizer", "kind": kind, "reason": reason, "id": msg_id},
                )

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, why: str, commit: bool = True, wait: bool = True) -> None:
        """Save every slice with its next offset, atomically, then commit offsets to Kafka.

        1. The caller has applied whole records only: the models, the feedback store and
           ``offsets`` all describe exactly the records before each partition's next offset.
        2. Flush the producer, so every prediction and dead letter of those records is
           acknowledged by Kafka. A delivery failure raises here, before anything is saved,
           and the daemon stops: a restart replays those records (outputs are at least once).
        3. Snapshot the state in memory: each slice (assigned and parked) as ``to_state()``
           with its next offset, the feedback store, the metrics.
        4. Write the snapshot to a temporary file next to the checkpoint and fsync it.
        5. Rename it over the checkpoint and fsync the directory. This rename is the commit
           point: before it the old checkpoint is whole, after it the new one is.
        6. Commit the same offsets to the Kafka group, for lag dashboards only: the daemon
           never resumes from them, so a crash between 5 and 6 costs nothing.
        7. Record the checkpoint's duration and size in the metrics.
        """
        if self.failed:
            raise RuntimeError("refusing to checkpoint: a record was only partly applied")
        with self.lock:
            started = time.perf_counter()
            # Step 1: nothing to do here; process() applies records whole, under the lock.
            # Step 2
            self.io.flush()
            # Step 3
            slices = {}
            for key in sorted({*self.slices, *self.parked}):
                if key not in self.offsets:
                    continue  # assigned but nothing read yet: nothing to resume from
                model = self.slices.get(key, self.parked.get(key))
                slices[key] = {"next_offset": self.offsets[key], "model": model.to_state()}
            body = {
                "written_at": time.time(),
                "why": why,
                "streamnb_version": __version__,
                "model": {"kind": self.settings.model.kind},
                "slices": slices,
                "feedback": self.store.to_state(),
                "metrics": self.metrics.to_state(),
            }
            # Steps 4 and 5 (checkpoint.write_checkpoint: temp file, fsync, rename, fsync dir)
            size = write_checkpoint(self.settings.checkpoint.path, body)
            assigned = {_tp(k): self.offsets[k] for k in self.slices if k in self.offsets}
            self.checkpoints_written += 1
            applied, self.pending = self.pending, 0
            self.last_checkpoint = time.monotonic()
        # Step 6 (outside the lock: a blocking commit waits on the consumer's IO thread)
        if commit:
            self.io.commit(assigned, wait=wait)
        # Step 7
        duration = time.perf_counter() - started
        self.metrics.checkpoint_done(duration, size)
        self.metrics.set_model_size(
            getattr(self.live, "vocabulary_size", 0), self.live.state_nbytes()
        )
        log.info(
            "checkpoint (%s): %d record(s) since the last, %d slice(s), %d bytes, %.3f s",
            why,
            applied,
            len(slices),
            size,
            duration,
            extra={
                "event": "checkpoint",
                "why": why,
                "records": applied,
                "bytes": size,
                "seconds": round(duration, 4),
                "offsets": {k: v["next_offset"] for k, v in slices.items()},
            },
        )

    def checkpoint_due(self) -> bool:
        if not self.pending:
            return False
        return (
            self.pending >= self.settings.checkpoint.every_messages
            or time.monotonic() - self.last_checkpoint >= self.settings.checkpoint.every_seconds
        )

    # ------------------------------------------------------------------ main loop
    def _rebalance_stalled(self) -> bool:
        """True (and logged) when a rebalance has not completed within ``stall_seconds``.

        kafka-python 3 can, under heavy load, fail to finish rejoining the group; a daemon
        without partitions learns nothing, so it exits (code 3) for its supervisor to restart
        it. Partitions given up were checkpointed on revocation, so nothing is lost.
        """
        since = self.rebalancing_since
        limit = self.settings.kafka.stall_seconds
        if since is None or time.monotonic() - since <= limit:
            return False
        log.error(
            "no partition assignment for %.0f s after a rebalance started: exiting (code 3) so "
            "a restart rejoins the group",
            time.monotonic() - since,
            extra={"event": "stalled"},
        )
        return True

    def request_stop(self, *_: Any) -> None:
        self.stopping = True

    @property
    def in_flight(self) -> int:
        """Records polled and handed to the preparer, not yet processed."""
        return len(self._in_flight.records) if self._in_flight is not None else 0

    def step(self, timeout_ms: int) -> int:
        """One turn of the loop: poll, and process a batch; returns the records processed.

        Unpipelined: poll (waiting up to ``timeout_ms``) and process what came.

        Pipelined (a preparer in a child process): the batch polled last is being decoded
        and featurized by the preparer while this process polls the next one, hands it to the
        preparer, and only then runs the model step of the previous batch. The rules that keep
        the checkpoint protocol exact:

        * ``offsets`` (and so every checkpoint) only ever cover processed records; records
          polled and not processed are read again after a restart, as any unread record.
        * Rebalance guard: kafka-python runs :meth:`on_revoked` and :meth:`on_assigned` inside
          ``poll``, and both bump ``generation``. A batch is tagged with the generation right
          after the poll that returned it; if it has changed by the time the batch would be
          processed, the batch is dropped: the revocation checkpoint covered only processed
          records, and the assignment seeked each partition back to its saved offset, so the
          dropped records are read again. Processing them would learn them twice. Each
          partition of a dropped batch that is still assigned is also seeked back to its next
          unprocessed offset, so this holds even for a rebalance that kept it assigned
          (kafka-python rebalances eagerly, revoking every partition first, but the guard
          does not rely on it); the batch submitted after it is then dropped too, since it
          was polled before that seek, and the records polled next start at the saved
          offsets.
        * Latency: the batch in flight is processed as soon as the next poll returns, which
          is at once while records keep coming and after ``timeout_ms`` when the topic has
          gone idle. The poll keeps its whole timeout on purpose: kafka-python 3 finishes a
          group rejoin inside the poll that starts it, and a rejoin started in a poll of
          0-10 ms was left unfinished (no assignment for 20 s, then exit 3) in 10 of 11
          end-to-end runs, against 0 of 8 with 200 ms.
        """
        if not self.pipelined:
            records = self._poll(timeout_ms)
            if records:
                self.process(records)
            return len(records)
        in_flight = self._in_flight
        if in_flight is None:
            records = self._poll(timeout_ms)
            if records:
                self._submit(records)
            return 0
        records = self._poll(timeout_ms)
        self._in_flight = None
        # Received before the next batch is submitted: the preparer then never waits to send.
        prepared = self.preparer.results(in_flight.ticket)
        if records:
            self._submit(records)
        return self._process_in_flight(in_flight, prepared)

    def drain(self) -> int:
        """Process the batch in flight, if any (before a stop's final checkpoint)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return 0
        return self._process_in_flight(in_flight, self.preparer.results(in_flight.ticket))

    def _poll(self, timeout_ms: int) -> list:
        with self.poll_guard:
            return self.io.poll(timeout_ms)

    def _submit(self, records: list) -> None:
        ticket = self.preparer.submit(
            [record.value for record in records],
            [f"{record.topic}:{record.partition}:{record.offset}" for record in records],
        )
        self._in_flight = _InFlight(records, ticket, self.generation)

    def _process_in_flight(self, in_flight: _InFlight, prepared: list) -> int:
        """Process ``in_flight`` unless a rebalance came after its poll (see :meth:`step`)."""
        with self.lock:  # the rebalance callbacks bump the generation under the same lock
            if in_flight.generation == self.generation:
                self.process(in_flight.records, prepared)
                return len(in_flight.records)
            seeked = in_flight.generation is not None and self._seek_back(in_flight.records)
            if seeked and self._in_flight is not None:
                # The batch submitted since was polled before that seek: it is dropped in
                # turn, with no further seek (what is polled after it starts where the dropped
                # records did).
                self._in_flight.generation = None
        log.info(
            "a rebalance happened while %d polled record(s) were being prepared: they are "
            "dropped and read again from the saved offsets",
            len(in_flight.records),
            extra={"event": "batch_dropped", "records": len(in_flight.records)},
        )
        return 0

    def _seek_back(self, records: list) -> bool:
        """Seek each partition of ``records`` that is still assigned back to its next
        unprocessed record (the saved offset, or for a partition with nothing processed yet
        the first of ``records``), so the records are read again even after a rebalance
        that kept the partition and did not seek it; whether any partition was seeked."""
        first: dict[str, int] = {}
        for record in records:
            first.setdefault(slice_key((record.topic, record.partition)), record.offset)
        seeked = False
        for key, offset in first.items():
            if key in self.slices:
                self.io.seek(_tp(key), self.offsets.get(key, offset))
                seeked = True
        return seeked

    def close(self) -> None:
        """Close the Kafka side, then end the preparer."""
        try:
            self.io.close()
        finally:
            self.preparer.close()

    def run(self) -> int:
        """Step, checkpoint when due, until :meth:`request_stop`; then shut down.

        Checkpoints are taken between steps, so they cover whole batches; a batch in flight
        is not in them (see :meth:`step`). On a stop the batch in flight is processed first,
        then the final checkpoint is written.
        """
        timeout = self.settings.kafka.poll_timeout_ms
        self.poll_guard = PollWatchdog(self.settings.kafka.stall_seconds)
        lag_reported = 0.0
        try:
            while not self.stopping:
                self.step(timeout)
                if time.monotonic() - lag_reported >= LAG_REPORT_SECONDS:
                    self.report_lag()
                    lag_reported = time.monotonic()
                if self.checkpoint_due():
                    self.checkpoint("interval")
                if self._rebalance_stalled():
                    return 3
            # Finish: the batch in flight is applied; save it, commit, close.
            self.drain()
            if self.pending or self.checkpoints_written == 0:
                self.checkpoint("shutdown")
        except BaseException:
            # A record may be half applied, or outputs undelivered: closing the consumer must
            # not checkpoint this state on revocation.
            self.failed = True
            raise
        finally:
            self.close()
        log.info("stopped", extra={"event": "stopped"})
        return 0


class PollWatchdog:
    """Ends the process if one Kafka poll blocks for longer than ``limit`` seconds.

    kafka-python 3 can, rarely, leave a ``poll()`` waiting forever for its IO thread (seen
    under heavy load). A stuck daemon learns nothing and ignores SIGTERM, so the watchdog logs
    the stall and exits with code 3 instead: nothing half-done is saved (the loop is between
    batches), and the supervisor's restart resumes from the last checkpoint.

    >>> with PollWatchdog(60.0) as watchdog:
    ...     pass
    >>> watchdog.since is None
    True
    """

    def __init__(self, limit: float):
        self.limit = limit
        self.since: float | None = None
        self._thread = threading.Thread(target=self._watch, name="poll-watchdog", daemon=True)
        self._thread.start()

    def __enter__(self) -> PollWatchdog:
        self.since = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.since = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.limit / 4))
            since = self.since
            if since is not None and time.monotonic() - since > self.limit:
                log.error(
                    "a Kafka poll has been blocked for %.0f s: exiting (code 3) so a restart "
                    "resumes from the last checkpoint",
                    time.monotonic() - since,
                    extra={"event": "stalled"},
                )
                logging.shutdown()
                os._exit(3)


# ---------------------------------------------------------------------- entry point


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default="config.toml", help="settings file (default: config.toml)"
    )


def build_daemon(settings: Settings, metrics: Any = None, io_factory: Callable | None = None):
    """The daemon with the real model, featurizer, metrics and Kafka, from ``settings``."""
    from streamnb.models import make_model, model_from_state
    from streamnb.models.presets import resolve
    from streamnb.pipeline import build_pipeline

    table = settings.model.table()
    kind, options = resolve(table)  # the preset's options with [model.options] on top
    pipeline = build_pipeline(table, settings.features)
    startup.check_checkpoint_location(settings.checkpoint.path)
    if metrics is None:
        from streamnb.metrics import Metrics

        metrics = Metrics(
            window=settings.metrics.window, positive_class=settings.metrics.positive_class
        )
        metrics.set_build_info(__version__, kind)
        startup.serve_metrics(metrics, settings.metrics)
    if io_factory is None:
        from streamnb.daemon.kafka_io import KafkaIO

        limits = startup.check_kafka(settings)

        def io_factory(on_assigned, on_revoked):
            return KafkaIO(settings.kafka, on_assigned, on_revoked, limits)

    preparer = None
    if settings.pipeline.prepare_process:
        from streamnb.daemon.prepare import ProcessPreparer

        preparer = ProcessPreparer(
            build_pipeline,
            (table, dict(settings.features)),
            settings.limits.max_value_bytes,
            timeout=settings.kafka.stall_seconds,
        )
    try:
        return Daemon(
            settings,
            pipeline,
            new_model=lambda: make_model(kind, **options),
            load_model=model_from_state,
            metrics=metrics,
            io_factory=io_factory,
            preparer=preparer,
        )
    except BaseException:
        if preparer is not None:
            preparer.close()
        raise


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"streamnb: {error}", file=sys.stderr)
        return 2
    configure_logging(settings.logging.level, settings.logging.format)
    try:
        daemon = build_daemon(settings)
    except (ValueError, TypeError, CheckpointError, startup.StartupError) as error:
        # ValueError/TypeError: an unknown model kind or option, or featurizer option.
        print(f"streamnb: {error}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    log.info(
        "streamnb %s running: %s -> %s (model %s, checkpoint %s)",
        __version__,
        ",".join(settings.kafka.input_topics),
        settings.kafka.output_topic,
        settings.model.kind,
        settings.checkpoint.path,
        extra={"event": "started"},
    )
    try:
        return daemon.run()
    except Exception:
        # Nothing half-done was saved (see Daemon.failed): a restart resumes from the last
        # checkpoint. Exit non-zero so a supervisor restarts us.
        log.exception("stopping on an unexpected error", extra={"event": "failed"})
        return 1
