"""model.options.class_offsets in the daemon: validated at start (one line naming the key), and
the label it emits and scores is the model's decision while the probabilities it emits stay
the model's posterior (the real MultinomialNB over the in-memory Kafka of the loop tests)."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streamnb.config import ConfigError, ModelSettings, OutputSettings, load_settings
from streamnb.daemon import build_daemon
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, drain, settings_for

REPO = Path(__file__).resolve().parents[2]
KEY = "config: model.options.class_offsets"


@pytest.mark.parametrize("text, message", [
    ("[model.options]\nclass_offsets = -1.0\n", f"{KEY}: option 'class_offsets' must be a table"),
    ("[model.options.class_offsets]\nspam = 'strict'\n",
     f"{KEY}: option 'class_offsets' must map class labels to finite numbers (log-odds), "
     "got 'spam' = 'strict'"),
    ("[model.options.class_offsets]\nspam = inf\n", f"{KEY}: option 'class_offsets' must map"),
    ('[model]\nlabels = ["ham", "spam"]\n[model.options.class_offsets]\nspma = -1.0\n',
     f"{KEY} names 'spma', not in model.labels ['ham', 'spam']"),
])
def test_a_bad_offset_table_fails_at_start_naming_the_key(text, message):
    with pytest.raises(ConfigError) as error:
        load_settings(text=text, environ={})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_offsets_come_from_the_file_or_the_environment():
    text = '[model]\nlabels = ["ham", "spam"]\n[model.options]\nclass_offsets = {spam = -1.5}\n'
    assert load_settings(text=text, environ={}).model.options == {
        "class_offsets": {"spam": -1.5}}
    env = {"STREAMNB_MODEL__OPTIONS__CLASS_OFFSETS__SPAM": "-2"}
    assert load_settings(text="", environ=env).model.table()["class_offsets"] == {"spam": -2}
    # any label, when model.labels is left open
    assert load_settings(text="[model.options.class_offsets]\nwork = 0.5\n", environ={})


def test_streamnb_run_stops_on_a_bad_offset_before_connecting(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[model]\nlabels = ["ham", "spam"]\n'
                      '[model.options.class_offsets]\nspam = "strict"\n')
    result = subprocess.run([sys.executable, "-m", "streamnb", "run", "--config", str(config)],
                            cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "STREAMNB_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert KEY in result.stderr


SPAM = ["win", "cash", "prize", "now", "free", "call", "txt", "claim"]
HAM = ["lunch", "at", "noon", "mum", "home", "later", "ok", "call", "now"]


def stream(seed=11, n=400):
    rng = random.Random(seed)
    values = []
    for i in range(n):
        label = "spam" if rng.random() < 0.35 else "ham"
        words = SPAM if label == "spam" else HAM
        text = " ".join(rng.choice(words + ["call", "now", "ok"]) for _ in range(rng.randint(1, 5)))
        obj = {"id": f"m{i}", "text": text}
        if rng.random() < 0.7:
            obj["label"] = label
        values.append(orjson.dumps(obj))
    return values


def run_daemon(tmp_path, options, explain=0, batch=50):
    kafka = FakeKafka({"in": 1})
    for value in stream():
        kafka.append("in", value)
    settings = settings_for(tmp_path, model=ModelSettings(kind="multinomial",
                                                           labels=("ham", "spam"),
                                                           options=options),
                            output=OutputSettings(explain=explain))
    metrics = RecordingMetrics()

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=batch)

    daemon = build_daemon(settings, metrics=metrics, io_factory=io_factory)
    drain(daemon)
    daemon.checkpoint("test")
    return [orjson.loads(r.value) for r in kafka.all("out")], metrics, daemon


def decided(proba, offsets):
    if not proba:
        return None
    logs = {c: math.log(p) if p > 0 else -math.inf for c, p in proba.items()}
    return min(logs, key=lambda c: (-(logs[c] + offsets.get(c, 0.0)), c))


@pytest.mark.parametrize("explain", [0, 3])  # the batch step, and one message at a time
def test_the_daemon_emits_and_scores_the_offset_label_with_the_posterior(tmp_path, explain):
    offsets = {"spam": -3.0}
    plain, plain_metrics, plain_daemon = run_daemon(tmp_path / "plain", {}, explain)
    strict, metrics, daemon = run_daemon(tmp_path / "strict", {"class_offsets": offsets},
                                         explain)
    assert daemon.live.class_offsets == offsets
    assert len(strict) == len(plain) > 80
    moved = 0
    for got, want in zip(strict, plain, strict=True):
        assert got["probabilities"] == want["probabilities"]  # the posterior, unshifted
        assert got["label"] == decided(got["probabilities"], offsets)
        assert got["score"] == got["probabilities"][got["label"]]
        if got["label"] != want["label"]:
            moved += 1
            assert (want["label"], got["label"]) == ("spam", "ham")
            assert 0.5 < got["probabilities"]["spam"] <= 1 / (1 + math.exp(-3.0))
        if explain and got["explanation"] is not None:  # (None before two classes)
            assert got["explanation"]["label"] == got["label"]
            assert got["explanation"]["offset"] == (3.0 if got["label"] == "ham" else -3.0)
            assert "offset" not in want["explanation"]
    assert moved > 0
    # the prequential metrics see the decided label, with the same probabilities
    observed = metrics.names("observe_labelled")
    observed_plain = plain_metrics.names("observe_labelled")
    assert len(observed) == len(observed_plain) > 150
    assert [p for _, _, p in observed] == [p for _, _, p in observed_plain]
    assert [predicted for _, predicted, proba in observed] == [
        decided(proba, offsets) for _, _, proba in observed]
    assert any(a[1] != b[1] for a, b in zip(observed, observed_plain, strict=True))
    # the statistics are those of the daemon without offsets
    state, plain_state = daemon.live.to_state(), plain_daemon.live.to_state()
    assert state.pop("options")["class_offsets"] == offsets
    plain_state.pop("options")
    assert state == plain_state
