"""OSB word pairs (``osb_window``): the tokens, and the model statistics still exact with them."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.features.tokenize import Tokenizer, osb_pairs
from streamnb.models import make_model


def counts(text: str, **options) -> Counter:
    return Tokenizer(FeaturizerOptions(**options)).count(text)


def test_osb_pairs_of_a_short_text_worked_by_hand():
    # "buy cheap pills now today", window 5: each word with each of the next four words,
    # one "_" per word between them; single words kept beside the pairs.
    assert counts("Buy cheap pills now, today!", osb_window=5) == Counter({
        "buy": 1, "cheap": 1, "pills": 1, "now": 1, "today": 1,
        "buy cheap": 1, "cheap pills": 1, "pills now": 1, "now today": 1,
        "buy _ pills": 1, "cheap _ now": 1, "pills _ today": 1,
        "buy _ _ now": 1, "cheap _ _ today": 1,
        "buy _ _ _ today": 1,
    })


def test_a_repeated_pair_is_counted_each_time_and_distance_keeps_pairs_apart():
    assert counts("win cash win cash", osb_window=3) == Counter({
        "win": 2, "cash": 2, "win cash": 2, "cash win": 1, "win _ win": 1, "cash _ cash": 1,
    })


def test_window_two_is_the_bigrams():
    text = "Get $100 NOW, at http://www.Cheap-Pills.com/buy! 发票 and more"
    assert counts(text, osb_window=2) == counts(text, bigrams=True)


def test_pairs_skip_stop_words_and_short_words_like_the_words_do():
    # "a" is too short and "the" a stop word: neither is a word, so neither is between.
    assert osb_pairs(["buy", "pills"], 5) == ["buy pills"]
    assert counts("buy the a pills", osb_window=5, stop_words=["the"]) == Counter(
        {"buy": 1, "pills": 1, "buy pills": 1}
    )


def test_pairs_come_from_the_body_words_of_a_mail_not_from_header_tokens():
    raw = b"Subject: cheap pills\nFrom: a@example.com\n\nbuy now today\n"
    tokens = Featurizer(FeaturizerOptions(osb_window=3)).from_raw(raw).tokens
    assert {"buy now", "now today", "buy _ today"} <= set(tokens)
    # no pair of prefixed header tokens (a layout token's shape has spaces of its own)
    assert not [t for t in tokens if ":" in t and " " in t and not t.startswith("shape:")]


def test_max_tokens_bounds_the_words_the_pairs_are_made_of():
    tok = Tokenizer(FeaturizerOptions(osb_window=5))
    cut, n_words = tok.count_words("one two three four five six", max_tokens=4)
    assert n_words == 4
    assert cut == counts("one two three four", osb_window=5)


@pytest.mark.parametrize("value", [1, -1, True, 2.5, "5"])
def test_a_bad_window_is_refused_naming_the_option(value):
    with pytest.raises(ValueError, match="osb_window"):
        FeaturizerOptions(osb_window=value)


def test_off_by_default():
    assert FeaturizerOptions().osb_window == 0
    assert not [t for t in counts("buy cheap pills now") if " " in t]


# --- the models are token-agnostic: counts, unlearn and merge stay exact with pairs on -------

WORDS = ["win", "cash", "now", "lunch", "发票", "the", "x1"]
texts = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)
streams = st.lists(st.tuples(texts, st.sampled_from(["ham", "spam"])), max_size=15)
windows = st.integers(2, 6)
MODEL_OPTIONS = [{"repeated_words": "count"}, {}]  # occurrence counts; the default (binary)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def learned(options: dict, window: int, stream) -> object:
    tokenizer = Tokenizer(FeaturizerOptions(osb_window=window))
    model = make_model("multinomial", **options)
    for text, label in stream:
        model.learn_one(tokenizer.count(text), label)
    return model


@SETTINGS
@given(windows, streams)
def test_the_model_holds_exactly_the_pair_counts_counted_by_hand(window, stream):
    model = learned({"repeated_words": "count"}, window, stream)
    expected: dict[str, Counter] = {"ham": Counter(), "spam": Counter()}
    for text, label in stream:
        words = [w for w in text.split() if len(w) >= 2]
        expected[label].update(words)
        for d in range(1, window):
            expected[label].update(
                " ".join([a, *["_"] * (d - 1), b]) for a, b in zip(words, words[d:], strict=False)
            )
    state = model.to_state()
    for c, label in enumerate(state["classes"]):
        got = {t: n for t, n in zip(state["vocabulary"], state["counts"][c], strict=True) if n}
        assert got == dict(expected[label])


@SETTINGS
@given(st.sampled_from(MODEL_OPTIONS), windows, streams, streams, texts)
def test_merge_and_unlearn_stay_exact_with_pairs(options, window, a, b, probe):
    one_stream = learned(options, window, a + b)
    merged = learned(options, window, a) + learned(options, window, b)
    assert merged.to_state() == one_stream.to_state()
    x = Tokenizer(FeaturizerOptions(osb_window=window)).count(probe)
    assert merged.predict_log_proba_one(x) == one_stream.predict_log_proba_one(x)
    before = one_stream.to_state()
    one_stream.learn_one(x, "spam")
    one_stream.unlearn_one(x, "spam")
    assert one_stream.to_state() == before
