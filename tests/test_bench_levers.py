"""The lever benches compare what they say: their baseline is streamnb's default filter."""

import math

import numpy as np

from bench.bench_pairs import replay_pairs
from bench.bench_training import replay_thick
from bench.peers.streams import DEFAULT_DATA, STREAMS, load
from streamnb.evaluation.options import Tables
from streamnb.evaluation.replay import class_scores, replay
from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.models import make_model

LIMIT = 300


def default_scores() -> np.ndarray:
    messages = load(STREAMS["sms"], DEFAULT_DATA, LIMIT)
    pipeline = Tables.load(None).with_overrides([]).build_pipeline()
    pipeline.model = make_model("multinomial", preset="mail")  # the built-in default filter
    pipeline.featurizer = Featurizer(FeaturizerOptions())
    return class_scores(replay(pipeline, messages).log_proba, "spam")


def test_pairs_weight_zero_is_the_default_filter_and_pairs_are_what_osb_adds():
    run = replay_pairs("sms", window=3, limit=LIMIT)
    np.testing.assert_allclose(run["words"], np.clip(default_scores(), -1e9, 1e9))
    assert run["vocabulary_pairs"] > run["vocabulary_words"]
    assert np.any(run["pairs"] != 0)


def test_thick_threshold_infinity_learns_everything_like_the_default():
    messages = load(STREAMS["sms"], DEFAULT_DATA, LIMIT)
    featurizer = Featurizer(FeaturizerOptions())
    tokens = [featurizer.from_text(m.text).tokens for m in messages]
    spam = np.array([m.label == "spam" for m in messages])
    everything = replay_thick(tokens, spam, math.inf)
    assert everything["learnt"] == LIMIT
    thick = replay_thick(tokens, spam, 5.0)
    assert 0 < thick["learnt"] < LIMIT
    assert thick["vocabulary"] < everything["vocabulary"]
