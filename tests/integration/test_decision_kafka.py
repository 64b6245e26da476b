"""model.options.class_offsets with the real daemon and broker: each prediction's label is the
model's decision on the probabilities it carries, which stay the posterior."""

from __future__ import annotations

import math
import random

import orjson
import pytest

from streamnb.daemon.kafka_io import create_topics, produce, read_all
from tests.integration.harness import DaemonProcess, sms, value, wait_caught_up, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

OFFSET = -3.0  # spam only above P(spam) = 1 / (1 + e^-3) = 0.953


def test_predictions_carry_the_offset_label_and_the_posterior(tmp_path, kafka_bootstrap,
                                                               topic_prefix, data_dir):
    rows = sms(data_dir)[:1500]
    rng = random.Random(9)
    unlabelled = {msg_id for msg_id, _, _ in rows if rng.random() < 0.3}
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 1, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix,
                          extra=f"[model.options.class_offsets]\nspam = {OFFSET}\n")
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
    spam, held_back = 0, 0
    for record in records:
        prediction = orjson.loads(record.value)
        proba = prediction["probabilities"]
        if len(proba) < 2:
            continue
        assert math.isclose(math.fsum(proba.values()), 1.0, rel_tol=1e-9)
        log_odds = math.log(proba["spam"]) - math.log(proba["ham"]) if min(
            proba.values()) > 0 else (math.inf if proba["ham"] == 0 else -math.inf)
        expected = "spam" if log_odds + OFFSET > 0 else "ham"
        if abs(log_odds + OFFSET) > 1e-9:  # (not within rounding of the line)
            assert prediction["label"] == expected, prediction
        assert prediction["score"] == proba[prediction["label"]]
        spam += prediction["label"] == "spam"
        held_back += prediction["label"] == "ham" and proba["spam"] > 0.5
    assert spam > 20  # the offset moves the line, it does not silence spam
    assert held_back > 0  # and some messages more probably spam than not are labelled ham
