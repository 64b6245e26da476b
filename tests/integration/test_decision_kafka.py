"""model.options.class_offsets with the real daemon and broker: each prediction's label is the
model's decision on the probabilities it carries, which stay the posterior."""

from __future__ import annotations

import math
import random

import pytest

from tests.integration.harness import predictions_of_one_daemon, sms

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

OFFSET = -3.0  # spam only above P(spam) = 1 / (1 + e^-3) = 0.953


def test_predictions_carry_the_offset_label_and_the_posterior(tmp_path, kafka_bootstrap,
                                                               topic_prefix, data_dir):
    rows = sms(data_dir)[:1500]
    rng = random.Random(9)
    unlabelled = {msg_id for msg_id, _, _ in rows if rng.random() < 0.3}
    _, predictions = predictions_of_one_daemon(
        tmp_path, kafka_bootstrap, topic_prefix, rows, unlabelled,
        extra=f"[model.options.class_offsets]\nspam = {OFFSET}\n")
    spam, held_back = 0, 0
    for prediction in predictions:
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
