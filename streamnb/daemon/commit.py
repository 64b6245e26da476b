"""The commit protocol: one Kafka transaction per commit, numbered once in
:meth:`Committer.checkpoint` and mirrored by its ``# Step N`` comments (as Quix Streams'
``checkpoint.py``).
"""

from __future__ import annotations

import logging
import time

import orjson

from streamnb.daemon.changelog import (
    FORMAT_VERSION,
    changed_feedback_records,
    changed_model_records,
    no_cyclic_gc,
    slice_record,
)
from streamnb.daemon.partitions import slice_key, tp_of

__all__ = ["COMMIT_SPACING", "Committer", "MAX_STRETCH"]

log = logging.getLogger("streamnb.daemon")

#: The time between commits is at least this many times the last commit's duration, so
#: commits take at most about 1/(1 + COMMIT_SPACING) of the loop's time. A commit's cost
#: grew with the vocabulary its token buckets rewrote (the layout before token pages), not
#: with the messages it covered, so a daemon that committed on the clock alone got slower as
#: it fell behind: SpamAssassin at 424 msg/s committed every 424 mails, 1.1 ms of commit a
#: mail. An expiring commit is still the slow one.
COMMIT_SPACING = 4
#: The stretched interval is at most this many times ``checkpoint.every_seconds`` (a single
#: slow commit, an expiry say, does not hold predictions back for long).
MAX_STRETCH = 10


class Committer:
    """The commit half of the daemon (a mixin of :class:`~streamnb.daemon.loop.Daemon`)."""

    #: How long the last commit took, in seconds (it spaces the next: :meth:`checkpoint_due`).
    last_commit_seconds: float = 0.0

    def checkpoint(self, why: str) -> None:
        """Commit what the records since the last commit did, as one Kafka transaction.

        1. The caller has applied whole records only: the slices, the feedback stores and
           ``offsets`` all describe exactly the records before each partition's next offset.
           Their predictions and dead letters were sent into the open transaction as they
           were made.
        2. For each owned slice, the record of every feedback run an entry joined, left or
           was relabelled in, then of every key changed since the last commit (its full
           current value, or a tombstone; the changed tokens' values packed in new pages,
           then the tombstones of the pages they leave less than half live) goes to the
           slice's changelog partition, in the transaction
           (with, the first time after taking the slice over, the record of what its counts
           are: model kind and counting options). With ``model.max_tokens``, a slice over
           the budget first expires tokens (``Partitions.expire``): their tombstones are
           among its changed keys, so the expiry is committed with the rest or not at all.
        3. The next input offset of every owned partition goes into the transaction with the
           group's metadata (``send_offsets_to_transaction``): a member of an older
           generation of the group is fenced here.
        4. Commit the transaction (bounded by the watchdog). This is the commit point: the
           outputs, the state and the offsets are committed together; a crash before it
           leaves none of them (the broker aborts the transaction, or the next producer with
           the same transactional id does). ``read_committed`` readers see them once the
           broker has written the markers, a moment after this returns: a partition's next
           owner waits for that (``Daemon._settled_ends``).
        5. Mark every owned slice unchanged: what it holds is now what its changelog holds.
        6. Record the commit's duration and size in the metrics, and log it.

        A failure in steps 2-4 ends the daemon (a fenced one with code 4, having written
        nothing): its in-memory state is ahead of Kafka, and only a restart, which reads the
        committed state, is exact.
        """
        if self.failed:
            raise RuntimeError("refusing to commit: a record was only partly applied")
        with self.lock:
            started = time.perf_counter()
            # Step 1: nothing to do here; process() applies records whole, under the lock.
            owned = self.parts.owned
            identified: list = []
            try:
                # Step 2 (with the cyclic collector off: see changelog.no_cyclic_gc)
                with no_cyclic_gc():
                    n_records, size, expired = self._send_changes(owned, identified)
                # Step 3 and Step 4 (KafkaIO.commit: send_offsets_to_transaction, then
                # commit_transaction, each under the watchdog)
                offsets = {tp_of(k): self.offsets[k] for k in owned if k in self.offsets}
                self.io.commit(offsets)
            except BaseException:
                self.failed = True
                raise
            # Step 5
            for part in owned.values():
                part.model.mark_changes()
                part.store.mark_changes()
            for part in identified:
                part.identified = True
            self.checkpoints_written += 1
            applied, self.pending = self.pending, 0
            self.last_checkpoint = time.monotonic()
        # Step 6
        duration = self.last_commit_seconds = time.perf_counter() - started
        self.metrics.checkpoint_done(duration, size)
        self.metrics.set_model_size(
            getattr(self.live, "vocabulary_size", 0), self.live.state_nbytes()
        )
        log.info(
            "commit (%s): %d record(s) since the last, %d changelog record(s) of %d slice(s), "
            "%d bytes, %d token(s) expired, %.3f s",
            why,
            applied,
            n_records,
            len(owned),
            size,
            expired,
            duration,
            extra={
                "event": "checkpoint",
                "why": why,
                "records": applied,
                "changelog_records": n_records,
                "bytes": size,
                "expired_tokens": expired,
                "seconds": round(duration, 4),
                "offsets": {slice_key(tp): off for tp, off in offsets.items()},
            },
        )

    def _send_changes(self, owned: dict, identified: list) -> tuple[int, int, int]:
        """Step 2: each owned slice's changed records into the transaction. Returns the
        records sent, their bytes and the tokens expired; ``identified`` gets the slices
        whose identity record went with them."""
        size = n_records = expired = 0
        for key, part in owned.items():
            topic, partition = self.io.changelog_of(tp_of(key))
            # The feedback store's records go first (the order of changed_records): on mail
            # they are most of the commit's bytes, made in a few milliseconds, and the
            # producer's network thread flushes them to the broker while the expiry and the
            # model's pages are made, instead of after, in commit_transaction.
            feedback = changed_feedback_records(part.store)
            size += self._send_records(topic, partition, feedback)
            if self.max_tokens:  # token expiry: its tombstones join this commit
                expired += self.parts.expire(key, self.max_tokens,
                                             self.settings.model.expiry_keep())
            records = changed_model_records(part.model, self._page_room(topic))
            if (feedback or records) and not part.identified:
                records.append(slice_record(part.model))
                identified.append(part)
            size += self._send_records(topic, partition, records)
            n_records += len(feedback) + len(records)
        return n_records, size, expired

    def _send_records(self, topic: str, partition: int, records: list) -> int:
        """Send ``records`` (key, value or None) to one changelog partition, in the open
        transaction, with one ``send_many``; returns their bytes."""
        self.io.send_many(topic, records, partition=partition)
        return sum(len(record_key) + (len(value) if value is not None else 0)
                   for record_key, value in records)

    def _page_room(self, topic: str) -> int:
        """The value bytes a token page may carry to changelog ``topic`` (with the key of a
        page numbered as high as any will be)."""
        return self.io.room(topic, orjson.dumps([FORMAT_VERSION, "page", 2**63]))

    def checkpoint_due(self) -> bool:
        """Whether to commit now: ``checkpoint.every_messages`` records are pending, or
        ``checkpoint.every_seconds`` have passed since the last commit ended, stretched to
        ``COMMIT_SPACING`` times that commit's duration (at most ``MAX_STRETCH`` times
        ``every_seconds``) when commits are slow.

        Not while a join of the group is in flight (``KafkaIO.joining`` says why): the
        commit waits for the poll that completes the join, as Kafka Streams holds its commits
        during a rebalance, but at most until the transaction is half
        ``kafka.transaction_timeout_ms`` old (a join the broker holds open for a slow or dead
        member), after which the broker would abort it."""
        if not self.pending:
            return False
        cadence = self.settings.checkpoint
        if self.pending >= cadence.every_messages:
            due = True
        else:
            interval = max(cadence.every_seconds,
                           min(COMMIT_SPACING * self.last_commit_seconds,
                               MAX_STRETCH * cadence.every_seconds))
            due = time.monotonic() - self.last_checkpoint >= interval
        return due and not self.join_holds_commits()

    def join_holds_commits(self) -> bool:
        """Whether a join of the group in flight holds the commit back: while the JoinGroup
        is unanswered (``KafkaIO.joining`` says why), until the open transaction is
        :meth:`join_patience` seconds old."""
        return self.io.joining() and self.io.transaction_age() < self.join_patience()

    def join_patience(self) -> float:
        """Half ``kafka.transaction_timeout_ms``, in seconds: how long a commit waits for a
        join in flight, so that the broker does not abort the transaction meanwhile."""
        return self.settings.kafka.transaction_timeout_ms / 2000
