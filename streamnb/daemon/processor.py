"""One polled batch -> predictions, learning, feedback and dead letters (the prequential step).

:class:`RecordProcessor` is the part of :class:`~streamnb.daemon.loop.Daemon` that handles
records: every message is predicted by the global model **before** anything is learned from it;
an unlabelled message's prediction goes to the output topic, a labelled one's to the accuracy
metrics, and then its slice (and the global model) learn it. A prediction is the model's
log-probabilities (``prequential_log_proba_many``, ``predict_log_proba_one``): the record
carries them, exact and finite where a probability underflows, and the probabilities made
from them (``probabilities_of``), every class the model knows in both. Feedback goes through the
partition's feedback store, which makes it idempotent. Anything unusable is dead-lettered with
its original bytes and a reason. Outputs go into the open transaction (``io.send``; a run's
predictions with one ``io.send_many``); the commit (:mod:`streamnb.daemon.commit`) makes them
visible together with the state they changed.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamnb.codec import Feedback, encode
from streamnb.daemon.changelog import run_key
from streamnb.daemon.feedback import FeedbackStore, decide, decode_x, entry_cost
from streamnb.daemon.outputs import fit_dead_letter
from streamnb.daemon.partitions import slice_key, tp_of
from streamnb.daemon.prepare import (
    DECODE_ERROR,
    FEEDBACK,
    MESSAGE,
    REJECTED,
    NumberedCounts,
    NumberedPoll,
    prepare_value,
    token_counts,
    with_token_counts,
)
from streamnb.models._base import first_best, probabilities_of
from streamnb.models._prequential import numbered_step_takes, prequential_numbered

__all__ = ["RecordProcessor"]

log = logging.getLogger("streamnb.daemon")

# Dead letters of one reason logged individually before the log only counts them.
DEAD_LETTER_LOG_FIRST = 10
# Room left in a feedback entry's changelog record for a label (and brackets) it may get, and
# with decay the clock it is learned at (up to 21 bytes).
LABEL_ROOM = 96


def _surely_fits_run(msg_id: str, label: str | None, x_json: bytes, run_max_bytes: int) -> bool:
    """Whether a feedback entry, with ``LABEL_ROOM`` for a later label, surely fits a run
    record of ``run_max_bytes``, without encoding its id and label (a character of them takes
    at most 6 bytes of JSON): the usual case, far from the limit."""
    return len(x_json) + 6 * (len(msg_id) + len(label or "")) + LABEL_ROOM < run_max_bytes


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


class _Run:
    """Consecutive plain new messages of one batch, not yet scored: each member's record,
    slice key, the time its processing began and its preparer's result (a ``MESSAGE``
    tuple: id, label, model input, its JSON, notes), appended as the batch is read; then
    (:meth:`close`) the ids, labels, inputs and JSON as the parallel sequences the model step
    and the feedback store take, made from the results at once instead of an append each."""

    __slots__ = ("records", "keys", "started", "results", "id_set", "ids", "labels", "xs",
                 "x_jsons")

    def __init__(self) -> None:
        self.records: list = []
        self.keys: list[str] = []
        self.started: list[float] = []
        self.results: list[tuple] = []
        self.id_set: set[str] = set()

    def joiners(self) -> tuple:
        """What a member joins with, bound once a run: the appends of its record, key, start
        and result, the add of its id, and the ids so far."""
        return (self.records.append, self.keys.append, self.started.append,
                self.results.append, self.id_set.add, self.id_set)

    def close(self) -> None:
        """The members' ids, labels, model inputs and their JSON, in order."""
        _, self.ids, self.labels, self.xs, self.x_jsons, _ = zip(*self.results, strict=True)

    def messages(self) -> list[_NewMessage]:
        return [_NewMessage(*member) for member in zip(
            self.records, self.keys, self.ids, self.labels, self.dicts(), self.x_jsons,
            self.started, strict=True)]

    def dicts(self) -> tuple:
        """The model inputs, those the prepare process numbered made dicts (once)."""
        if self.xs and type(self.xs[0]) is NumberedCounts:
            self.xs = tuple(map(token_counts, self.xs, self.x_jsons))
        return self.xs

    def numbered(self) -> NumberedPoll | None:
        """The poll whose numbers all the members' inputs are, if they are."""
        xs = self.xs
        if type(xs[0]) is not NumberedCounts:
            return None
        poll = xs[0].poll
        numbered = NumberedCounts
        if all(type(x) is numbered and x.poll is poll for x in xs):
            return poll
        return None


class _LazyDicts:
    """The inputs of a numbered run as the model's loop reads them (indexed, sliced or
    iterated), each dict made from its JSON when read: the step's loop reads a few."""

    def __init__(self, x_jsons: tuple):
        self.x_jsons = x_jsons

    def __len__(self) -> int:
        return len(self.x_jsons)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [decode_x(x_json) for x_json in self.x_jsons[index]]
        return decode_x(self.x_jsons[index])

    def __iter__(self):
        return map(decode_x, self.x_jsons)


def _labeller(model: Any) -> Callable[[dict[str, float]], str | None]:
    """The label a prediction of ``model`` is emitted and scored with: the most probable
    class (``first_best``), or with the model's ``class_offsets`` its decision
    (``Model.decide_proba``; docs/models.md, "The decision"). The probabilities stay the
    model's. Chosen once a batch: the check would cost more than ``first_best`` itself."""
    return model.decide_proba if getattr(model, "class_offsets", None) else first_best


class RecordProcessor:
    """The per-record half of the daemon (a mixin of :class:`~streamnb.daemon.loop.Daemon`,
    whose state it uses: ``parts``, ``offsets``, ``io``, ``metrics``, ``settings``)."""

    def _store(self, key: str) -> FeedbackStore:
        return self.parts.slices[key].store

    #: How this batch's predictions are labelled (set by :meth:`process` from the live
    #: model, see :func:`_labeller`).
    _label_of = staticmethod(first_best)

    def process(self, records: list, prepared: list | None = None) -> None:
        """Apply one polled batch (records in offset order within each partition).

        ``prepared`` holds the preparer's result for each record (:mod:`streamnb.daemon.prepare`);
        None computes them here, record by record.

        Consecutive plain new messages (see :meth:`_apply_run`) are scored and learned with one
        ``prequential_many`` call of the live model, when that model is also the slice that
        learns them (one assigned partition); every other record goes through
        :meth:`_process_one`, after the run before it. Either way each record's outputs,
        metrics and store updates are those of processing the records one by one, in order.
        """
        with self.lock:
            self._label_of = _labeller(self.live)
            self._output_rooms.clear()
            run = _Run()
            add_record, add_key, add_started, add_result, add_id, run_ids = run.joiners()
            run_poll = None  # the NumberedPoll of the run's numbered members
            # Per partition of the batch, its slice key if owned (None: revoked while the
            # batch was in flight, its new owner reads it), whether it is scored in runs, the
            # ids its feedback store holds and the bytes of its store's run records: none
            # changes while the lock is held.
            partitions: dict[tuple[str, int], tuple[str | None, bool, Any, int]] = {}
            # Whether any message may join a run (decay moves the clock at every learn; an
            # explanation is computed on the model that predicted): the same for the batch.
            runs_possible = getattr(self.live, "half_life", None) is None
            # What makes a message plain (see _apply_run), looked up once a batch.
            unlabelled_joins = not self.explain_k
            labels = self.labels
            perf_counter = time.perf_counter
            for index, record in enumerate(records):
                tp = (record.topic, record.partition)
                known = partitions.get(tp)
                if known is None:
                    key = slice_key(tp)
                    if key in self.slices:
                        store = self._store(key)
                        known = (key, runs_possible and self._batches(key), store.ids(),
                                 store.run_max_bytes)
                    else:
                        known = (None, False, None, 0)
                    partitions[tp] = known
                key, batches, held, run_max_bytes = known
                if key is None:
                    continue
                started = perf_counter()
                result = self._prepare(record) if prepared is None else prepared[index]
                if batches and result is not None and result[0] == MESSAGE:
                    # a plain new message joins the run
                    _, msg_id, label, _, x_json, notes = result
                    if notes:
                        self._featurizer_noted(msg_id, notes)
                    if ((unlabelled_joins if label is None else not labels or label in labels)
                            and msg_id not in held and msg_id not in run_ids
                            and (_surely_fits_run(msg_id, label, x_json, run_max_bytes)
                                 or self._fits_state(key, msg_id, x_json, label))):
                        x = result[3]
                        poll = x.poll if type(x) is NumberedCounts else None
                        if poll is not run_poll:
                            # a part of the batch another prepare process numbered: its
                            # numbers are its own, and a run is stepped from one numbering
                            if run_ids:
                                self._apply_run(run)
                                run = _Run()
                                (add_record, add_key, add_started, add_result, add_id,
                                 run_ids) = run.joiners()
                            run_poll = poll
                        add_record(record)
                        add_key(key)
                        add_started(started)
                        add_result(result)
                        add_id(msg_id)
                        continue
                elif result is not None and result[0] == MESSAGE and result[5]:
                    self._featurizer_noted(result[1], result[5])
                if run_ids:
                    self._apply_run(run)
                    run = _Run()
                    add_record, add_key, add_started, add_result, add_id, run_ids = run.joiners()
                self._process_one(record, key, with_token_counts(result), started)
                self.offsets[key] = record.offset + 1
            self._apply_run(run)
            self.pending += len(records)
            self._flush_tally()

    def _batches(self, key: str) -> bool:
        """Whether records of ``key`` may be scored in runs: the live model has the batch
        step (the test fakes may not)."""
        return hasattr(self.live, "prequential_many")

    def _prepare(self, record) -> tuple | None:
        """The preparer's result for ``record``, computed here (None when it is too large)."""
        value = record.value
        if value is not None and len(value) > self.max_value_bytes:
            return None
        result = prepare_value(self.pipeline, value, None)
        if result[0] == DECODE_ERROR and result[1] == "bad_id":
            # No id, or not a usable one: decoded again with the record's place as the id it
            # lacks (made only now: a string a record cost more than the check), which gives
            # what decoding with it at once gives.
            result = prepare_value(
                self.pipeline, value, f"{record.topic}:{record.partition}:{record.offset}")
        return result

    def _apply_run(self, run: _Run) -> None:
        """Score and learn a run of plain new messages with one ``prequential_many`` call.

        A message is plain when it is decoded and featurized, its label allowed (unlabelled:
        only without ``output.explain``, an explanation is computed on the model that
        predicted, one at a time), its id neither remembered in its slice's store nor earlier
        in the run, and its feedback entry fits a changelog record. Anything else goes through
        the per-record path (dead letter, feedback, duplicate id). The caller has checked that
        the live model does not decay (every learn moves its clock: one message at a time).

        What each member then costs besides the model step is its feedback entry, its
        prediction (unlabelled) or its metrics' observation (labelled): the feedback entries
        are remembered a slice's run at a time (``FeedbackStore.remember_many``), the
        counters and the observations added up for the run."""
        if not run.records:
            return
        run.close()
        live = self.live
        updates = live.n_updates
        try:
            poll = run.numbered()
            if poll is not None and numbered_step_takes(live):
                numbers, counts, lengths = poll.arrays(run.xs)
                log_probas = prequential_numbered(live, poll.numbering, numbers, counts,
                                                  lengths, _LazyDicts(run.x_jsons),
                                                  list(run.labels))
            else:
                log_probas = live.prequential_log_proba_many(run.dicts(), run.labels)
        except Exception:  # noqa: BLE001 - a rejected input: handled one record at a time
            if live.n_updates != updates:
                raise  # partly learned: only a restart from the last commit is exact
            for new in run.messages():
                self._predict_and_learn(new)
                self.offsets[new.key] = new.record.offset + 1
            return
        slices, offsets, latencies = self.parts.slices, self.offsets, self._latencies
        keys = run.keys
        if keys[0] == keys[-1] and keys.count(keys[0]) == len(keys):
            slices[keys[0]].store.remember_many(keys[0], run.ids, run.x_jsons, run.labels)
        else:
            for key in dict.fromkeys(keys):
                members = [i for i, of in enumerate(keys) if of == key]
                slices[key].store.remember_many(
                    key, [run.ids[i] for i in members], [run.x_jsons[i] for i in members],
                    [run.labels[i] for i in members])
        label_of, emit, perf_counter = self._label_of, self._emit, time.perf_counter
        exp = math.exp
        outputs: list[tuple[bytes, bytes]] = []  # the run's predictions, sent at once
        observations: list[tuple[str, str | None, dict]] = []
        unlabelled = 0
        part_key = part = None
        for record, key, msg_id, label, x, x_json, started, log_proba in zip(
                run.records, keys, run.ids, run.labels, run.xs, run.x_jsons, run.started,
                log_probas, strict=True):
            if label is None:
                unlabelled += 1
                proba = probabilities_of(log_proba)
                emit(msg_id, label_of(proba), proba, log_proba, record, started, updates,
                     outputs=outputs)
            else:
                # Nothing emits a labelled message's log-probabilities: its dict becomes its
                # probabilities in place (the metrics keep it). A second dict for each message
                # made the cyclic collector run a third more often in the fake loop benchmark.
                for c, lp in log_proba.items():
                    log_proba[c] = exp(lp)
                proba = log_proba
                observations.append((label, label_of(proba), proba))
                updates += 1
                if key != part_key:
                    part_key, part = key, slices[key]
                if part.model is not live:  # the live model learned it in the batch step
                    part.model.learn_one(token_counts(x, x_json), label)
                latencies.append(perf_counter() - started)
            offsets[key] = record.offset + 1
        if outputs:
            self.io.send_many(self.settings.kafka.output_topic, outputs)
        tally = self._tally
        if unlabelled:
            tally["consumed", "unlabelled"] += unlabelled
        if observations:
            tally["consumed", "labelled"] += len(observations)
            learned = Counter(run.labels)  # the observations' labels, and the unlabelled's None
            learned.pop(None, None)
            for label, n in learned.items():
                tally["learned", label] += n
            self.metrics.observe_labelled_many(observations)

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
        if not self._fits_state(key, msg_id, x_json, label):
            self._dead_letter(record, "too_large_for_state", (
                f"the message's feedback entry ({len(msg_id)}-byte id, {len(x_json)}-byte "
                "model input) would not fit a record of its changelog topic"))
            return
        self._predict_and_learn(_NewMessage(record, key, msg_id, label, x, x_json, started))

    def _predict_and_learn(self, new: _NewMessage) -> None:
        """Predict a prepared message, then learn it (or its label, for a known id)."""
        try:
            log_proba = self.live.predict_log_proba_one(new.x)
        except Exception as error:  # noqa: BLE001 - e.g. a vector of the wrong length
            self._dead_letter(new.record, "model_rejected", str(error))
            return
        proba = probabilities_of(log_proba)
        msg_id, key, label = new.msg_id, new.key, new.label
        store = self._store(key)
        entry = store.get(msg_id)
        if label is None:
            self._tally["consumed", "unlabelled"] += 1
            if entry is None:
                store.remember(msg_id, key, new.x_json, None)
            self._emit(msg_id, self._label_of(proba), proba, log_proba, new.record, new.started,
                       x=new.x)
            return

        self._tally["consumed", "labelled"] += 1
        if entry is not None and entry.label is not None:
            # The id was learned already: scoring it again, by a model that knows it, would
            # inflate accuracy. It is counted as a duplicate; its label acts as feedback.
            self._tally["duplicate_message", None] += 1
        else:
            self.metrics.observe_labelled(label, self._label_of(proba), proba)
        if entry is None:
            try:
                clock = self._learn(key, new.x, label)
            except Exception as error:  # noqa: BLE001
                self._dead_letter(new.record, "model_rejected", str(error))
                return
            store.remember(msg_id, key, new.x_json, label, clock)
        else:
            # The same id again (a producer retry, or a re-sent message): each id counts once,
            # under its latest label, exactly as feedback would treat it.
            self._apply_label(msg_id, entry, label)
        self._latencies.append(time.perf_counter() - new.started)

    def _feedback(self, feedback: Feedback, record) -> None:
        if not self._label_ok(feedback.label, record):
            return
        key = slice_key(record.tp)
        store = self._store(key)
        entry = store.get(feedback.id)
        if entry is None:
            self.metrics.feedback_outcome("unknown_id")
            self._dead_letter(
                record,
                "unknown_id",
                f"id {feedback.id!r:.80} is not among the {len(store)} remembered messages of "
                f"partition {key} (aged out, never seen, or its message went to another "
                "partition: key input records by message id)",
            )
            return
        self._apply_label(feedback.id, entry, feedback.label)

    def _apply_label(self, msg_id: str, entry, label: str) -> None:
        store = self._store(entry.slice)
        outcome = decide(entry, label)
        clock = None
        if outcome == "learned":
            clock = self._learn(entry.slice, entry.x, label)
        elif outcome == "relabelled":
            # With decay the correction keeps the message's age: the old label's remaining
            # weight goes, the new label gets the weight it would have had.
            x = entry.x
            self._learn(entry.slice, x, entry.label, unlearn=True, learned_at=entry.clock)
            self.metrics.unlearned(entry.label)
            self._learn(entry.slice, x, label, learned_at=entry.clock)
            self.metrics.relabelled()
        if outcome != "duplicate":
            store.set_label(msg_id, label, clock)
        self.metrics.feedback_outcome(outcome)

    def _learn(self, key: str, x: Any, label: str, unlearn: bool = False,
               learned_at: int | None = None) -> int | None:
        """Add (or remove) one labelled input to the owned slice ``key`` and the live model;
        returns the slice's decay clock after it (None without decay)."""
        clock = self.parts.learn(key, x, label, unlearn=unlearn, learned_at=learned_at)
        if not unlearn:
            self._tally["learned", label] += 1
        return clock

    def _fits_state(self, key: str, msg_id: str, x_json: bytes, label: str | None) -> bool:
        """Whether the message's feedback entry fits one record of its changelog partition
        (a run of its own, see :mod:`streamnb.daemon.feedback`): one that does not would fail
        the commit's transaction at every restart. The label it may get later is allowed
        ``LABEL_ROOM`` bytes."""
        if _surely_fits_run(msg_id, label, x_json, self._store(key).run_max_bytes):
            return True
        return entry_cost(msg_id, label, x_json) + LABEL_ROOM <= self._run_room(key)

    def _run_room(self, key: str) -> int:
        """The value bytes a feedback run record may carry to the changelog of ``key``."""
        topic = self.io.changelog_of(tp_of(key))[0]
        room = self._changelog_room.get(topic)
        if room is None:
            room = self._changelog_room[topic] = self.io.room(topic, run_key(2**63), None)
        return room

    def _emit(self, msg_id: str, predicted, proba: dict, log_proba: dict, record,
              started: float, model_updates: int | None = None, x: Any = None,
              outputs: list | None = None) -> None:
        """``log_proba``: the prediction (class -> log P(class | x), every class the model
        knows), ``proba`` its probabilities (``probabilities_of``: the same classes, 0.0
        where one underflows), ``predicted`` the label decided on them.
        ``x``: the model input, to explain the prediction with (``output.explain``); the
        live model must still be the one that predicted it. With ``outputs`` the prediction's
        record joins that list (a run's, handed to the producer with one ``send_many``)
        instead of being sent; a prediction too large for the output topic is dead-lettered
        at once either way."""
        prediction = {
            "id": msg_id,
            "label": predicted,
            "probabilities": proba,
            # exact where probabilities saturate (1.0 and 0.0): a consumer ranks by these
            "log_probabilities": log_proba,
            "score": proba[predicted] if predicted is not None else None,
            "model_updates": self.live.n_updates if model_updates is None else model_updates,
            # The sum of every partition's slice: the group's model, remote slices lagging by
            # about one commit interval of their owners.
            "model": "global",
            "model_partitions": len(self.parts.slices),
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
        }
        if self.explain_k and x is not None:
            prediction["explanation"] = self.live.explain_log_odds(x, self.explain_k)
        latency = time.perf_counter() - started
        prediction["latency_seconds"] = latency
        key, value = msg_id.encode("utf-8", "surrogatepass"), encode(prediction)
        # A record's size depends on its key's length, not its bytes: the room is found once
        # a batch for each length (``process`` clears them).
        room = self._output_rooms.get(len(key))
        if room is None:
            room = self._output_rooms[len(key)] = self.io.room(
                self.settings.kafka.output_topic, key, None)
        if len(value) > room:  # a poison pill for the producer: the input is dead-lettered
            self._dead_letter(record, "output_too_large", f"the prediction takes {len(value)} "
                              f"bytes, the output topic accepts {max(room, 0)} with its key")
            return
        if outputs is None:
            self.io.send(self.settings.kafka.output_topic, key, value)
        else:
            outputs.append((key, value))
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
