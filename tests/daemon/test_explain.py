"""output.explain: each prediction lists the tokens that weighed most, computed on the model
that made the prediction, and changes nothing else the daemon does."""

from __future__ import annotations

import math

import orjson
import pytest

from streamnb.config import ConfigError, ModelSettings, OutputSettings, load_settings
from streamnb.daemon import build_daemon
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, drain, make_daemon, settings_for
from tests.daemon.test_batch_step import RejectingPipeline, stream


def run(tmp_path, values, explain: int, kind: str = "multinomial", batch: int = 500):
    kafka = FakeKafka({"in": 1})
    for value in values:
        kafka.append("in", value)
    settings = settings_for(tmp_path, model=ModelSettings(kind=kind, labels=("ham", "spam")),
                            output=OutputSettings(explain=explain))

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=batch)

    daemon = build_daemon(settings, metrics=RecordingMetrics(), io_factory=io_factory)
    daemon.pipeline = RejectingPipeline(daemon.pipeline)
    drain(daemon)
    daemon.checkpoint("test")
    return [orjson.loads(r.value) for r in kafka.all("out")], daemon


@pytest.mark.parametrize("kind", ["multinomial", "bernoulli"])
def test_each_prediction_is_explained_by_the_model_that_made_it(tmp_path, kind):
    values = stream()
    plain, reference = run(tmp_path / "plain", values, explain=0, kind=kind)
    explained, daemon = run(tmp_path / "explained", values, explain=3, kind=kind)
    assert len(explained) == len(plain) > 100
    n_checked = 0
    for got, want in zip(explained, plain, strict=True):
        assert "explanation" not in want
        why = got.pop("explanation")
        proba = got["probabilities"]
        for name in ("latency_seconds", "probabilities", "score"):
            got.pop(name), want.pop(name)
        assert got == want  # id, label, model_updates, topic, partition, offset
        if len(proba) < 2:
            assert why is None
            continue
        assert why["label"] == got["label"]
        assert len(why["tokens"]) <= 3
        parts = [why["prior"], why.get("absent_words", 0.0), why["rest"],
                 *(c for _, c in why["tokens"])]
        assert math.isclose(math.fsum(parts), why["log_odds"], abs_tol=1e-9)
        # The log-odds of the published probabilities: the explanation was computed on the
        # state that predicted, not on one that had learned later messages of the batch.
        if min(proba.values()) > 1e-12:
            odds = math.log(proba[why["label"]]) - math.log(proba[why["versus"]])
            assert math.isclose(odds, why["log_odds"], rel_tol=1e-7, abs_tol=1e-9)
            n_checked += 1
    assert n_checked > 50
    # the labelled messages still went through the batch step, and learned the same
    assert daemon.live.to_state() == reference.live.to_state()
    assert daemon.offsets == reference.offsets


def test_a_model_without_explanations_fails_at_start(tmp_path):
    settings = settings_for(tmp_path, output=OutputSettings(explain=5))
    with pytest.raises(ValueError, match="^output.explain: "):
        make_daemon(settings, FakeKafka({"in": 1}))
    robinson = settings_for(tmp_path, output=OutputSettings(explain=5), model=ModelSettings(
        kind="multinomial", options={"combining": "robinson"}))
    with pytest.raises(ValueError, match="^output.explain: combining = 'robinson'"):
        build_daemon(robinson, metrics=RecordingMetrics(),
                     io_factory=lambda *_: FakeIO(FakeKafka({"in": 1}), settings.kafka, *_))


def test_the_option_is_checked_and_off_by_default():
    assert load_settings(text="", environ={}).output.explain == 0
    assert load_settings(text="[output]\nexplain = 7\n", environ={}).output.explain == 7
    for bad in ("-1", "1.5", '"five"', "true"):
        with pytest.raises(ConfigError, match="^config: output.explain must be an integer"):
            load_settings(text=f"[output]\nexplain = {bad}\n", environ={})
