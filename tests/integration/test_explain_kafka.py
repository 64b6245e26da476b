"""output.explain with the real daemon and broker; streamnb explain on the group's changelog."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import orjson
import pytest

from streamnb.daemon.kafka_io import create_topics, produce, read_all
from streamnb.pipeline import build_pipeline
from tests.integration.harness import (
    REPO,
    DaemonProcess,
    changelog_model,
    sms,
    value,
    wait_caught_up,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def test_predictions_carry_exact_explanations(tmp_path, kafka_bootstrap, topic_prefix, data_dir):
    rows = sms(data_dir)[:1500]
    rng = random.Random(5)
    unlabelled = {msg_id for msg_id, _, _ in rows if rng.random() < 0.2}
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 1, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix,
                          extra="[output]\nexplain = 5\n")
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    daemon.wait_assigned()
    produce(kafka_bootstrap, f"{topic_prefix}-in", (
        (msg_id.encode(), value(msg_id, text, None if msg_id in unlabelled else label))
        for msg_id, label, text in rows))
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    assert daemon.terminate()[0] == 0

    records = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                       until=lambda r: len(r) >= len(unlabelled))
    assert len(records) == len(unlabelled)
    checked = 0
    for record in records:
        prediction = orjson.loads(record.value)
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
