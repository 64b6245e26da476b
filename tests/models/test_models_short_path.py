"""The plain-Python path for short messages gives what the numpy path gives: the same counts
exactly, the same scores to rounding."""

from __future__ import annotations

import math
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.models import make_model
from streamnb.models._text import SHORT_MESSAGE_TOKENS
from streamnb.models.presets import MAIL

# Enough words that a message can be longer than the short-message limit.
WORDS = [f"w{i}" for i in range(3 * SHORT_MESSAGE_TOKENS)] + ["发票", "naïve"]
LABELS = ["ham", "spam", "eggs"]



def _message(n: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    return {word: rng.randint(1, 4) for word in rng.sample(WORDS, n)}


# Any length from empty to twice the limit; drawn from a seed, which is fast to generate.
messages = st.builds(_message, st.integers(0, 2 * SHORT_MESSAGE_TOKENS), st.integers(0, 2**16))
# (message, label, unlearn?): an unlearn event takes back an earlier example of the stream.
events = st.lists(st.tuples(messages, st.sampled_from(LABELS), st.booleans()), max_size=30)
# The multinomial option sets are on top of the "mail" preset (binary counts, idf, length_norm,
# min_spread 0.5); the class defaults (the textbook model) are a set of their own.
_ON_MAIL = [
    {"repeated_words": "count"},
    {"repeated_words": "mixed", "alpha": 0.5},
    {"repeated_words": "binary", "alpha": 0.1},
    {"top_k": 5},
    {},  # the mail preset itself
    {"tf": "log", "idf": True, "length_norm": False, "min_spread": 0.0,
     "repeated_words": "count", "temperature": 2.5},
    {"min_spread": 0.3, "top_k": 3, "idf": False},
    {"spread_weight": 0.0},  # the mail preset before spread_weight
    {"spread_weight": 2.0, "min_spread": 0.0, "idf": False},
    {"complement": True},  # left to the array path
    {"combining": "robinson"},  # left to the array path
]
configs = st.sampled_from([
    *(("multinomial", {**MAIL, **options}) for options in _ON_MAIL),
    ("multinomial", {}),  # the class defaults: the textbook model
    ("bernoulli", {}),
    ("bernoulli", {"alpha": 0.25, "top_k": 4, "temperature": 0.5}),
])



def pair(config):
    kind, options = config
    short, array = make_model(kind, **options), make_model(kind, **options)
    array._short_limit = 0  # every message takes the numpy path
    return short, array


def replay(model, stream):
    learned = []
    for x, y, unlearn in stream:
        if unlearn and learned:
            model.unlearn_one(*learned.pop(0))
        else:
            model.learn_one(x, y)
            learned.append((x, y))


def assert_same_scores(a: dict, b: dict):
    """Equal to rounding: the short path sums with math.fsum and logs with libm, the array
    path sums pairwise and logs with numpy, so the last bits may differ."""
    assert a.keys() == b.keys()
    for label in a:
        assert math.isclose(a[label], b[label], rel_tol=1e-12, abs_tol=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, events, st.lists(messages, min_size=1, max_size=6))
def test_short_and_array_paths_agree_on_messages_of_every_length(config, stream, probes):
    short, array = pair(config)
    replay(short, stream)
    replay(array, stream)
    assert short.to_state() == array.to_state()
    assert short.vocabulary_size == array.vocabulary_size
    assert short._n_negative == array._n_negative
    used = len(short._keys)
    assert np.array_equal(short._nnz[:used], array._nnz[:used])
    for x in probes:
        assert_same_scores(short.predict_log_proba_one(x), array.predict_log_proba_one(x))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, events, events, st.lists(messages, min_size=1, max_size=4))
def test_a_merged_model_scores_short_messages_like_one_stream(config, a, b, probes):
    a = [(x, y, False) for x, y, _ in a]  # learning only: a slice unlearns nothing of another
    b = [(x, y, False) for x, y, _ in b]
    one, _ = pair(config)
    replay(one, a + b)
    left, _ = pair(config)
    right, _ = pair(config)
    replay(left, a)
    replay(right, b)
    merged = right + left
    for x in probes:
        assert merged.predict_log_proba_one(x) == one.predict_log_proba_one(x)


def test_the_short_path_steps_aside_for_inputs_it_does_not_take():
    short, array = pair(("multinomial", {}))
    for model in (short, array):
        model.learn_many([{"cash": 2, "win": 1}, {"lunch": 1}], ["spam", "ham"])
    # float counts, zero counts and non-str keys: the array path decides (and validates)
    for x in ({"cash": 1.5}, {"cash": 0, "lunch": 1}, {"cash": True}, {7: 1, "win": 1}):
        assert short.predict_log_proba_one(x) == array.predict_log_proba_one(x)
    for bad in ({"cash": -1}, {"cash": math.nan}, {"cash": None}):
        for model in (short, array):
            try:
                model.learn_one(bad, "spam")
            except (TypeError, ValueError) as error:
                assert type(error).__name__ == "ModelInputError"
            else:
                raise AssertionError(f"{bad} was learned")
    assert short.to_state() == array.to_state()
