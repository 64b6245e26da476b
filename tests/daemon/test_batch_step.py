"""Runs of new messages scored with one ``prequential_many`` call change nothing observable:
the real MultinomialNB daemon gives the outputs, metrics, store, offsets and model of the
record-by-record loop, with feedback, duplicate ids and poison interleaved."""

from __future__ import annotations

import math
import random
from collections import Counter

import orjson
import pytest

from streamnb.config import ModelSettings
from streamnb.daemon import build_daemon
from streamnb.pipeline import Prepared
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, drain, settings_for

SPAM = ["win", "cash", "prize", "now", "free", "call", "txt", "claim"]
HAM = ["lunch", "at", "noon", "mum", "home", "later", "ok", "call", "now"]


def stream(seed: int = 7) -> list[bytes]:
    """SMS-like messages, 80% labelled, with feedback, duplicate ids and poison among them."""
    rng = random.Random(seed)
    values, seen = [], []
    for i in range(700):
        roll = rng.random()
        if roll < 0.05 and seen:  # feedback: late labels, corrections, duplicates
            values.append(orjson.dumps({"type": "feedback", "id": rng.choice(seen),
                                        "label": rng.choice(["ham", "spam"])}))
            continue
        if roll < 0.08 and seen:  # the same id again, labelled or not
            msg_id = rng.choice(seen)
        else:
            msg_id = f"m{i}"
            seen.append(msg_id)
        label = rng.choice(["ham", "spam"])
        words = SPAM if label == "spam" else HAM
        obj = {"id": msg_id, "text": " ".join(rng.choice(words) for _ in range(rng.randint(0, 9)))}
        if rng.random() < 0.8:
            obj["label"] = label
        if roll > 0.99:
            obj["text"] = " ".join(f"w{j}" for j in range(80))  # longer than the short path
        values.append(orjson.dumps(obj))
        if roll > 0.97:  # poison of several kinds
            values.append(rng.choice([
                b"{not json",
                orjson.dumps({"id": f"p{i}", "text": "hi", "label": "eggs"}),  # label not allowed
                orjson.dumps({"id": f"q{i}", "tokens": [1, 2]}),  # tokens not str
                orjson.dumps({"id": f"r{i}", "text": "NEGATIVE count", "label": "spam"}),
            ]))
    return values


class RejectingPipeline:
    """The real pipeline, except that a text saying NEGATIVE becomes an input the model
    rejects (a negative count), as a hand-made ``tokens`` message could be."""

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def prepare(self, message):
        if message.text is not None and "NEGATIVE" in message.text:
            return Prepared({"negative": -1})
        return self.pipeline.prepare(message)


def run_daemon(tmp_path, values, batch: int, runs: bool, partitions: int = 1):
    kafka = FakeKafka({"in": partitions})
    for i, value in enumerate(values):
        kafka.append("in", value, partition=i % partitions)
    settings = settings_for(tmp_path, model=ModelSettings(kind="multinomial",
                                                           labels=("ham", "spam")))
    metrics = RecordingMetrics()

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=batch)

    daemon = build_daemon(settings, metrics=metrics, io_factory=io_factory)
    daemon.pipeline = RejectingPipeline(daemon.pipeline)
    if not runs:
        daemon._batches = lambda key: False  # the record-by-record loop, as before runs
    drain(daemon)
    daemon.checkpoint("test")
    return kafka, daemon, metrics


def assert_close(a: dict, b: dict):
    assert list(a) == list(b)
    for label in a:
        assert abs(a[label] - b[label]) <= 1e-9


def assert_same_prediction(got: dict, want: dict):
    """The probabilities and log-probabilities of two predictions equal to rounding (the
    batch step sums in another order than the one-message path), the log-probabilities
    finite and the probabilities exactly their exps."""
    for prediction in (got, want):
        log_proba = prediction["log_probabilities"]
        assert all(math.isfinite(lp) for lp in log_proba.values())
        assert prediction["probabilities"] == {c: math.exp(lp) for c, lp in log_proba.items()}
    assert_close(got.pop("probabilities"), want.pop("probabilities"))
    assert_close(got.pop("log_probabilities"), want.pop("log_probabilities"))


def tallies(metrics) -> Counter:
    """Counter metrics summed over the run (the loop adds them up per polled batch)."""
    total: Counter = Counter()
    for name, *args in metrics.calls:
        if name in ("consumed", "learned", "prediction_emitted"):
            *what, n = args
            total[(name, *what)] += n
    return total


@pytest.mark.parametrize("batch", [1, 7, 500])
def test_runs_of_new_messages_change_nothing_observable(tmp_path, batch):
    values = stream()
    kafka_ref, ref, ref_metrics = run_daemon(tmp_path / "ref", values, 1, runs=False)
    kafka, daemon, metrics = run_daemon(tmp_path / "runs", values, batch, runs=True)

    predictions = [orjson.loads(r.value) for r in kafka.all("out")]
    expected = [orjson.loads(r.value) for r in kafka_ref.all("out")]
    assert len(predictions) == len(expected) > 100
    for got, want in zip(predictions, expected, strict=True):
        assert_same_prediction(got, want)
        assert got.pop("latency_seconds") >= 0
        want.pop("latency_seconds")
        score, score_ref = got.pop("score"), want.pop("score")
        assert score == score_ref or abs(score - score_ref) <= 1e-9
        assert got == want  # id, label, model_updates, topic, partition, offset
    assert [r.key for r in kafka.all("out")] == [r.key for r in kafka_ref.all("out")]
    dead = [(r.value, r.headers) for r in kafka.all("dlq")]
    assert dead == [(r.value, r.headers) for r in kafka_ref.all("dlq")]
    reasons = {dict(h)["streamnb.reason"] for _, h in dead}
    assert {b"bad_json", b"bad_body", b"unknown_label", b"model_rejected"} <= reasons

    assert daemon.live.to_state() == ref.live.to_state()
    assert orjson.dumps(daemon._store("in:0").to_state()) == orjson.dumps(
        ref._store("in:0").to_state())
    assert daemon.offsets == ref.offsets == {"in:0": len(kafka.all("in"))}

    observed = metrics.names("observe_labelled")
    observed_ref = ref_metrics.names("observe_labelled")
    assert len(observed) == len(observed_ref)
    for (label, predicted, proba), (label_r, predicted_r, proba_r) in zip(
            observed, observed_ref, strict=True):
        assert (label, predicted) == (label_r, predicted_r)
        assert_close(proba, proba_r)
    for name in ("dead_lettered", "feedback_outcome", "unlearned", "relabelled"):
        assert metrics.names(name) == ref_metrics.names(name)
    assert tallies(metrics) == tallies(ref_metrics)
    for name in ("observe_latencies", "observe_end_to_end_many"):
        assert sum(len(values) for values, in metrics.names(name)) == sum(
            len(values) for values, in ref_metrics.names(name))


@pytest.mark.parametrize("batch", [7, 500])
def test_runs_spanning_two_partitions_change_nothing_observable(tmp_path, batch):
    """A poll of two partitions makes runs that cross from one slice to the other: each slice
    learns and remembers its own messages, as the record-by-record loop over the same polls."""
    values = stream(seed=11)
    kafka_ref, ref, ref_metrics = run_daemon(tmp_path / "ref", values, batch, runs=False,
                                             partitions=2)
    kafka, daemon, metrics = run_daemon(tmp_path / "runs", values, batch, runs=True,
                                        partitions=2)
    predictions = [orjson.loads(r.value) for r in kafka.all("out")]
    expected = [orjson.loads(r.value) for r in kafka_ref.all("out")]
    assert len(predictions) == len(expected) > 100
    for got, want in zip(predictions, expected, strict=True):
        assert_same_prediction(got, want)
        for field in ("latency_seconds", "score"):
            got.pop(field), want.pop(field)
        assert got == want
    assert [(r.value, r.headers) for r in kafka.all("dlq")] == [
        (r.value, r.headers) for r in kafka_ref.all("dlq")]
    assert daemon.live.to_state() == ref.live.to_state()
    for key in ("in:0", "in:1"):
        assert daemon.slices[key].to_state() == ref.slices[key].to_state()
        store, store_ref = daemon._store(key), ref._store(key)
        assert orjson.dumps(store.to_state()) == orjson.dumps(store_ref.to_state())
        assert store._runs == store_ref._runs and store._run_bytes == store_ref._run_bytes
    assert daemon.offsets == ref.offsets
    assert tallies(metrics) == tallies(ref_metrics)
    assert [c[:2] for c in metrics.names("observe_labelled")] == [
        c[:2] for c in ref_metrics.names("observe_labelled")]
