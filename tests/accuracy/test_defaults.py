"""The default configuration on a real stream: it must rank and calibrate better than plain NB.

The SMS Spam Collection (first 2,500 messages, immediate feedback) keeps this quick; the full
comparison with bogofilter on every stream is ``python -m bench.bench_accuracy``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamnb.evaluation import scoring
from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.models import TEXTBOOK_OPTIONS, BernoulliNB, MultinomialNB, make_model
from streamnb.pipeline import build_pipeline

N_MESSAGES = 2500


@pytest.fixture(scope="module")
def sms_stream(data_dir):
    lines = (data_dir / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8")
    rows = [line.split("\t", 1) for line in lines.splitlines() if "\t" in line][:N_MESSAGES]
    featurizer = Featurizer(FeaturizerOptions())
    return [dict(featurizer.from_text(text).tokens) for _, text in rows], [y for y, _ in rows]


def prequential(model, stream):
    X, y = stream
    log_p_truth, log_odds = [], []
    for x, label in zip(X, y, strict=True):
        lp = model.predict_log_proba_one(x)
        if len(lp) == 2:
            log_p_truth.append(lp[label])
            log_odds.append(lp["spam"] - lp["ham"])
        else:  # before both classes are known
            log_odds.append(0.0)
        model.learn_one(x, label)
    truth = np.array([label == "spam" for label in y])
    return {
        "one_minus_auc_pct": 100 * (1 - scoring.roc_auc(truth, np.array(log_odds))),
        "log_loss": scoring.log_loss(log_p_truth),
    }


def test_the_daemons_default_is_the_documented_mail_preset():
    mail = {
        "alpha": 0.12, "repeated_words": "binary", "top_k": None, "temperature": 1.0,
        "complement": False, "tf": "raw", "idf": True, "length_norm": True, "min_spread": 0.5,
        "spread_weight": 0.7, "combining": "nb", "robinson_s": 0.0178, "robinson_x": 0.52,
        "min_dev": 0.375, "n_buckets": None,
    }
    assert make_model("multinomial", preset="mail").options() == mail
    # config.toml, the daemon and streamnb evaluate build their model with build_pipeline
    assert build_pipeline({}, {}).model.options() == mail
    assert build_pipeline({"kind": "multinomial"}, {}).model.options() == mail
    assert build_pipeline({"preset": "textbook"}, {}).model.options() == MultinomialNB().options()


def test_the_classes_defaults_are_the_textbook_models():
    assert MultinomialNB().options() == make_model("multinomial").options() == {
        **TEXTBOOK_OPTIONS, "robinson_s": 0.0178, "robinson_x": 0.52, "min_dev": 0.375,
        "n_buckets": None,
    }
    assert BernoulliNB().options() == {"alpha": 1.0, "top_k": None, "temperature": 1.0,
                                       "n_buckets": None}


def test_default_ranks_and_calibrates_better_than_plain_nb(sms_stream):
    default = prequential(make_model("multinomial", preset="mail"), sms_stream)
    plain = prequential(MultinomialNB(), sms_stream)
    assert default["one_minus_auc_pct"] < plain["one_minus_auc_pct"]
    assert math.isfinite(plain["log_loss"])
    assert default["log_loss"] < 0.8 * plain["log_loss"]


def test_predict_proba_is_what_the_ranking_uses(sms_stream):
    # The daemon publishes predict_proba_one; the evaluator ranks by predict_log_proba_one.
    X, y = sms_stream
    model = make_model("multinomial", preset="mail")
    model.learn_many(X[:500], y[:500])
    for x in X[500:520]:
        proba, log_proba = model.predict_proba_one(x), model.predict_log_proba_one(x)
        assert proba == pytest.approx({c: math.exp(v) for c, v in log_proba.items()})


def test_every_header_field_with_a_star():
    raw = b"X-Campaign: Summer Blast\nSubject: hi\n\nbody words"
    tokens = Featurizer(FeaturizerOptions(header_fields=["*"])).from_raw(raw).tokens
    assert {"x-campaign:summer", "x-campaign:blast", "subject:hi"} <= set(tokens)
    assert "x-campaign:summer" not in Featurizer(FeaturizerOptions()).from_raw(raw).tokens
