"""output.explain with the real daemon and broker; streamnb explain on the group's changelog."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from streamnb.pipeline import build_pipeline
from tests.integration.harness import REPO, changelog_model, predictions_of_one_daemon, sms

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def test_predictions_carry_exact_explanations(tmp_path, kafka_bootstrap, topic_prefix, data_dir):
    rows = sms(data_dir)[:1500]
    rng = random.Random(5)
    unlabelled = {msg_id for msg_id, _, _ in rows if rng.random() < 0.2}
    config, predictions = predictions_of_one_daemon(
        tmp_path, kafka_bootstrap, topic_prefix, rows, unlabelled, extra="[output]\nexplain = 5\n")
    checked = 0
    for prediction in predictions:
        why, proba = prediction["explanation"], prediction["probabilities"]
        if len(proba) < 2:
            assert why is None
            continue
        assert why["label"] == prediction["label"] and len(why["tokens"]) <= 5
        parts = [why["prior"], why["rest"], *(c for _, c in why["tokens"])]
        assert math.isclose(math.fsum(parts), why["log_odds"], abs_tol=1e-9)
        if min(proba.values()) > 1e-12:
            odds = math.log(proba[why["label"]]) - math.log(proba[why["versus"]])
            assert math.isclose(odds, why["log_odds"], rel_tol=1e-7, abs_tol=1e-9)
            checked += 1
    assert checked > 100

    # The state the daemon left in Kafka explains a new message from the command line, as the
    # model that the changelog holds explains it.
    sms_text = "URGENT! You have won a 1 week FREE membership, call now"
    done = subprocess.run(
        [sys.executable, "-m", "streamnb", "explain", "--changelog", "--config", str(config),
         "--text", "--json", "-"],
        input=sms_text.encode(), cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["explanation"]["label"] == "spam"
    expected = changelog_model(kafka_bootstrap, topic_prefix).explain_log_odds(
        build_pipeline({"kind": "multinomial"}, {}).featurizer.from_text(sms_text).tokens, 10)
    assert shown["explanation"] == json.loads(json.dumps(expected))
