"""``streamnb run``: Kafka in, predictions out, learning from labels and late feedback.

The loop is prequential: every message is predicted by the current model **before** anything
is learned from it. An unlabelled message's prediction goes to the output topic; a labelled
message's prediction feeds the accuracy metrics and then the model learns it. Feedback
(``{"type": "feedback", "id": ..., "label": ...}``) is applied through the partition's
:class:`~streamnb.daemon.feedback.FeedbackStore`, which makes it idempotent. Anything that
cannot be used goes to the dead-letter topic with its original bytes and a reason.

State is kept per input partition ("slices", :mod:`streamnb.daemon.partitions`) in Kafka: each
slice lives in a partition of a compacted changelog topic (:mod:`streamnb.daemon.changelog`).
The daemon learns into the slices of the partitions the group assigned to it, reads every
other slice from the changelog, and predicts with the sum of all of them (the global model).
:meth:`Daemon.checkpoint` commits one Kafka transaction holding the outputs of the records
since the last commit, the changed keys of the owned slices and the input offsets, so a crash
anywhere leaves all of a commit or none of it (see its numbered steps).

The Kafka side is injected (``io_factory``) so the loop can be tested against an in-memory
fake; :class:`~streamnb.daemon.kafka_io.KafkaIO` is the real one.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamnb import __version__
from streamnb.config import ConfigError, Settings, load_settings
from streamnb.daemon import startup
from streamnb.daemon.changelog import ChangelogError
from streamnb.daemon.commit import Committer
from streamnb.daemon.errors import ChangelogTopicError, FencedError
from streamnb.daemon.feedback import FeedbackStore
from streamnb.daemon.partitions import TP, Partitions, slice_key
from streamnb.daemon.partitions import tp_of as _tp
from streamnb.daemon.prepare import InProcessPreparer
from streamnb.daemon.processor import LABEL_ROOM, RecordProcessor
from streamnb.daemon.watchdog import STALLED_EXIT_CODE, Watchdog
from streamnb.logs import configure_logging

__all__ = ["Daemon", "FENCED_EXIT_CODE", "add_arguments", "build_daemon", "freeze_start_up_heap",
           "main", "slice_key"]

log = logging.getLogger("streamnb.daemon")

# Lag of every assigned partition is refreshed this often (a scrape interval is seconds).
LAG_REPORT_SECONDS = 1.0
#: Exit code of a daemon that found itself fenced (a newer producer with its transactional id,
#: or a newer generation of the group): it stops without writing; restarting it is safe.
FENCED_EXIT_CODE = 4
#: Exit code of a daemon that found a changelog record it cannot apply (an operator's case).
CHANGELOG_EXIT_CODE = 5
#: How long taking a partition over waits for an earlier owner's transaction to resolve (see
#: Daemon._settled_ends): far above the markers' lag (tens of ms under load), well below a
#: session, since the rebalance callback it runs in sends no heartbeats.
SETTLE_SECONDS = 2.0


@dataclass(slots=True)
class _InFlight:
    """A polled batch handed to the preparer, not yet processed; ``generation`` is the
    daemon's rebalance generation right after the poll that returned it (None: polled before
    a seek back, to be dropped)."""

    records: list
    ticket: Any
    generation: int | None




class Daemon(RecordProcessor, Committer):
    """The loop: start-up from the changelog, rebalances, polling, following the remote
    slices, and when to commit. Processing records is :class:`RecordProcessor`'s
    (:mod:`streamnb.daemon.processor`), the commit protocol :class:`Committer`'s
    (:mod:`streamnb.daemon.commit`).

    ``new_model()`` makes an empty model (it must offer the keyed statistics of
    :mod:`streamnb.models._keyed`); ``pipeline.prepare(message).x`` is the model input;
    ``metrics`` follows the :mod:`streamnb.metrics` API; ``io_factory(on_assigned,
    on_revoked)`` returns the Kafka side (:class:`~streamnb.daemon.kafka_io.KafkaIO` or a
    fake with the same methods). ``preparer`` decodes and featurizes polled batches
    (:mod:`streamnb.daemon.prepare`; by default in this process with ``pipeline``);
    ``pipelined`` (by default: when the preparer runs concurrently) makes :meth:`step`
    prepare each batch while the one before is processed.

    Constructing the daemon reads every slice from the changelog, then joins the group.

    With the in-memory fakes of the test suite:

    >>> import pathlib, tempfile, orjson
    >>> from tests.daemon.fakes import FakeKafka, make_daemon, settings_for
    >>> kafka = FakeKafka({"in": 1})
    >>> _ = kafka.append("in", orjson.dumps({"id": "a", "text": "win cash", "label": "spam"}))
    >>> _ = kafka.append("in", orjson.dumps({"id": "b", "text": "win big"}))
    >>> daemon = make_daemon(settings_for(pathlib.Path(tempfile.mkdtemp())), kafka)
    >>> daemon.process(daemon.io.poll(0))
    >>> daemon.checkpoint("example")  # commits the prediction for "b" with the state
    >>> orjson.loads(kafka.all("out")[0].value)["label"], daemon.offsets
    ('spam', {'in:0': 2})
    """

    def __init__(
        self,
        settings: Settings,
        pipeline: Any,
        new_model: Callable[[], Any],
        metrics: Any,
        io_factory: Callable[..., Any],
        preparer: Any = None,
        pipelined: bool | None = None,
        watchdog: Watchdog | None = None,
    ):
        self.settings = settings
        self.watchdog = watchdog
        self.pipeline = pipeline
        self.new_model = new_model
        self.metrics = metrics
        self.labels = frozenset(settings.model.labels)
        self.max_value_bytes = settings.limits.max_value_bytes

        feedback = settings.feedback
        self.max_tokens = settings.model.max_tokens
        self.parts = Partitions(
            self._new_slice_model if self.max_tokens else new_model,
            lambda key: FeedbackStore(feedback.max_ids, feedback.max_bytes,
                                      self._run_room(key) - LABEL_ROOM),
            new_live=new_model)
        self.offsets: dict[str, int] = {}  # owned key -> next offset processed

        self.lock = threading.RLock()
        self.stopping = False
        self.pending = 0  # records applied since the last commit
        self.last_checkpoint = time.monotonic()
        self.dead_letter_counts: Counter[str] = Counter()
        self.featurizer_reasons_logged: set[tuple[str, str]] = set()
        self._changelog_room: dict[str, int] = {}  # value bytes a feedback entry may take
        self._output_rooms: dict[int, int] = {}  # a prediction's room, by its key's length
        # output.explain: the k tokens that weighed most, with each prediction (0: none)
        self.explain_k = settings.output.explain
        if self.explain_k:
            unavailable = getattr(new_model(), "explanation_unavailable",
                                  lambda: "this model has no per-token explanation")()
            if unavailable is not None:
                raise ValueError(f"output.explain: {unavailable}")
        # Counter metrics are added up per batch: one call per batch instead of per message;
        # so are the latency histograms' observations.
        self._tally: Counter[tuple[str, str | None]] = Counter()
        self._latencies: list[float] = []
        self._end_to_end: list[float] = []
        self.checkpoints_written = 0
        # Set when an unexpected error may have left a record half applied: from then on no
        # commit is made, so a restart resumes from the last consistent one.
        self.failed = False
        # Why the loop must end now (partitions lost, fenced), with its exit code.
        self.fatal: tuple[int, str] | None = None
        # When the group last took partitions away (or the daemon started) without giving the
        # new assignment yet; None once an assignment (possibly empty) has arrived, or the
        # member has joined a later generation than the one it was in then.
        self.rebalancing_since: float | None = time.monotonic()
        self.rebalancing_from_generation: int | None = None
        # Bumped by every revocation and assignment: a batch polled in an earlier generation
        # is not processed (see step()).
        self.generation = 0
        # Partitions assigned since the main loop last reported where they resumed.
        self._newly_assigned: list[TP] = []
        # When every remote slice was last seen caught up with its changelog.
        self.remote_caught_up_at = time.monotonic()
        self.preparer = preparer or InProcessPreparer(pipeline, self.max_value_bytes)
        self.pipelined = self.preparer.concurrent if pipelined is None else pipelined
        self._in_flight: _InFlight | None = None
        self.poll_guard: contextlib.AbstractContextManager = contextlib.nullcontext()
        # The front door serving checks with the live model (streamnb.serve), if any.
        self.front_door: Any = None

        self.io = io_factory(self.on_assigned, self.on_revoked)
        self._changelog_input = {
            self.io.changelog_of((topic, 0))[0]: topic for topic in settings.kafka.input_topics
        }
        self._restore_all()
        self.io.subscribe()

    # ------------------------------------------------------------------ the slices
    @property
    def live(self) -> Any:
        """The model that predicts: the sum of every slice, owned and remote."""
        return self.parts.live

    @property
    def slices(self) -> dict[str, Any]:
        """The owned slices' models, by key."""
        return {key: part.model for key, part in self.parts.slices.items() if part.owned}

    @property
    def parked(self) -> dict[str, Any]:
        """The remote slices' models (read from the changelog), by key."""
        return {key: part.model for key, part in self.parts.slices.items() if not part.owned}

    def _new_slice_model(self) -> Any:
        """A slice that can expire tokens: it stamps them with its step clock."""
        model = self.new_model()
        model.track_last_seen()
        return model

    def _input_key(self, changelog_tp: TP) -> str:
        return slice_key((self._changelog_input[changelog_tp[0]], changelog_tp[1]))

    def _restore_all(self) -> None:
        """Read every changelog partition to its end before joining the group: the global
        model is whole before the first prediction."""
        started = time.perf_counter()
        tps = self.io.input_partitions()
        for tp in tps:
            self.parts.slice(slice_key(tp))
        changelog_tps = [self.io.changelog_of(tp) for tp in tps]
        self.io.tail_assign(dict.fromkeys(changelog_tps))
        applied = self._catch_up(changelog_tps, follow=False)
        self.parts.resum()
        log.info(
            "read the state of %d partition(s) from the changelog: %d record(s) in %.2f s, "
            "%d update(s) in the global model",
            len(tps),
            applied,
            time.perf_counter() - started,
            self.live.n_updates,
            extra={"event": "state_restored", "partitions": len(tps), "records": applied,
                   "seconds": round(time.perf_counter() - started, 3)},
        )

    def _catch_up(self, changelog_tps: list[TP], timeout: float | None = None,
                  follow: bool = True, ends: dict[TP, int] | None = None) -> int:
        """Apply changelog records until each of ``changelog_tps`` is read to its committed
        end, or to ``ends`` (records of other partitions read meanwhile are applied too;
        ``follow=False``: to the slices only, the caller re-sums the global model). A large
        changelog may take long; only ``stall_seconds`` (or ``timeout``) without any record
        is an error."""
        if not changelog_tps:
            return 0
        limit = self.settings.kafka.stall_seconds if timeout is None else timeout
        if ends is None:
            ends = self.io.tail_ends(changelog_tps)
        deadline = time.monotonic() + limit
        applied = 0
        while True:
            positions = self.io.tail_positions(changelog_tps)
            if all(positions[tp] >= ends[tp] for tp in changelog_tps):
                return applied
            if time.monotonic() > deadline:
                raise ChangelogError(
                    f"the changelog gave no record for {limit:.0f} s before its end "
                    f"(positions {positions}, ends {ends})")
            got = self._apply_changelog(self.io.tail_poll(200), follow)
            if got:
                applied += got
                deadline = time.monotonic() + limit

    def _apply_changelog(self, records: list, follow: bool = True) -> int:
        """Apply records read from the changelog to the remote slices (and the global model)."""
        if not records:
            return 0
        by_key: dict[str, list] = {}
        for record in records:
            by_key.setdefault(self._input_key(record.tp), []).append(record)
        applied = 0
        with self.lock:
            for key, items in by_key.items():
                part = self.parts.slice(key)
                if part.owned:
                    continue  # read before it was assigned here: its state is already held
                where = f"changelog {items[0].topic}:{items[0].partition} offsets " \
                        f"{items[0].offset}-{items[-1].offset}"
                try:
                    applied += self.parts.apply_remote(
                        key, [(r.key, r.value) for r in items], follow)
                except ChangelogError as error:
                    raise ChangelogError(f"{where}: {error}") from None
        return applied

    def follow_changelog(self) -> None:
        """Apply what the changelog reader has fetched (no waiting), and note the staleness."""
        self._apply_changelog(self.io.tail_poll(0))
        lag = self.io.tail_lag()
        now = time.monotonic()
        if not lag:
            self.remote_caught_up_at = now
        setter = getattr(self.metrics, "set_global_model_staleness", None)
        if setter is not None:
            setter(now - self.remote_caught_up_at, lag)

    # ------------------------------------------------------------------ rebalance
    def on_assigned(self, tps: list[TP]) -> None:
        """Take each newly assigned partition's slice over (``tps`` may hold partitions
        already owned, eager assignors hand the whole new assignment; those keep their slice
        and offsets as they are): read its changelog to the end once every commit of an
        earlier owner is visible there (:meth:`_settled_ends`; the slice is usually held
        already, as a remote slice), then learn into it. The consumer resumes each partition
        at the offset committed with that state."""
        started = time.perf_counter()
        waited = 0
        with self.lock:
            self.generation += 1
            self.rebalancing_since = None
            new = [tp for tp in tps if not self.parts.slice(slice_key(tp)).owned]
            changelog_tps = [self.io.changelog_of(tp) for tp in new]
            known = set(self.io.tail_assignment())
            self.io.tail_assign({tp: None for tp in changelog_tps if tp not in known})
            try:
                ends, waited = self._settled_ends(new, changelog_tps)
                applied = self._catch_up(changelog_tps, ends=ends)
            except ChangelogError as error:
                # Raised here, kafka-python would log it and hand the loop a KafkaError;
                # the loop ends on it instead, with its own exit code.
                self.fatal = (CHANGELOG_EXIT_CODE, f"cannot read the state: {error}")
                self.failed = True
                return
            self.io.tail_unassign(changelog_tps)
            for tp in new:
                key = slice_key(tp)
                self.parts.own(key)
                self.offsets.pop(key, None)
            self._newly_assigned.extend(new)
        log.info(
            "partitions assigned: %s (state caught up from the changelog: %d record(s), "
            "%.3f s)",
            ", ".join(slice_key(tp) for tp in new) or "none new",
            applied,
            time.perf_counter() - started,
            extra={"event": "assigned", "partitions": [slice_key(tp) for tp in new],
                   "records": applied, "seconds": round(time.perf_counter() - started, 4),
                   "unsettled_changelogs": waited},
        )

    def _settled_ends(self, tps: list[TP], changelog_tps: list[TP]) -> tuple[dict[TP, int], int]:
        """Where to read the changelogs of the newly assigned ``tps`` to before taking their
        slices over: their ``read_committed`` ends once every transaction that wrote there
        (or holds the partitions' offsets) is resolved; and how many were not at first.

        The consumer resumes a partition at its committed offset, and its offset fetch waits
        for any transaction holding that offset (KIP-447). The slice must be read to the same
        point, and the ``read_committed`` end alone is not it: ``commit_transaction`` returns
        once the broker has decided to commit, before the markers that make the records
        visible are written (tens of ms under load), and a partition's previous owner commits
        on revocation just before its new owner is given it; a zombie can even finish a commit
        whose offsets it sent before it was fenced. Read only to that end, the slice would
        lack the last commit while the partition resumes after it, and this daemon's next
        commit would write the slice's keys without it: labels lost. So, first no transaction
        holds the offsets of ``tps`` (the earlier owner's commit is decided and its records
        written), then each changelog partition's ``read_committed`` end has reached its high
        watermark (every transaction there is committed or aborted).

        Both waits together last at most :data:`SETTLE_SECONDS`: this runs in the rebalance
        callback, where kafka-python 3 sends no heartbeats, and a dead producer's open
        transaction (killed mid-commit, with a transactional id no one reuses) stays
        unresolved until the broker aborts it after ``kafka.transaction_timeout_ms``, longer
        than a session. Past that bound the slice is read to the ``read_committed`` end as it
        is, with a warning (``event=takeover_unsettled``): the transaction still open then is
        almost certainly such a dead one, which will be aborted."""
        if not tps:
            return {}, 0
        deadline = time.monotonic() + SETTLE_SECONDS
        # What the ends were at first: how many a read to the read_committed end alone would
        # have read short (the log's unsettled_changelogs).
        highs = self.io.tail_highwaters(changelog_tps)
        ends = self.io.tail_ends(changelog_tps)
        unsettled = sum(ends[tp] < highs[tp] for tp in changelog_tps)
        offsets_stable = self.io.settle_offsets(tps, SETTLE_SECONDS)
        highs = self.io.tail_highwaters(changelog_tps)
        while True:
            ends = self.io.tail_ends(changelog_tps)
            behind = [tp for tp in changelog_tps if ends[tp] < highs[tp]]
            if not behind and offsets_stable:
                return ends, unsettled
            if not offsets_stable or time.monotonic() > deadline:
                log.warning(
                    "taking %s over with %s: read to the read_committed end (a dead "
                    "producer's open transaction, aborted after kafka.transaction_timeout_ms?)",
                    ", ".join(slice_key(tp) for tp in tps),
                    "offsets still held by a transaction" if not offsets_stable else
                    "a transaction unresolved on changelog " +
                    ", ".join(slice_key(tp) for tp in behind),
                    extra={"event": "takeover_unsettled",
                           "partitions": [slice_key(tp) for tp in tps],
                           "changelogs": [slice_key(tp) for tp in behind],
                           "offsets_stable": offsets_stable},
                )
                return ends, unsettled
            time.sleep(0.01)

    def on_revoked(self, tps: list[TP], lost: bool = False) -> None:
        """Commit before giving partitions up, then read their slices from the changelog."""
        with self.lock:
            self.generation += 1
            self.rebalancing_since = time.monotonic()
            self.rebalancing_from_generation = self.io.stable_generation()
            if lost:
                # Their uncommitted changes may already belong to no one: abort, and let a
                # restart read the committed state.
                self.fatal = (STALLED_EXIT_CODE, "partitions lost (the session expired?): "
                              "exiting so a restart reads the committed state")
                self.failed = True
                with contextlib.suppress(Exception):
                    self.io.abort()
            elif self.pending and not self.failed:
                try:
                    self.checkpoint("revoked")
                except FencedError as error:
                    self.fatal = (FENCED_EXIT_CODE, f"fenced, stopping without writing: {error}")
                except Exception as error:  # noqa: BLE001 - the loop ends on it, see above
                    self.fatal = (1, f"the commit before giving partitions up failed: {error!r}")
            keys = [slice_key(tp) for tp in tps]
            if not lost:
                changelog_tps = [self.io.changelog_of(tp) for tp in tps]
                # From the committed end: what is before it is what this daemon holds.
                self.io.tail_assign(self.io.tail_ends(changelog_tps))
            for tp, key in zip(tps, keys, strict=True):
                self.parts.disown(key)
                self.offsets.pop(key, None)
                self.metrics.forget_partition(*tp)
        log.log(
            logging.ERROR if lost else logging.INFO,
            "partitions %s: %s",
            "lost" if lost else "revoked",
            ", ".join(keys),
            extra={"event": "lost" if lost else "revoked", "partitions": keys},
        )

    def report_assignments(self) -> None:
        """Log where each newly assigned partition resumed: at the offset committed with its
        state, or (never committed: its first assignment in this group) at
        ``kafka.start_offset``. Called from the loop, not the rebalance callback, because it
        asks the group coordinator."""
        with self.lock:
            new, self._newly_assigned = self._newly_assigned, []
        # Two rebalances before the loop comes here (a join that settles in two rounds) list
        # a partition twice: report it once.
        for tp in dict.fromkeys(new):
            committed = self.io.committed(tp)
            key = slice_key(tp)
            if committed is None:
                log.info(
                    "partition %s has no committed offset (its first assignment in group %s): "
                    "starting at %s", key, self.settings.kafka.group_id,
                    self.settings.kafka.start_offset,
                    extra={"event": "partition_started", "partition": key,
                           "start_offset": self.settings.kafka.start_offset},
                )
            else:
                with self.lock:
                    if key in self.parts.slices and self.parts.slices[key].owned:
                        # where the lag is counted from until a record is processed
                        self.offsets.setdefault(key, committed)
                log.info(
                    "partition %s resumes at its committed offset %d", key, committed,
                    extra={"event": "partition_resumed", "partition": key, "offset": committed},
                )

    # ------------------------------------------------------------------ lag
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

    # ------------------------------------------------------------------ main loop
    def _rebalance_stalled(self) -> bool:
        """True (and logged) when a rebalance has not completed within ``stall_seconds``.

        kafka-python 3 can, under heavy load, fail to finish rejoining the group; a daemon
        without partitions learns nothing, so it exits (code 3) for its supervisor to restart
        it. Partitions given up were committed on revocation, so nothing is lost.

        A member that has joined a later generation is not stalled, whatever it holds: with
        ``cooperative-sticky``, kafka-python calls no listener for a join that adds no
        partition, and a standby daemon (more members than partitions) gets none at all.
        """
        since = self.rebalancing_since
        limit = self.settings.kafka.stall_seconds
        if since is None or time.monotonic() - since <= limit:
            return False
        joined = self.io.stable_generation()
        if joined is not None and joined > (
                -1 if self.rebalancing_from_generation is None
                else self.rebalancing_from_generation):
            self.rebalancing_since = None
            log.info("joined the group's generation %d with partitions %s", joined,
                     ", ".join(sorted(self.slices)) or "none",
                     extra={"event": "joined", "generation": joined,
                            "partitions": sorted(self.slices)})
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
        the commit protocol exact:

        * ``offsets`` (and so every commit) only ever cover processed records; records
          polled and not processed are read again after a restart, as any unread record.
        * Rebalance guard: kafka-python runs :meth:`on_revoked` and :meth:`on_assigned` inside
          ``poll``, and both bump ``generation``. A batch is tagged with the generation right
          after the poll that returned it; if it has changed by the time the batch would be
          processed, the batch is dropped: the revocation commit covered only processed
          records, and the consumer resumes each assigned partition at its committed offset, so the
          dropped records are read again. Processing them would learn them twice. Each
          partition of a dropped batch that is still assigned is also seeked back to its next
          unprocessed offset, so this holds even for a rebalance that kept it assigned
          (an eager assignor revokes every partition first; ``cooperative-sticky`` keeps
          the partitions that do not move, with their fetch positions, so there this seek
          is what keeps them exact); the batch submitted after it is then dropped too, since it
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
        waited = self.preparer.waited_seconds
        prepared = self.preparer.results(in_flight.ticket)
        self.metrics.prepare_waited(self.preparer.waited_seconds - waited)
        if records:
            self._submit(records)
        return self._process_in_flight(in_flight, prepared)

    def drain(self) -> int:
        """Process the batch in flight, if any (before a stop's final commit)."""
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
        """Stop serving checks, close the Kafka side, then end the preparer."""
        try:
            if self.front_door is not None:
                self.front_door.stop()
            self.io.close()
        finally:
            self.preparer.close()

    def run(self) -> int:
        """Step, follow the changelog, commit when due, until :meth:`request_stop`; then shut
        down.

        Commits are made between steps, so they cover whole batches; a batch in flight is not
        in them (see :meth:`step`). On a stop a join of the group in flight is let complete
        first (as an interval commit waits for it: :meth:`Committer.join_holds_commits`),
        the batch in flight is processed, then the final commit is made. Returns the exit
        code: 0, 3 (stalled, or partitions lost: a restart rejoins) or 4 (fenced: another
        daemon has taken over).
        """
        timeout = self.settings.kafka.poll_timeout_ms
        if self.watchdog is None:
            self.watchdog = Watchdog(self.settings.kafka.stall_seconds)
        self.poll_guard = self.watchdog
        lag_reported = 0.0
        try:
            while not self.stopping:
                self.step(timeout)
                if self.fatal is not None:
                    return self._end(*self.fatal)
                if self._newly_assigned:
                    self.report_assignments()
                self.follow_changelog()
                if time.monotonic() - lag_reported >= LAG_REPORT_SECONDS:
                    self.report_lag()
                    lag_reported = time.monotonic()
                if self.checkpoint_due():
                    self.checkpoint("interval")
                if self._rebalance_stalled():
                    return STALLED_EXIT_CODE
            # Finish: a join in flight completes first (the final commit would carry the
            # generation the broker is leaving: refused, exit 4, the work since the last
            # commit redone by the next owner), stepping on as the loop does, within the
            # patience of an interval commit counted from the stop; then the batch in flight
            # is applied; commit it, close.
            joined_by = time.monotonic() + self.join_patience()
            while ((self.pending or self.in_flight) and self.join_holds_commits()
                   and time.monotonic() < joined_by):
                self.step(timeout)
                if self.fatal is not None:
                    return self._end(*self.fatal)
            self.drain()
            if self.pending:
                self.checkpoint("shutdown")
        except FencedError as error:
            self.failed = True
            return self._end(FENCED_EXIT_CODE, f"fenced, stopping without writing: {error}")
        except ChangelogError as error:
            self.failed = True
            return self._end(CHANGELOG_EXIT_CODE, f"cannot read the state: {error}")
        except BaseException:
            # A record may be half applied, or outputs undelivered: closing the consumer must
            # not commit this state on revocation.
            self.failed = True
            raise
        finally:
            self.close()
        log.info("stopped", extra={"event": "stopped"})
        return 0

    def _end(self, code: int, why: str) -> int:
        log.error("%s (exit code %d)", why, code, extra={"event": "exiting", "code": code})
        return code


# ---------------------------------------------------------------------- entry point


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default="config.toml", help="settings file (default: config.toml)"
    )


def transactional_id(settings: Settings) -> str:
    """``kafka.transactional_id``, or one derived from the group and the member: stable across
    restarts with a static ``group_instance_id`` (a restart then fences its predecessor and
    aborts its open transaction at once), else unique to this process (a dead process's open
    transaction is aborted by the broker after ``transaction_timeout_ms``)."""
    kafka = settings.kafka
    if kafka.transactional_id:
        return kafka.transactional_id
    if kafka.group_instance_id:
        return f"{kafka.group_id}-{kafka.group_instance_id}"
    return f"{kafka.group_id}-{kafka.client_id}-{socket.gethostname()}-{os.getpid()}"


def build_daemon(settings: Settings, metrics: Any = None, io_factory: Callable | None = None,
                 config_path: str | os.PathLike | None = None):
    """The daemon with the real model, featurizer, metrics and Kafka, from ``settings``; the
    start-up checks (:mod:`streamnb.daemon.startup`) run before anything is consumed. With
    ``[http] port`` its front door serves once the state is read: ``http.scorers`` processes
    started with ``config_path`` (the file ``settings`` came from), or without one (or with
    ``scorers = 0``) a thread of the daemon."""
    from streamnb.models import make_model
    from streamnb.models.presets import resolve
    from streamnb.pipeline import build_pipeline

    table = settings.model.table()
    kind, options = resolve(table)  # the preset's options with [model.options] on top
    pipeline = build_pipeline(table, settings.features)
    watchdog = Watchdog(settings.kafka.stall_seconds)
    if metrics is None:
        from streamnb.metrics import Metrics

        metrics = Metrics(
            window=settings.metrics.window, positive_class=settings.metrics.positive_class
        )
        metrics.set_build_info(__version__, kind)
        startup.serve_metrics(metrics, settings.metrics)
    listener = startup.bind_http(settings.http)
    if io_factory is None:
        from streamnb.daemon.changelog import changelog_topic
        from streamnb.daemon.kafka_io import KafkaIO, ensure_changelogs

        limits = startup.check_kafka(settings)
        changelogs = {topic: changelog_topic(settings.kafka.group_id, topic)
                      for topic in settings.kafka.input_topics}
        ensure_changelogs(settings.kafka, changelogs)
        limits.update(startup.topic_limits(settings, changelogs.values()))

        def io_factory(on_assigned, on_revoked):
            return KafkaIO(settings.kafka, on_assigned, on_revoked, changelogs,
                           transactional_id(settings), watchdog, limits)

    preparer = None
    if settings.pipeline.prepare_process:
        from streamnb.daemon.prepare import ProcessPreparer

        preparer = ProcessPreparer(
            build_pipeline,
            (table, dict(settings.features)),
            settings.limits.max_value_bytes,
            timeout=settings.kafka.stall_seconds,
            processes=settings.pipeline.prepare_processes,
        )
    try:
        daemon = Daemon(
            settings,
            pipeline,
            new_model=lambda: make_model(kind, **options),
            metrics=metrics,
            io_factory=io_factory,
            preparer=preparer,
            watchdog=watchdog,
        )
    except BaseException:
        if preparer is not None:
            preparer.close()
        if listener is not None:
            listener.close()
        raise
    if listener is not None:
        try:
            daemon.front_door = startup.serve_checks(daemon, settings, listener, metrics,
                                                     config_path)
        except BaseException:
            daemon.close()
            raise
    return daemon


#: The cyclic collector's youngest generation is collected after this many more container
#: objects were made than freed (Python's default is 700). A mail makes thousands of them
#: (its token Counter, the batch's lists, the feedback entry), most freed when its batch is
#: done; at 700 the collector walked each batch's live mails dozens of times: 54-56 young
#: collections and 5 older ones, 12-14 us a SpamAssassin mail, against 1 collection and
#: 1.5 us at 20,000 (docs/performance.md, "The loop's own overhead on mail"). Garbage in cycles
#: (rare: the daemon's records hold none) waits a little longer to be freed.
YOUNG_COLLECTION_THRESHOLD = 20_000


def freeze_start_up_heap() -> None:
    """Collect, then move every object alive now to the cyclic collector's permanent
    generation, which its collections never walk: once the daemon is built, these are the
    modules, classes and the state read from the changelog, alive until the process ends.
    Then collect the youngest generation less often (``YOUNG_COLLECTION_THRESHOLD``).

    The full collections of a running daemon walk the whole heap, and the start-up objects
    were most of it: in 28,000 SMS three full collections took 154-220 ms (a seventh of the
    loop), 22-27 ms after a freeze. Objects frozen here and dropped later are still freed by
    their reference counts; only a cycle among them would stay, so it is done once, in a
    process that runs one daemon (``main``), not for each daemon a test builds."""
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_COLLECTION_THRESHOLD), *older)


def _processes_said(what: str, pids: Any) -> str:
    """How the start line names child processes: ", <what> pid 1", ", <what>es pids 1, 2"."""
    if not pids:
        return ""
    return (f", {what} pid {pids[0]}" if len(pids) == 1
            else f", {what}es pids {', '.join(map(str, pids))}")


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"streamnb: {error}", file=sys.stderr)
        return 2
    configure_logging(settings.logging.level, settings.logging.format)
    try:
        daemon = build_daemon(settings, config_path=args.config)
    except (ValueError, TypeError, ChangelogTopicError, startup.StartupError) as error:
        # ValueError/TypeError: an unknown model kind or option, or featurizer option.
        print(f"streamnb: {error}", file=sys.stderr)
        return 2
    except ChangelogError as error:
        # Corrupt state is never skipped: an operator must look at it.
        log.error("cannot read the state: %s", error, extra={"event": "changelog_error"})
        print(f"streamnb: {error}", file=sys.stderr)
        return CHANGELOG_EXIT_CODE
    except FencedError as error:
        log.error("fenced at start: %s", error, extra={"event": "exiting",
                                                        "code": FENCED_EXIT_CODE})
        return FENCED_EXIT_CODE
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    freeze_start_up_heap()
    prepare_pids = getattr(getattr(daemon, "preparer", None), "pids", ())  # prepare_process
    log.info(
        "streamnb %s running: %s -> %s (model %s, transactional id %s%s%s)",
        __version__,
        ",".join(settings.kafka.input_topics),
        settings.kafka.output_topic,
        settings.model.kind,
        getattr(daemon.io, "transactional_id", "?"),
        _processes_said("prepare process", prepare_pids),
        _processes_said("scorer process", getattr(daemon.front_door, "pids", None)),
        extra={"event": "started"},
    )
    try:
        return daemon.run()
    except Exception:
        # Nothing half-done was committed (see Daemon.failed): a restart resumes from the
        # last commit. Exit non-zero so a supervisor restarts us.
        log.exception("stopping on an unexpected error", extra={"event": "failed"})
        return 1
