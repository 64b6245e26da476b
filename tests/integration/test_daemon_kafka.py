"""``python -m streamnb run`` against the real local broker (``scripts/kafka.sh start``)."""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections import Counter

import orjson
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from streamnb.codec import Message
from streamnb.daemon.kafka_io import create_topics, produce, read_all
from streamnb.pipeline import build_pipeline
from tests.integration.harness import (
    DaemonProcess,
    assigned_events,
    changelog_model,
    committed,
    feedback,
    sms,
    value,
    wait_caught_up,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def offline_model(final_labels: dict[str, str], texts: dict[str, str], kind="multinomial"):
    """The model trained offline, one message at a time, on each id's final label."""
    pipeline = build_pipeline({"kind": kind}, {})
    model = pipeline.model
    for msg_id in sorted(final_labels):
        x = pipeline.prepare(Message(id=msg_id, text=texts[msg_id])).x
        model.learn_one(x, final_labels[msg_id])
    return model


def assert_same_model(got, want):
    assert got is not None, "the changelog holds no model"
    assert got.n_updates == want.n_updates
    assert got.to_state() == want.to_state()


def start(tmp_path, kafka_bootstrap, topic_prefix, partitions=1, **config):
    create_topics(
        kafka_bootstrap,
        {f"{topic_prefix}-in": partitions, f"{topic_prefix}-out": 1, f"{topic_prefix}-dlq": 1},
    )
    path = write_config(tmp_path, kafka_bootstrap, topic_prefix, **config)
    return path


def pipeline_table(prepare_process: bool, processes: int = 1) -> str:
    return (f"[pipeline]\nprepare_process = {str(prepare_process).lower()}\n"
            f"prepare_processes = {processes}\n")


@pytest.mark.parametrize(("prepare_process", "processes"), [(False, 1), (True, 1), (True, 2)],
                         ids=["one-process", "prepare-process", "two-prepare-processes"])
def test_sms_end_to_end_one_prediction_per_unlabelled_id(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir, prepare_process, processes
):
    rows = sms(data_dir)
    assert len(rows) == 5574
    rng = random.Random(7)
    unlabelled = {msg_id for msg_id, _, _ in rows if rng.random() < 0.2}
    truth = {msg_id: label for msg_id, label, _ in rows}
    config = start(
        tmp_path, kafka_bootstrap, topic_prefix, partitions=2,
        extra=pipeline_table(prepare_process, processes),
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    produce(
        kafka_bootstrap,
        f"{topic_prefix}-in",
        (
            (msg_id.encode(), value(msg_id, text, None if msg_id in unlabelled else label))
            for msg_id, label, text in rows
        ),
    )
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    code, seconds = daemon.terminate()
    assert code == 0
    started = next(e for e in daemon.events() if e.get("event") == "started")
    named = re.search(r"prepare process(?:es)? pids? ([\d, ]+)\)", started["message"])
    assert (named is not None) == prepare_process, started
    if named:
        pids = named.group(1).split(", ")
        assert len(pids) == processes and all(map(str.isdigit, pids)), started

    predictions = read_all(
        kafka_bootstrap, f"{topic_prefix}-out", until=lambda r: len(r) >= len(unlabelled)
    )
    by_id = Counter(r.key.decode() for r in predictions)
    assert set(by_id) == unlabelled
    assert max(by_id.values()) == 1, "an unlabelled id got more than one prediction"
    correct = 0
    for record in predictions:
        prediction = orjson.loads(record.value)
        assert prediction["id"] == record.key.decode()
        # the classes the model had seen when it predicted (only "ham" at the very start)
        assert set(prediction["probabilities"]) <= {"ham", "spam"}
        assert abs(sum(prediction["probabilities"].values()) - 1) < 1e-9
        # and their exact log-probabilities, finite where a probability rounds to 0.0
        log_proba = prediction["log_probabilities"]
        assert all(isinstance(lp, float) and math.isfinite(lp) for lp in log_proba.values())
        assert prediction["probabilities"] == {c: math.exp(lp) for c, lp in log_proba.items()}
        assert prediction["topic"] == f"{topic_prefix}-in"
        correct += prediction["label"] == truth[prediction["id"]]
    accuracy = correct / len(unlabelled)
    assert accuracy >= 0.95, f"accuracy on the unlabelled messages {accuracy:.4f}"
    assert read_all(kafka_bootstrap, f"{topic_prefix}-dlq", until=lambda r: False, timeout=1) == []


class Feeder:
    """Produces ``records`` to ``topic`` from a thread of its own, in order, never past the
    count last given to :meth:`release`."""

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]):
        self.released = 0
        self.error: BaseException | None = None
        self._gate = threading.Condition()
        self._records = records
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic), daemon=True)
        self._thread.start()

    def release(self, count: int) -> None:
        with self._gate:
            self.released = max(self.released, min(count, len(self._records)))
            self._gate.notify_all()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the feeder did not finish"
        if self.error is not None:
            raise self.error

    def _gated(self):
        for n, record in enumerate(self._records):
            with self._gate:
                self._gate.wait_for(lambda n=n: n < self.released)
            yield record

    def _run(self, bootstrap: str, topic: str) -> None:
        try:
            produce(bootstrap, topic, self._gated())
        except BaseException as error:  # noqa: BLE001 - raised again in join
            self.error = error


def test_predictions_land_in_the_output_partition_of_their_key(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    """With a multi-partition output topic each prediction goes to the partition the Java
    client's (and kafka-python's) default partitioner gives its key: murmur2 of the id, modulo
    the partition count, so consumers partitioned by message id keep finding them."""
    rows = sms(data_dir)[:400]
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 1, f"{topic_prefix}-out": 5,
                                    f"{topic_prefix}-dlq": 1})
    daemon = DaemonProcess(write_config(tmp_path, kafka_bootstrap, topic_prefix),
                           tmp_path / "daemon.log")
    daemon.wait_assigned()
    # ids of every length around the hash's 4-byte words
    ids = [f"{msg_id}-{'x' * (n % 7)}" for n, (msg_id, _, _) in enumerate(rows)]
    produce(kafka_bootstrap, f"{topic_prefix}-in",
            ((i.encode(), value(i, text)) for i, (_, _, text) in zip(ids, rows, strict=True)))
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    assert daemon.terminate()[0] == 0

    predictions = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                           until=lambda r: len(r) >= len(ids))
    assert sorted(r.key.decode() for r in predictions) == sorted(ids)
    for record in predictions:
        assert record.partition == (kafka_python_murmur2(record.key) & 0x7FFFFFFF) % 5, record.key
    assert len({r.partition for r in predictions}) == 5


@pytest.mark.parametrize("prepare_process", [False, True], ids=["one-process", "prepare-process"])
def test_kill_9_at_three_random_moments_loses_and_doubles_nothing(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir, prepare_process
):
    rows = sms(data_dir)
    texts = {msg_id: text for msg_id, _, text in rows}
    rng = random.Random(11)
    stream, final = [], {}
    for msg_id, label, text in rows:
        if rng.random() < 0.8:
            stream.append((msg_id, value(msg_id, text, label)))
            final[msg_id] = label
        else:
            stream.append((msg_id, value(msg_id, text)))
        if rng.random() < 0.1 and final:  # a late label or a correction for an earlier id
            old = rng.choice(list(texts)[: len(final)])
            new = rng.choice(["ham", "spam"])
            stream.append((old, feedback(old, new)))
            final[old] = new
    config = start(
        tmp_path, kafka_bootstrap, topic_prefix, partitions=3, every_messages=150,
        every_seconds=0.3, extra=pipeline_table(prepare_process),
    )
    config.write_text(config.read_text().replace(
        "poll_timeout_ms = 100", "poll_timeout_ms = 100\nmax_poll_records = 100"))
    topic = f"{topic_prefix}-in"

    def progress():
        return sum(committed(kafka_bootstrap, topic_prefix).values())

    # Kill once the daemon has committed past a random point of the stream, then after a
    # random extra moment, so the kill lands anywhere between (or inside) commits (one every
    # 150 records). The input is released a round at a time, up to a little past the round's
    # point: however fast the daemon, each kill finds a part of the stream not yet produced,
    # and the last one leaves about a third of it for the daemon that restarts.
    kill_rng = random.Random()
    targets = sorted(kill_rng.uniform(0.05, 0.67) * len(stream) for _ in range(3))
    feeder = Feeder(kafka_bootstrap, topic, [(k.encode(), v) for k, v in stream])
    at_kill = []
    for round_, target in enumerate(targets):
        feeder.release(int(target) + 4 * 150)
        daemon = DaemonProcess(config, tmp_path / f"daemon-{round_}.log")
        daemon.wait_assigned()
        wait_for(lambda t=target: progress() >= t, 120, f"the commits to pass {target:.0f}",
                 every=0.1)
        time.sleep(kill_rng.uniform(0, 0.05))  # a random moment, not a condition to wait for
        daemon.kill()
        at_kill.append(committed(kafka_bootstrap, topic_prefix))
    feeder.release(len(stream))
    daemon = DaemonProcess(config, tmp_path / "daemon-final.log")
    feeder.join(timeout=60)
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon, timeout=120)
    code, _ = daemon.terminate()
    assert code == 0
    assert_same_model(changelog_model(kafka_bootstrap, topic_prefix), offline_model(final, texts))
    # exactly once: a read_committed reader sees each unlabelled id's prediction once
    unlabelled = {m for m, v in stream if b'"label"' not in v and b'"feedback"' not in v}
    outputs = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                       until=lambda r: len(r) >= len(unlabelled), timeout=30)
    assert Counter(r.key.decode() for r in outputs) == Counter(unlabelled)
    # and no restart read a partition from its start again: a daemon starts a partition at
    # the beginning only if no commit covered it yet
    logs = [tmp_path / f"daemon-{r}.log" for r in range(len(targets))]
    logs.append(tmp_path / "daemon-final.log")
    before = [{}, *at_kill]
    for log, covered in zip(logs, before, strict=True):
        for event in DaemonProcess.events_of(log):
            if event.get("event") == "partition_started":
                assert event["partition"] not in covered, (log.name, event, covered)


def test_late_labels_corrections_and_duplicates_equal_offline_on_final_labels(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    rows = sms(data_dir)[:800]
    texts = {msg_id: text for msg_id, _, text in rows}
    truth = {msg_id: label for msg_id, label, _ in rows}
    rng = random.Random(3)
    stream = [(m, value(m, texts[m])) for m in texts]  # all unlabelled at first
    late = [m for m in texts if rng.random() < 0.7]
    stream += [(m, feedback(m, truth[m])) for m in late]
    final = {m: truth[m] for m in late}
    corrected = rng.sample(late, 60)
    for m in corrected:  # corrections ...
        final[m] = "ham" if final[m] == "spam" else "spam"
        stream.append((m, feedback(m, final[m])))
    for m in corrected[:20]:  # ... corrections of corrections ...
        final[m] = truth[m]
        stream.append((m, feedback(m, final[m])))
    stream += [(m, feedback(m, final[m])) for m in rng.sample(late, 200)]  # ... duplicates
    config = start(tmp_path, kafka_bootstrap, topic_prefix, partitions=2, every_seconds=0.3)
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    topic = f"{topic_prefix}-in"
    produce(kafka_bootstrap, topic, ((m.encode(), v) for m, v in stream))
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    assert daemon.terminate()[0] == 0
    assert_same_model(changelog_model(kafka_bootstrap, topic_prefix), offline_model(final, texts))


def test_poison_messages_go_to_the_dead_letter_topic_with_their_reason(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    rows = sms(data_dir)[:300]
    poison = [
        (b"p-json", b"{not json", "bad_json"),
        (b"p-body", b'{"id": "p-body", "label": "spam"}', "missing_body"),
        (b"p-label", value("p-label", "hello", "eggs"), "unknown_label"),
        (b"p-both", b'{"id": "p-both", "text": "a", "tokens": ["a"]}', "ambiguous_body"),
        (b"p-b64", b'{"id": "p-b64", "raw_b64": "***"}', "bad_body"),
        (b"p-fb", feedback("never-seen", "spam"), "unknown_id"),
        (b"p-vec", b'{"id": "p-vec", "features": [1.0, 2.0]}', "wrong_body"),
        (None, b"\x00\x01binary", "bad_json"),
    ]
    stream = []
    for i, (msg_id, label, text) in enumerate(rows):
        stream.append((msg_id.encode(), value(msg_id, text, label if i % 2 else None)))
        if i % 37 == 0 and poison:
            key, val, _ = poison.pop(0)
            stream.append((key, val))
    assert not poison
    expected = {
        b"{not json": "bad_json",
        b'{"id": "p-body", "label": "spam"}': "missing_body",
        value("p-label", "hello", "eggs"): "unknown_label",
        b'{"id": "p-both", "text": "a", "tokens": ["a"]}': "ambiguous_body",
        b'{"id": "p-b64", "raw_b64": "***"}': "bad_body",
        feedback("never-seen", "spam"): "unknown_id",
        b'{"id": "p-vec", "features": [1.0, 2.0]}': "wrong_body",
        b"\x00\x01binary": "bad_json",
    }
    config = start(tmp_path, kafka_bootstrap, topic_prefix)
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    topic = f"{topic_prefix}-in"
    produce(kafka_bootstrap, topic, stream)
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    assert daemon.terminate()[0] == 0

    dead = read_all(kafka_bootstrap, f"{topic_prefix}-dlq", until=lambda r: len(r) >= 8)
    assert {r.value: dict(r.headers)["streamnb.reason"].decode() for r in dead} == expected
    for record in dead:
        headers = dict(record.headers)
        assert headers["streamnb.source.topic"].decode() == topic
        offset = int(headers["streamnb.source.offset"])
        assert stream[offset][1] == record.value and stream[offset][0] == record.key
    # the rest is unaffected: one prediction per unlabelled SMS
    unlabelled = {m for i, (m, _, _) in enumerate(rows) if i % 2 == 0}
    out = read_all(kafka_bootstrap, f"{topic_prefix}-out", until=lambda r: len(r) >= 150)
    assert sorted(r.key.decode() for r in out) == sorted(unlabelled)
    labelled = {m: label for i, (m, label, _) in enumerate(rows) if i % 2}
    texts = {m: text for m, _, text in rows}
    assert_same_model(
        changelog_model(kafka_bootstrap, topic_prefix), offline_model(labelled, texts)
    )


def test_sigterm_exits_cleanly_and_a_restart_relearns_nothing(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    rows = sms(data_dir)[:1000]
    texts = {m: t for m, _, t in rows}
    # every 5th message unlabelled, and the last of each part too: its prediction tells
    # that the daemon has read the whole part.
    unlabelled = {m for i, (m, _, _) in enumerate(rows) if i % 5 == 0 or i in (599, 999)}
    labelled = {m: lab for m, lab, _ in rows if m not in unlabelled}
    stream = [(m.encode(), value(m, t, None if m in unlabelled else lab)) for m, lab, t in rows]
    config = start(tmp_path, kafka_bootstrap, topic_prefix, every_seconds=0.3)
    topic, out = f"{topic_prefix}-in", f"{topic_prefix}-out"

    def predicted(msg_id):
        def seen(records):
            return any(r.key == msg_id.encode() for r in records)

        return lambda: seen(read_all(kafka_bootstrap, out, until=seen, timeout=10))

    daemon = DaemonProcess(config, tmp_path / "daemon-1.log")
    daemon.wait_assigned()
    produce(kafka_bootstrap, topic, stream[:600])
    wait_for(predicted(rows[599][0]), 60, "the prediction of the first part's last message")
    code, seconds = daemon.terminate()
    assert code == 0 and seconds < 5, (code, seconds)
    assert committed(kafka_bootstrap, topic_prefix) == {f"{topic}:0": 600}

    daemon = DaemonProcess(config, tmp_path / "daemon-2.log")
    daemon.wait_assigned()
    assert assigned_events(daemon)[0]["partitions"] == [f"{topic}:0"]
    wait_for(lambda: any(e.get("event") == "partition_resumed" for e in daemon.events()), 30,
             "the resume line")
    resumed = [e for e in daemon.events() if e.get("event") == "partition_resumed"]
    assert [(e["partition"], e["offset"]) for e in resumed] == [(f"{topic}:0", 600)]
    restored = [e for e in daemon.events() if e.get("event") == "state_restored"]
    assert restored and restored[0]["records"] > 0
    produce(kafka_bootstrap, topic, stream[600:])
    wait_for(predicted(rows[999][0]), 60, "the prediction of the second part's last message")
    code, seconds = daemon.terminate()
    assert code == 0 and seconds < 5, (code, seconds)

    outputs = read_all(kafka_bootstrap, out, until=lambda r: len(r) >= len(unlabelled))
    assert sorted(r.key.decode() for r in outputs) == sorted(unlabelled)  # none twice
    assert_same_model(
        changelog_model(kafka_bootstrap, topic_prefix), offline_model(labelled, texts)
    )
