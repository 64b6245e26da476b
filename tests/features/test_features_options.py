"""FeaturizerOptions as config.toml's [features] table, and the numeric meta-features."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.features import (
    META_FEATURE_NAMES,
    Featurizer,
    FeaturizerOptions,
    stable_bucket,
)
from streamnb.features.meta import SPAMBASE_NAMES


def test_options_from_a_toml_table():
    table = tomllib.loads(
        """
        [features]
        bigrams = true
        min_token_len = 3
        stop_lists = ["english", "chinese"]
        header_fields = ["Subject", "From"]
        max_seconds = 0.5
        numbers = "shape"
        """
    )["features"]
    options = FeaturizerOptions(**table)
    assert options.bigrams and options.min_token_len == 3
    assert options.stop_lists == ("english", "chinese")  # lists are kept as tuples
    assert options.header_fields == ("subject", "from")  # field names are case-blind
    assert hash(options) == hash(FeaturizerOptions(**table))


def test_every_default_is_a_plain_toml_value():
    for field in dataclasses.fields(FeaturizerOptions):
        value = getattr(FeaturizerOptions(), field.name)
        assert isinstance(value, bool | int | float | str | tuple), field.name
        if isinstance(value, tuple):
            assert all(isinstance(v, str) for v in value), field.name


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="colour"):
        FeaturizerOptions(colour="red")


@pytest.mark.parametrize(
    "bad",
    [
        {"numbers": "count"},
        {"on_limit": "explode"},
        {"cjk_segmenter": "pkuseg"},
        {"html": "lynx"},
        {"max_bytes": -1},
        {"max_parts": True},
        {"min_token_len": 50},
        {"default_charset": "no-such-codec"},
    ],
)
def test_bad_values_are_value_errors(bad):
    with pytest.raises(ValueError):
        FeaturizerOptions(**bad)


@pytest.mark.parametrize("bad", [{"stop_words": "the"}, {"header_fields": ["subject", 3]}])
def test_lists_must_be_lists_of_strings(bad):
    with pytest.raises(TypeError):
        FeaturizerOptions(**bad)


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FeaturizerOptions().bigrams = True


# --- meta-features ------------------------------------------------------------------------------


def test_numeric_is_none_unless_asked_for():
    assert Featurizer().from_raw(b"Subject: x\n\ny").numeric is None
    assert Featurizer(FeaturizerOptions(meta_features=True)).from_tokens(["a"]).numeric is None


def test_meta_features_follow_spambase_definitions():
    raw = (
        b"Subject: FREE Money!!\nTo: a@x.com, b@y.com\nContent-Type: multipart/alternative; "
        b"boundary=q\n\n--q\nContent-Type: text/html\n\n<p>FREE money for YOU; call now! "
        b'<a href="http://1.2.3.4/x">here</a> <a href="http://shop.com/">shop</a>'
        b'<img src="http://shop.com/i.gif"></p>\n--q--\n'
    )
    result = Featurizer(FeaturizerOptions(meta_features=True)).from_raw(raw)
    named = dict(zip(META_FEATURE_NAMES, result.numeric, strict=True))
    assert len(SPAMBASE_NAMES) == 57 and META_FEATURE_NAMES[:57] == SPAMBASE_NAMES
    text = "FREE money for YOU; call now!  here   shop"  # the visible text
    words = ["free", "money", "for", "you", "call", "now", "here", "shop"]
    assert named["word_freq_free"] == pytest.approx(100 / len(words))
    assert named["word_freq_money"] == pytest.approx(100 / len(words))
    assert named["word_freq_you"] == pytest.approx(100 / len(words))
    assert named["word_freq_make"] == 0
    assert named["char_freq_;"] == pytest.approx(100 / len(text))
    assert named["char_freq_!"] == pytest.approx(100 / len(text))
    assert named["capital_run_length_longest"] == 4  # FREE
    assert named["capital_run_length_total"] == 7  # FREE + YOU
    assert named["capital_run_length_average"] == pytest.approx(3.5)
    assert named["n_html_parts"] == 1 and named["html_only"] == 1
    assert named["n_urls"] == 3 and named["n_url_hosts"] == 2 and named["n_ip_urls"] == 1
    assert named["n_images"] == 1 and named["n_recipients"] == 2
    assert named["subject_exclamations"] == 2
    assert named["subject_capital_share"] == pytest.approx(5 / 9)
    assert named["log_bytes"] == pytest.approx(math.log1p(len(raw)))


def test_meta_features_of_plain_text():
    result = Featurizer(FeaturizerOptions(meta_features=True)).from_text("WIN £1000 now!!!")
    named = dict(zip(META_FEATURE_NAMES, result.numeric, strict=True))
    assert named["n_text_parts"] == 1 and named["n_html_parts"] == 0
    assert named["non_ascii_share"] == pytest.approx(1 / 16)
    assert named["char_freq_!"] == pytest.approx(300 / 16)


# --- stable hashing -------------------------------------------------------------------------------


def test_hash_buckets_are_the_same_in_another_process():
    tokens = ["subject:free", "发票", "url:example.com"]
    here = [stable_bucket(t, 1 << 18) for t in tokens]
    code = (
        "from streamnb.features import stable_bucket;"
        f"print([stable_bucket(t, 1 << 18) for t in {tokens!r}])"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(here)


def test_hash_buckets_bound_the_vocabulary_and_keep_the_counts():
    raw = b"Subject: cheap pills\n\ncheap cheap pills http://pills.example.com/"
    plain = Featurizer().from_raw(raw).tokens
    hashed = Featurizer(FeaturizerOptions(hash_buckets=8)).from_raw(raw).tokens
    assert sum(hashed.values()) == sum(plain.values())
    assert all(t.startswith("#") and 0 <= int(t[1:]) < 8 for t in hashed)
    assert hashed[f"#{stable_bucket('cheap', 8)}"] >= plain["cheap"]
    tokens = Featurizer(FeaturizerOptions(hash_buckets=1 << 20)).from_tokens(["a", "A"]).tokens
    assert dict(tokens) == {f"#{stable_bucket('a', 1 << 20)}": 2}


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ABZaz 9É\n", max_size=200))
def test_capital_runs_match_the_regex_definition(text):
    from streamnb.features.meta import _capital_runs

    runs = [len(r) for r in re.findall(r"[A-Z]+", text)]
    assert _capital_runs(text.encode()) == (len(runs), sum(runs), max(runs, default=0))
