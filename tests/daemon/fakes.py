"""In-memory stand-ins for Kafka, the model, the featurizer and the metrics, for loop tests.

The fake model is a tiny multinomial Naive Bayes over exact integer counts, so "the same
state" can be checked with ``==``; the fake Kafka keeps topics as lists per partition and
follows the consumer's contract (positions, seeks, rebalance callbacks before fetching).
"""

from __future__ import annotations

import math
import zlib
from collections import Counter, defaultdict
from dataclasses import replace

from streamnb.codec import Message
from streamnb.config import (
    CheckpointSettings,
    FeedbackSettings,
    KafkaSettings,
    MetricsSettings,
    ModelSettings,
    PipelineSettings,
    Settings,
)
from streamnb.daemon import Daemon
from streamnb.daemon.kafka_io import KAFKA_DEFAULT_MAX_MESSAGE_BYTES, Record, record_size
from streamnb.pipeline import Prepared


class CountModel:
    """Multinomial NB with Laplace smoothing over exact integer counts, with the keyed
    statistics of :mod:`streamnb.models._keyed` (keys ``("token", t)`` and ``("totals",)``)."""

    numeric_input = False

    def __init__(self):
        self.docs: Counter[str] = Counter()
        self.tokens: dict[str, Counter[str]] = defaultdict(Counter)
        self.changed: set | None = None

    @property
    def n_updates(self):
        return sum(self.docs.values())

    @property
    def classes(self):
        return sorted(c for c, n in self.docs.items() if n > 0)

    @property
    def vocabulary_size(self):
        return len({t for c in self.tokens.values() for t, n in c.items() if n})

    def state_nbytes(self):
        return 8 * sum(len(c) for c in self.tokens.values())

    def _note(self, x):
        if self.changed is not None:
            self.changed.update(("token", t) for t in x)
            self.changed.add(("totals",))

    def learn_one(self, x, y):
        self.docs[y] += 1
        self.tokens[y].update(x)
        self._note(x)

    def unlearn_one(self, x, y):
        self.docs[y] -= 1
        self.tokens[y].subtract(x)
        self._note(x)

    def predict_log_proba_one(self, x):
        classes = self.classes
        if not classes:
            return {}
        vocab = self.vocabulary_size or 1
        total = sum(self.docs[c] for c in classes)
        logp = {}
        for c in classes:
            size = sum(self.tokens[c].values())
            score = math.log(self.docs[c] / total)
            for t, n in x.items():
                score += n * math.log((self.tokens[c][t] + 1) / (size + vocab))
            logp[c] = score
        top = max(logp.values())
        log_z = top + math.log(sum(math.exp(v - top) for v in logp.values()))
        return {c: v - log_z for c, v in logp.items()}

    def predict_proba_one(self, x):
        return {c: math.exp(lp) for c, lp in self.predict_log_proba_one(x).items()}

    def __iadd__(self, other):
        self.docs.update(other.docs)
        for c, counts in other.tokens.items():
            self.tokens[c].update(counts)
        return self

    # the keyed statistics
    def mark_changes(self):
        self.changed = set()

    def changed_keys(self):
        return list(self.changed)

    def stat_keys(self):
        keys = [("token", t) for t in sorted({t for c in self.tokens.values()
                                              for t, n in c.items() if n})]
        return keys + ([("totals",)] if any(self.docs.values()) else [])

    def stat_value(self, key):
        if key == ("totals",):
            docs = {c: float(n) for c, n in sorted(self.docs.items()) if n}
            totals = {c: float(sum(t.values())) for c, t in sorted(self.tokens.items())
                      if sum(t.values())}
            return {"n_docs": docs, "totals": totals} if docs or totals else None
        counts = {c: float(t[key[1]]) for c, t in sorted(self.tokens.items()) if t[key[1]]}
        return counts or None

    def set_stat_values(self, values):
        for key, value in values.items():
            if key == ("totals",):
                self.docs = Counter({c: int(n) for c, n in (value or {}).get("n_docs", {}
                                                                             ).items()})
                continue
            if not (isinstance(key, tuple) and key[0] == "token"):
                raise ValueError(f"unknown key {key!r}")
            for counts in self.tokens.values():
                counts.pop(key[1], None)
            for c, n in (value or {}).items():
                if not isinstance(n, int | float):
                    raise ValueError(f"bad count {n!r}")
                self.tokens[c][key[1]] = int(n)
            if self.changed is not None:
                self.changed.add(key)

    def to_state(self):
        return {
            "kind": "count",
            "docs": {c: n for c, n in self.docs.items() if n},
            "tokens": {
                c: {t: n for t, n in counts.items() if n}
                for c, counts in self.tokens.items()
                if any(counts.values())
            },
            "n_updates": self.n_updates,
        }

    @classmethod
    def from_state(cls, state):
        model = cls()
        model.docs.update(state["docs"])
        for c, counts in state["tokens"].items():
            model.tokens[c].update(counts)
        return model


class WordPipeline:
    """Whitespace tokens of ``text``; the word ``CRASH`` makes the featurizer fail, a word
    ``CUT:<limit>`` reports that limit as hit, ``DEFECT:<name>`` a reader defect."""

    def prepare(self, message: Message) -> Prepared:
        if message.text is None:
            from streamnb.pipeline import PipelineError

            raise PipelineError("wrong_body", "only text in these tests")
        if "CRASH" in message.text:
            error = ValueError("featurizer cannot read this")
            error.reason = "parse_error"
            raise error
        words = message.text.split()
        truncated = tuple(w[4:] for w in words if w.startswith("CUT:"))
        defects = tuple(w[7:] for w in words if w.startswith("DEFECT:"))
        return Prepared(dict(Counter(words)), truncated, defects)


class RecordingMetrics:
    """Records every call of the metrics API; state is the list of outcomes so far."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.loaded = None

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, *args))

        return record

    def observe_labelled_many(self, observations):
        """Recorded as the ``observe_labelled`` calls it stands for, in order (the real
        metrics fold them at the same points)."""
        self.calls.extend(("observe_labelled", *observation) for observation in observations)

    def names(self, name):
        return [c[1:] for c in self.calls if c[0] == name]

    def to_state(self):
        return {"n_calls": len(self.calls)}

    def load_state(self, state):
        self.loaded = state


class FakeKafka:
    """Topics as partition lists, the group's committed offsets, rebalances on demand.

    Records written in a transaction are appended when it commits (a read_committed view):
    an aborted or unfinished transaction leaves nothing.

    ``marker_lag``: as on a real broker, a commit returns before the markers that make its
    records visible to read_committed readers are written: its records are past each written
    partition's read_committed end (``stable_end``) for that many queries of that end, each
    query being time that passes. Its offsets are committed at once (the worst order: the
    group's offsets are stable before the changelog's records are visible).
    """

    def __init__(self, partitions: dict[str, int], marker_lag: int = 0):
        self.topics = {t: [[] for _ in range(n)] for t, n in partitions.items()}
        self.committed: dict[tuple[str, int], int] = {}
        self.clock = 1_000_000
        self.epochs: dict[str, int] = {}  # transactional id -> producer epoch
        self.marker_lag = marker_lag
        # partition -> [its read_committed end, queries of it until the markers are written]
        self.unresolved: dict[tuple[str, int], list[int]] = {}

    def committing(self, tp: tuple[str, int]) -> None:
        """A commit is about to append records to ``tp``: they stay unresolved for
        ``marker_lag`` queries of its read_committed end."""
        if self.marker_lag:
            pending = self.unresolved.setdefault(tp, [len(self.topics[tp[0]][tp[1]]), 0])
            pending[1] = self.marker_lag

    def stable_end(self, tp: tuple[str, int], query: bool = True) -> int:
        """The read_committed end of ``tp``; ``query``: a ListOffsets, which lets time pass
        (a fetch does not)."""
        pending = self.unresolved.get(tp)
        if pending is None:
            return len(self.topics[tp[0]][tp[1]])
        end = pending[0]
        if query:
            pending[1] -= 1
            if pending[1] <= 0:
                del self.unresolved[tp]
        return end

    def write_markers(self) -> None:
        """Every committed transaction's records become visible now."""
        self.unresolved.clear()

    def append(self, topic, value, key=None, partition=None, headers=()):
        parts = self.topics.setdefault(topic, [[]])
        if partition is None:
            partition = zlib.crc32(key) % len(parts) if key is not None else 0
        self.clock += 1
        record = Record(topic, partition, len(parts[partition]), key, value, tuple(headers),
                        self.clock)
        parts[partition].append(record)
        return record

    def all(self, topic):
        return [r for part in self.topics.get(topic, []) for r in part]


class FakeIO:
    """The surface of :class:`streamnb.daemon.kafka_io.KafkaIO` over a :class:`FakeKafka`."""

    def __init__(self, kafka: FakeKafka, settings, on_assigned, on_revoked, batch=7,
                 transactional_id="fake", max_record_bytes=KAFKA_DEFAULT_MAX_MESSAGE_BYTES):
        from streamnb.daemon.changelog import changelog_topic

        self.kafka = kafka
        self.max_record_bytes = max_record_bytes  # every topic's max.message.bytes
        self.topics = settings.input_topics
        self.start_offset = settings.start_offset
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.batch = batch
        self.changelogs = {t: changelog_topic(settings.group_id, t) for t in self.topics}
        for t in self.topics:
            kafka.topics.setdefault(self.changelogs[t], [[] for _ in kafka.topics[t]])
        self.transactional_id = transactional_id
        kafka.epochs[transactional_id] = self.epoch = kafka.epochs.get(transactional_id, 0) + 1
        self.positions: dict[tuple[str, int], int | None] = {}
        self.tail: dict[tuple[str, int], int] = {}
        self.outbox: list[tuple] = []  # sent in the open transaction
        self.commits = 0
        self.assigned: list[tuple[str, int]] = []
        self.closed = False
        self.subscribed = False
        self.settled: list[list[tuple[str, int]]] = []  # settle_offsets calls
        # The generation of the group membership the fake reports stable (None: joining);
        # tests of a join that calls no listener set it.
        self.generation_joined: int | None = None
        # A join sent and not yet answered (KafkaIO.joining): commits wait for it.
        self.join_in_flight = False
        self.transaction_seconds = 0.0  # the open transaction's age (KafkaIO.transaction_age)
        self.pending_assignment = [(t, p) for t in self.topics
                                   for p in range(len(kafka.topics[t]))]

    def subscribe(self):
        self.subscribed = True

    def input_partitions(self):
        return [(t, p) for t in self.topics for p in range(len(self.kafka.topics[t]))]

    def rebalance(self, new_assignment):
        """Revoke everything and assign ``new_assignment`` at the next poll (eager protocol)."""
        self.pending_assignment = list(new_assignment)

    def poll(self, timeout_ms):
        assert self.subscribed, "polled before joining the group"
        if self.pending_assignment is not None:
            if self.assigned:
                self.on_revoked(list(self.assigned), False)
            self.assigned = self.pending_assignment
            self.pending_assignment = None
            self.on_assigned(list(self.assigned))
            self.positions = {}
            for tp in self.assigned:  # the consumer resumes at the committed offsets
                start = 0 if self.start_offset == "earliest" else len(self.part(tp))
                self.positions[tp] = self.kafka.committed.get(tp, start)
        out = []
        for tp in self.assigned:
            part = self.part(tp)
            pos = self.positions[tp]
            take = part[pos : pos + self.batch]
            self.positions[tp] = pos + len(take)
            out.extend(take)
        return out

    def part(self, tp):
        return self.kafka.topics[tp[0]][tp[1]]

    def seek(self, tp, offset):
        self.positions[tp] = offset

    def highwater(self, tp):
        return len(self.part(tp))

    def stable_generation(self):
        return self.generation_joined

    def joining(self):
        return self.join_in_flight

    def transaction_age(self):
        return self.transaction_seconds

    def committed(self, tp):
        return self.kafka.committed.get(tp)

    def settle_offsets(self, tps, timeout):
        # the fake's offsets are stable as soon as they are committed
        self.settled.append(list(tps))
        return True

    def room(self, topic, key, headers=None):
        return self.max_record_bytes - record_size(key, b"", headers) - 5

    def send(self, topic, key, value, headers=None, partition=None):
        size = record_size(key, value, headers)
        assert size <= self.max_record_bytes, f"a {size}-byte record would poison the producer"
        self.outbox.append((topic, key, value, tuple(headers or ()), partition))

    def send_many(self, topic, records, partition=None):
        for record in records:
            self.send(topic, *record, partition=partition)

    def commit(self, offsets):
        from streamnb.daemon.errors import FencedError

        if self.kafka.epochs[self.transactional_id] != self.epoch:
            self.outbox.clear()
            raise FencedError(f"a newer producer has transactional id {self.transactional_id}")
        for topic, _, _, _, partition in self.outbox:
            self.kafka.committing((topic, 0 if partition is None else partition))
        for topic, key, value, headers, partition in self.outbox:
            self.kafka.append(topic, value, key=key,
                              partition=0 if partition is None else partition, headers=headers)
        self.outbox.clear()
        self.kafka.committed.update(offsets)
        self.commits += 1

    def abort(self):
        self.outbox.clear()

    def changelog_of(self, tp):
        return (self.changelogs[tp[0]], tp[1])

    def tail_assign(self, tps):
        for tp, offset in tps.items():
            self.tail[tp] = 0 if offset is None else offset

    def tail_unassign(self, tps):
        for tp in tps:
            self.tail.pop(tp, None)

    def tail_assignment(self):
        return sorted(self.tail)

    def tail_poll(self, timeout_ms):
        out = []
        for tp, pos in self.tail.items():
            end = min(pos + self.batch, self.kafka.stable_end(tp, query=False))
            take = self.part(tp)[pos:end]
            self.tail[tp] = pos + len(take)
            out.extend(take)
        return out

    def tail_positions(self, tps):
        return {tp: self.tail[tp] for tp in tps}

    def tail_ends(self, tps):
        return {tp: self.kafka.stable_end(tp) for tp in tps}

    def tail_highwaters(self, tps):
        return {tp: len(self.part(tp)) for tp in tps}

    def tail_lag(self):
        return sum(self.kafka.stable_end(tp, query=False) - pos for tp, pos in self.tail.items())

    def close(self, timeout=5.0):
        self.closed = True

    def caught_up(self):
        return all(self.positions.get(tp) == len(self.part(tp)) for tp in self.assigned)


def settings_for(tmp_path=None, **overrides) -> Settings:
    kafka = KafkaSettings(input_topics=("in",), output_topic="out", dead_letter_topic="dlq")
    base = Settings(
        kafka=kafka,
        model=ModelSettings(kind="count", labels=("ham", "spam")),
        checkpoint=CheckpointSettings(every_messages=10, every_seconds=3600.0),
        feedback=FeedbackSettings(max_ids=1000),
        metrics=MetricsSettings(port=0),
        # build_daemon over these settings prepares in-process unless a test asks otherwise
        pipeline=PipelineSettings(prepare_process=False),
    )
    return replace(base, **overrides)


def make_daemon(settings, kafka: FakeKafka, metrics=None, batch=7, transactional_id="fake",
                max_record_bytes=KAFKA_DEFAULT_MAX_MESSAGE_BYTES, **kwargs) -> Daemon:
    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=batch,
                      transactional_id=transactional_id, max_record_bytes=max_record_bytes)

    return Daemon(
        settings,
        WordPipeline(),
        new_model=CountModel,
        metrics=metrics or RecordingMetrics(),
        io_factory=io_factory,
        **kwargs,
    )


def drain(daemon: Daemon, max_polls=10_000, checkpoint_every_poll=False):
    """Run the loop body until the fake consumer has read everything assigned."""
    for _ in range(max_polls):
        records = daemon.io.poll(0)
        if records:
            daemon.process(records)
        daemon.report_assignments()
        daemon.follow_changelog()
        if daemon.checkpoint_due() or (checkpoint_every_poll and daemon.pending):
            daemon.checkpoint("interval")
        if daemon.io.caught_up() and not records:
            return
    raise AssertionError("fake consumer never caught up")


def total_state(daemon: Daemon):
    """The sum of every slice (owned and remote), as a comparable state."""
    total = CountModel()
    for part in daemon.parts.slices.values():
        total += part.model
    state = total.to_state()
    state.pop("n_updates")
    return state


def changelog_state(kafka: FakeKafka, topic="in", group="streamnb"):
    """The sum of the slices the changelog alone holds (as a new daemon would read them)."""
    from streamnb.daemon.changelog import apply_records, changelog_topic
    from streamnb.daemon.feedback import FeedbackStore

    total = CountModel()
    for p, records in enumerate(kafka.topics[changelog_topic(group, topic)]):
        part = CountModel()
        apply_records(part, FeedbackStore(), f"{topic}:{p}", [(r.key, r.value) for r in records])
        total += part
    state = total.to_state()
    state.pop("n_updates")
    return state
