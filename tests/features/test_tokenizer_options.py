"""Tokenizer options that decide which strings become words: joiners and Chinese runs."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.features.tokenize import Tokenizer


def words(text: str, **options) -> list[str]:
    return Tokenizer(FeaturizerOptions(**options)).words(text)


def test_default_joins_hyphenated_words_but_not_numbers_or_contractions():
    assert words("Don't click-here: call 555-1234 or e-mail") == [
        "don", "click-here", "call", "555", "1234", "or", "e-mail"
    ]


def test_joiners_keep_contractions_and_currency_inside_words():
    assert words("Don't click-here for US$500 -- now!", word_joiners="'$-", join_digits=True) == [
        "don't", "click-here", "for", "us$500", "now"
    ]


def test_without_join_digits_a_joiner_before_a_digit_splits():
    assert words("US$500 it's x-1 a-b", word_joiners="'$-") == ["us", "500", "it's", "a-b"]


def test_joiners_never_start_or_end_a_word():
    assert words("'quoted' -dash- $5 end-", word_joiners="'$-", join_digits=True) == [
        "quoted", "dash", "end"
    ]


def test_empty_joiners_split_at_punctuation_as_before():
    assert words("Don't click-here", word_joiners="") == ["don", "click", "here"]


def test_joined_words_obey_the_length_bounds_as_a_whole():
    long_word = "-".join(["abcdefghij"] * 5)  # 54 characters
    assert words(f"a {long_word} ok", max_token_len=40) == ["ok"]
    assert words("x-y a b", min_token_len=2) == ["x-y"]


def test_joiners_apply_to_non_ascii_text_and_next_to_chinese():
    assert words("café-bar 不要 e-mail") == ["café-bar", "不要", "e-mail"]


def test_joiners_must_be_punctuation():
    with pytest.raises(ValueError, match="word_joiners"):
        FeaturizerOptions(word_joiners="a-")
    with pytest.raises(ValueError, match="word_joiners"):
        FeaturizerOptions(word_joiners=" ")


@given(st.text(alphabet="ab1'-$ .,", max_size=40), st.booleans())
def test_every_joined_word_is_letters_and_joiners_with_letters_at_both_ends(text, digits):
    for word in words(text, word_joiners="'$-", join_digits=digits):
        assert word[0].isalnum() and word[-1].isalnum()
        assert set(word) <= set("ab1'-$")
        assert 2 <= len(word) <= 40


def test_cjk_runs_add_the_whole_run_besides_its_segmented_words():
    text = "我司可办理正规发票"
    segmented = words(text, cjk_runs=False)
    assert len(segmented) > 1
    assert words(text, cjk_runs=True) == segmented + [text]


def test_the_default_keeps_whole_han_runs():
    assert FeaturizerOptions().cjk_runs
    text = "我司可办理正规发票"
    assert Featurizer().from_text(text).tokens[text] == 1


def test_cjk_runs_add_nothing_for_a_run_that_is_one_word():
    assert words("发票 优惠", cjk_runs=True) == words("发票 优惠", cjk_runs=False)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x33FF),
               max_size=60))
def test_cjk_runs_change_nothing_in_text_without_han(text):
    # Text without Han characters keeps the fast path: the same counts either way.
    on = Featurizer(FeaturizerOptions(cjk_runs=True)).from_text(text).tokens
    off = Featurizer(FeaturizerOptions(cjk_runs=False)).from_text(text).tokens
    assert on == off


def test_cjk_bigrams_add_each_adjacent_pair_of_han_characters():
    assert words("正规发票", cjk_bigrams=True, cjk_runs=False, cjk_segmenter="chars") == [
        "正", "规", "发", "票", "正规", "规发", "发票"
    ]


def test_address_words_also_tokenize_the_address_parts():
    raw = b"From: John <john.doe@mail.example.com>\n\nhello"
    plain = Featurizer(FeaturizerOptions()).from_raw(raw).tokens
    both = Featurizer(FeaturizerOptions(address_words=True)).from_raw(raw).tokens
    assert "from:john.doe@mail.example.com" in plain and "from:doe" not in plain
    assert {"from:doe", "from:mail", "from:john.doe@mail.example.com"} <= set(both)
