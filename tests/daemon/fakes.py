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
    """Multinomial NB with Laplace smoothing over exact integer counts."""

    numeric_input = False

    def __init__(self):
        self.docs: Counter[str] = Counter()
        self.tokens: dict[str, Counter[str]] = defaultdict(Counter)
        self.n_updates = 0

    @property
    def classes(self):
        return sorted(c for c, n in self.docs.items() if n > 0)

    @property
    def vocabulary_size(self):
        return len({t for c in self.tokens.values() for t, n in c.items() if n})

    def state_nbytes(self):
        return 8 * sum(len(c) for c in self.tokens.values())

    def learn_one(self, x, y):
        self.docs[y] += 1
        self.tokens[y].update(x)
        self.n_updates += 1

    def unlearn_one(self, x, y):
        self.docs[y] -= 1
        self.tokens[y].subtract(x)
        self.n_updates += 1

    def predict_proba_one(self, x):
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
        z = sum(math.exp(v - top) for v in logp.values())
        return {c: math.exp(v - top) / z for c, v in logp.items()}

    def __iadd__(self, other):
        self.docs.update(other.docs)
        for c, counts in other.tokens.items():
            self.tokens[c].update(counts)
        self.n_updates += other.n_updates
        return self

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
        model.n_updates = state["n_updates"]
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

    def names(self, name):
        return [c[1:] for c in self.calls if c[0] == name]

    def to_state(self):
        return {"n_calls": len(self.calls)}

    def load_state(self, state):
        self.loaded = state


class FakeKafka:
    """Topics as partition lists, one consumer (the daemon), rebalances on demand."""

    def __init__(self, partitions: dict[str, int]):
        self.topics = {t: [[] for _ in range(n)] for t, n in partitions.items()}
        self.clock = 1_000_000

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

    def __init__(self, kafka: FakeKafka, topics, on_assigned, on_revoked, batch=7,
                 max_record_bytes=KAFKA_DEFAULT_MAX_MESSAGE_BYTES):
        self.kafka = kafka
        self.max_record_bytes = max_record_bytes  # every output topic's max.message.bytes
        self.topics = topics
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.batch = batch
        self.positions: dict[tuple[str, int], int | None] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.outbox: list[tuple] = []  # sent but not yet flushed
        self.assigned: list[tuple[str, int]] = []
        self.closed = False
        self.pending_assignment = [(t, p) for t in topics for p in range(len(kafka.topics[t]))]

    def rebalance(self, new_assignment):
        """Revoke everything and assign ``new_assignment`` at the next poll (eager protocol)."""
        self.pending_assignment = list(new_assignment)

    def poll(self, timeout_ms):
        if self.pending_assignment is not None:
            if self.assigned:
                self.on_revoked(list(self.assigned), False)
            self.assigned = self.pending_assignment
            self.pending_assignment = None
            self.positions = {tp: None for tp in self.assigned}
            self.on_assigned(list(self.assigned))
            assert all(p is not None for p in self.positions.values()), "assignment not seeked"
        out = []
        for tp in self.assigned:
            part = self.kafka.topics[tp[0]][tp[1]]
            pos = self.positions[tp]
            take = part[pos : pos + self.batch]
            self.positions[tp] = pos + len(take)
            out.extend(take)
        return out

    def seek(self, tp, offset):
        self.positions[tp] = offset

    def seek_to_beginning(self, tp):
        self.positions[tp] = 0

    def seek_to_end(self, tp):
        self.positions[tp] = len(self.kafka.topics[tp[0]][tp[1]])

    def highwater(self, tp):
        return len(self.kafka.topics[tp[0]][tp[1]])

    def commit(self, offsets, wait=True):
        self.committed.update(offsets)
        return True

    def room(self, topic, key, headers=None):
        return self.max_record_bytes - record_size(key, b"", headers) - 5

    def send(self, topic, key, value, headers=None):
        size = record_size(key, value, headers)
        assert size <= self.max_record_bytes, f"a {size}-byte record would poison the producer"
        self.outbox.append((topic, key, value, tuple(headers or ())))

    def flush(self, timeout=30.0):
        for topic, key, value, headers in self.outbox:
            self.kafka.append(topic, value, key=key, partition=0, headers=headers)
        self.outbox.clear()

    def close(self, timeout=5.0):
        self.closed = True

    def caught_up(self):
        return all(
            self.positions.get(tp) == len(self.kafka.topics[tp[0]][tp[1]]) for tp in self.assigned
        )


def settings_for(tmp_path, **overrides) -> Settings:
    kafka = KafkaSettings(input_topics=("in",), output_topic="out", dead_letter_topic="dlq")
    base = Settings(
        kafka=kafka,
        model=ModelSettings(kind="count", labels=("ham", "spam")),
        checkpoint=CheckpointSettings(path=tmp_path / "ckpt.json", every_messages=10,
                                      every_seconds=3600.0),
        feedback=FeedbackSettings(max_ids=1000),
        metrics=MetricsSettings(port=0),
        # build_daemon over these settings prepares in-process unless a test asks otherwise
        pipeline=PipelineSettings(prepare_process=False),
    )
    return replace(base, **overrides)


def make_daemon(settings, kafka: FakeKafka, metrics=None, batch=7,
                max_record_bytes=KAFKA_DEFAULT_MAX_MESSAGE_BYTES) -> Daemon:
    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka.input_topics, on_assigned, on_revoked, batch=batch,
                      max_record_bytes=max_record_bytes)

    return Daemon(
        settings,
        WordPipeline(),
        new_model=CountModel,
        load_model=CountModel.from_state,
        metrics=metrics or RecordingMetrics(),
        io_factory=io_factory,
    )


def drain(daemon: Daemon, max_polls=10_000, checkpoint_every_poll=False):
    """Run the loop body until the fake consumer has read everything assigned."""
    for _ in range(max_polls):
        records = daemon.io.poll(0)
        if records:
            daemon.process(records)
        if daemon.checkpoint_due() or (checkpoint_every_poll and daemon.pending):
            daemon.checkpoint("interval")
        if daemon.io.caught_up() and not records:
            return
    raise AssertionError("fake consumer never caught up")


def total_state(daemon: Daemon):
    """The sum of every slice (assigned and parked), as a comparable state."""
    total = CountModel()
    for model in [*daemon.slices.values(), *daemon.parked.values()]:
        total += model
    state = total.to_state()
    state.pop("n_updates")
    return state
