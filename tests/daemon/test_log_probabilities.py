"""A prediction record carries the model's log-probabilities beside its probabilities: every class
the model knows in both, each log-probability finite and exact where its probability underflows
to 0.0 (the real models over the in-memory Kafka of the loop tests, every kind, in runs
scored by the batch step and record by record)."""

from __future__ import annotations

import math
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.codec import Message
from streamnb.config import ModelSettings
from streamnb.daemon import build_daemon
from streamnb.models import _prequential
from streamnb.models._base import first_best
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, drain, settings_for

SPAM = [f"prize{i}" for i in range(40)]
HAM = [f"meeting{i}" for i in range(40)]

#: (model settings, how a message's body is written): the kinds the daemon runs.
KINDS = {
    "multinomial textbook": (ModelSettings(kind="multinomial", preset="textbook",
                                           labels=("ham", "spam")), "text"),
    "multinomial mail": (ModelSettings(kind="multinomial", labels=("ham", "spam")), "text"),
    "bernoulli": (ModelSettings(kind="bernoulli", labels=("ham", "spam")), "text"),
    "gda": (ModelSettings(kind="gda", labels=("ham", "spam")), "features"),
}


def body(kind: str, words: list[str], rng: random.Random) -> dict:
    """A message of ``words`` as ``kind`` reads it: text, or for GDA a point on the words'
    class's side (spam's mean near (3, 3), ham's near (0, 0)), the further out the more words
    there are, so that long messages saturate GDA too."""
    if KINDS[kind][1] == "text":
        return {"text": " ".join(words)}
    side = 3.0 * (1 + len(words) / 100) if words[0] in SPAM else 0.0
    return {"features": [side + rng.gauss(0, 0.5), side + rng.gauss(0, 0.5)]}


def run_daemon(kind: str, values: list[bytes], runs: bool):
    kafka = FakeKafka({"in": 1})
    for value in values:
        kafka.append("in", value)
    settings = settings_for(None, model=KINDS[kind][0])

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=500)

    daemon = build_daemon(settings, metrics=RecordingMetrics(), io_factory=io_factory)
    if not runs:
        daemon._batches = lambda key: False  # the record-by-record path
    drain(daemon)
    daemon.checkpoint("test")  # the last predictions' transaction
    return daemon, [orjson.loads(r.value) for r in kafka.all("out")]


def assert_prediction_invariants(prediction: dict, known: set[str]) -> None:
    """Every class the model knew in both maps, each log-probability finite and its exp the
    probability, the probabilities adding up to 1, the label and score decided on them."""
    proba, log_proba = prediction["probabilities"], prediction["log_probabilities"]
    assert list(proba) == list(log_proba) and set(proba) == known
    assert all(isinstance(lp, float) and math.isfinite(lp) for lp in log_proba.values())
    assert proba == {c: math.exp(lp) for c, lp in log_proba.items()}
    if proba:
        assert math.isclose(math.fsum(proba.values()), 1.0, rel_tol=1e-12)
    assert prediction["label"] == first_best(proba)
    assert prediction["score"] == (proba[prediction["label"]] if proba else None)


def training(kind: str, n: int = 40) -> list[bytes]:
    rng = random.Random(5)
    values = []
    for i in range(n):
        label = ("ham", "spam")[i % 2]
        words = rng.sample(SPAM if label == "spam" else HAM, 8)
        values.append(orjson.dumps({"id": f"t{i}", "label": label, **body(kind, words, rng)}))
    return values


@pytest.fixture(params=["c", "numpy"])
def step(request, monkeypatch):
    """The batch step the runs take: the C one and the numpy one beside it."""
    if request.param == "numpy":
        monkeypatch.setenv(_prequential.PURE_PYTHON_ENV, "1")
    else:
        monkeypatch.delenv(_prequential.PURE_PYTHON_ENV, raising=False)
    return request.param


@pytest.mark.parametrize("runs", [True, False], ids=["runs", "record by record"])
@pytest.mark.parametrize("kind", ["multinomial textbook", "gda"])
def test_a_message_whose_ham_probability_underflows_is_emitted_with_both_classes(
        kind, runs, step):
    """A long spammy message (each spam word a thousand times; for GDA a point far out on
    spam's side): P(ham) is 0.0 in float64, yet the record lists ham, with probability 0.0
    and a finite log-probability, and its log-odds are those ``predict_log_proba_one`` gives
    (exactly one message at a time; to rounding in a run, whose batch step sums in another
    order)."""
    rng = random.Random(9)
    loud = body(kind, SPAM * 1000, rng) if kind != "gda" else {"features": [400.0, 400.0]}
    values = training(kind) + [orjson.dumps({"id": "loud", **loud})]
    daemon, predictions = run_daemon(kind, values, runs)
    (prediction,) = predictions
    x = daemon.pipeline.prepare(Message(id="loud", **loud)).x
    expected = daemon.live.predict_log_proba_one(x)  # the model that predicted it: unlabelled
    assert math.exp(expected["ham"]) == 0.0 and math.isfinite(expected["ham"])

    assert prediction["probabilities"] == {"ham": 0.0, "spam": 1.0}
    assert prediction["label"] == "spam" and prediction["score"] == 1.0
    assert_prediction_invariants(prediction, {"ham", "spam"})
    log_proba = prediction["log_probabilities"]
    log_odds = log_proba["spam"] - log_proba["ham"]
    if runs and kind != "gda":  # (GDA has no batch step: its runs are the loop)
        assert math.isclose(log_odds, expected["spam"] - expected["ham"], rel_tol=1e-12)
        assert math.isclose(log_proba["ham"], expected["ham"], rel_tol=1e-12)
    else:
        assert log_proba == expected


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(stream=st.lists(st.tuples(st.sampled_from(["spam", "ham"]),
                                 st.sampled_from([None, "spam", "ham"]),
                                 st.sampled_from([1, 8, 64, 500, 3000]),
                                 st.integers(0, 2**16)),
                       min_size=1, max_size=40),
       runs=st.booleans())
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_record_of_every_kind_lists_the_known_classes_with_finite_log_probabilities(
        kind, stream, runs):
    """Messages of every length (up to a few thousand words, saturating the model) and either
    class, labelled or not, in any order: each prediction lists exactly the classes learned
    before its message, with finite log-probabilities whose exps are its probabilities."""
    values, known, expected_known = [], set(), []
    for i, (looks_like, label, length, seed) in enumerate(stream):
        rng = random.Random(seed)
        words = rng.choices(SPAM if looks_like == "spam" else HAM, k=length)
        values.append(orjson.dumps({"id": f"m{i}", **({"label": label} if label else {}),
                                    **body(kind, words, rng)}))
        if label is None:
            expected_known.append(set(known))
        else:
            known.add(label)
    _, predictions = run_daemon(kind, values, runs)
    assert len(predictions) == len(expected_known)
    for prediction, classes in zip(predictions, expected_known, strict=True):
        assert_prediction_invariants(prediction, classes)
