"""The tokenizer's rules, one test (or a few) per rule."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.features import Featurizer, FeaturizerOptions, Tokenizer
from streamnb.features.tokenize import url_hosts

SEED_003 = "我司可办理正规发票（保真）17%增值税发票点数优惠！"


def count(text: str, **options) -> dict[str, int]:
    return dict(Tokenizer(FeaturizerOptions(**options)).count(text))


@pytest.mark.parametrize("segmenter", ["rjieba", "jieba"])
def test_seed_003_sentence_is_segmented_into_words(segmenter):
    words = Tokenizer(FeaturizerOptions(cjk_segmenter=segmenter)).words(SEED_003)
    for word in ("发票", "增值税", "优惠", "正规"):
        assert word in words
    assert words.count("发票") == 2
    assert not any(c in "".join(words) for c in "（）！%")  # punctuation is not a word


def test_chinese_characters_segmenter_splits_into_single_characters():
    words = Tokenizer(FeaturizerOptions(cjk_segmenter="chars", cjk_runs=False)).words("正规发票")
    assert words == ["正", "规", "发", "票"]


def test_chinese_mixed_with_latin_keeps_the_order_of_both():
    words = Tokenizer(FeaturizerOptions(cjk_runs=False)).words("请访问www网站购买iPhone手机")
    assert words == ["请", "访问", "www", "网站", "购买", "iphone", "手机"]
    # by default each run of several words is also kept whole, after its words
    assert Tokenizer().words("请访问www网站购买iPhone手机") == [
        "请", "访问", "请访问", "www", "网站", "购买", "网站购买", "iphone", "手机"
    ]


def test_min_cjk_token_len_drops_single_characters():
    words = Tokenizer(FeaturizerOptions(min_cjk_token_len=2)).words(SEED_003)
    assert "可" not in words and "发票" in words


def test_words_are_lowercased_unless_told_not_to():
    assert count("Free FREE free") == {"free": 3}
    assert count("Free FREE", lowercase=False) == {"Free": 1, "FREE": 1}


def test_unicode_words_in_other_scripts():
    assert count("Привет, МИР! Grüße façade") == {
        "привет": 1,
        "мир": 1,
        "grüße": 1,
        "façade": 1,
    }


def test_punctuation_and_underscores_split_words_and_rules_are_not_words():
    assert count("don't e-mail ________ snake_case", word_joiners="") == {
        "don": 1,
        "mail": 1,
        "snake_case": 1,
    }


def test_length_bounds_drop_short_words_and_whole_long_runs():
    text = "a an the " + "x" * 41 + " " + "y" * 40
    assert count(text) == {"an": 1, "the": 1, "y" * 40: 1}
    assert count(text, min_token_len=3, max_token_len=5) == {"the": 1}
    assert count("a b", min_token_len=1) == {"a": 1, "b": 1}


def test_numbers_keep_drop_shape():
    text = "call 555 1234 win $100 mp3 x86"
    assert count(text) == {
        "call": 1,
        "555": 1,
        "1234": 1,
        "win": 1,
        "100": 1,
        "$100": 1,
        "mp3": 1,
        "x86": 1,
    }
    assert count(text, numbers="drop") == {"call": 1, "win": 1, "mp3": 1, "x86": 1}
    shaped = count(text, numbers="shape")
    assert shaped["000"] == 2 and shaped["0000"] == 1 and shaped["$000"] == 1  # 555, 100
    assert "mp3" in shaped and "555" not in shaped


def test_url_gives_host_and_domain_tokens():
    tokens = count("see https://user:pw@Mail.Example.co.uk:8080/path?q=1 now")
    assert tokens["url:mail.example.co.uk"] == 1
    assert tokens["url:example.co.uk"] == 1
    assert "path" in tokens  # the URL's words are still words of the text


def test_url_bare_www_ip_and_not_email_or_unknown_schemes():
    tokens = count("www.shop.com http://10.0.0.1/x mailto:a@www.b.com gopher://c.org")
    assert tokens["url:www.shop.com"] == 1 and tokens["url:shop.com"] == 1
    assert tokens["url:ip"] == 1 and tokens["url:10.0.0.1"] == 1
    assert not any(t.startswith("url:") and "b.com" in t for t in tokens)
    assert "url:c.org" not in tokens


def test_url_tokens_can_be_switched_off():
    assert not any(t.startswith("url:") for t in count("http://a.com", url_tokens=False))


def test_stop_words_builtin_and_custom():
    text = "the offer of the year 的 发票"
    assert count(text, stop_lists=["english"]) == {"offer": 1, "year": 1, "的": 1, "发票": 1}
    assert count(text, stop_lists=["english", "chinese"], stop_words=["Offer"]) == {
        "year": 1,
        "发票": 1,
    }
    with pytest.raises(ValueError, match="klingon"):
        Tokenizer(FeaturizerOptions(stop_lists=["klingon"]))


def test_bigrams_pair_adjacent_kept_words():
    assert count("cheap the pills", stop_lists=["english"], bigrams=True) == {
        "cheap": 1,
        "pills": 1,
        "cheap pills": 1,
    }
    assert count("cheap pills") == {"cheap": 1, "pills": 1}  # off by default


def test_header_tokens_are_prefixed_by_field():
    raw = (
        b"From: Big Winner <Promo@Mail.Example.com>\n"
        b"To: you@example.org\n"
        b"Subject: FREE money\n"
        b"X-Mailer: BulkMailer 2.0\n\n"
        b"hello"
    )
    tokens = Featurizer().from_raw(raw).tokens
    for token in (
        "subject:free",
        "subject:money",
        "from:example.com",
        "from:mail.example.com",
        "from:promo@mail.example.com",
        "from:big",
        "from:winner",
        "to:example.org",
        "x-mailer:bulkmailer",
    ):
        assert tokens[token] == 1, token
    assert "free" not in tokens  # subject words are only counted as subject words
    assert "from:promo" not in tokens  # the address is not split into words as well


def test_header_fields_option_picks_the_headers():
    raw = b"Subject: hi there\nX-Spam-Flag: YES\nKeywords: cheap\n\nbody"
    tokens = Featurizer(FeaturizerOptions(header_fields=["keywords"])).from_raw(raw).tokens
    assert "keywords:cheap" in tokens and not any(t.startswith("subject:") for t in tokens)
    no_words = FeaturizerOptions(header_tokens=False)  # the layout tokens are their own options
    tokens = Featurizer(no_words).from_raw(raw).tokens
    assert {t for t in tokens if t.startswith(("subject:", "x-spam-flag:", "keywords:"))} == set()
    assert "order:^>subject>x-spam-flag" in tokens
    no_headers = FeaturizerOptions(header_tokens=False, header_order=0, header_shapes=False)
    tokens = Featurizer(no_headers).from_raw(raw).tokens
    assert dict(tokens) == {"body": 1, "mime:text/plain": 1}


def test_mime_tokens_name_types_charsets_and_attachment_extensions():
    raw = (
        b"Content-Type: multipart/mixed; boundary=b\n\n--b\n"
        b"Content-Type: text/plain; charset=koi8-r\n\nhi\n--b\n"
        b'Content-Type: application/octet-stream; name="setup.EXE"\n\nMZ\n--b--\n'
    )
    tokens = Featurizer().from_raw(raw).tokens
    for token in (
        "mime:multipart/mixed",
        "mime:text/plain",
        "charset:koi8-r",
        "attach:application/octet-stream",
        "attach:.exe",
    ):
        assert tokens[token] == 1, token


def test_from_tokens_counts_and_lowercases_only():
    f = Featurizer()
    assert dict(f.from_tokens(["Win", "win", "a", "http://x.com"]).tokens) == {
        "win": 2,
        "a": 1,
        "http://x.com": 1,
    }
    assert dict(Featurizer(FeaturizerOptions(lowercase=False)).from_tokens(["A", "a"]).tokens) == {
        "A": 1,
        "a": 1,
    }


def test_from_text_uses_the_same_tokenizer_without_headers():
    tokens = Featurizer().from_text("Subject: WINNER! Call 09061701461 now www.win.com").tokens
    assert tokens["subject"] == 1 and tokens["winner"] == 1 and tokens["url:www.win.com"] == 1
    assert not any(t.startswith(("subject:", "mime:")) for t in tokens)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_tokens_respect_the_bounds_and_lowercasing(text):
    options = FeaturizerOptions(min_token_len=3, max_token_len=12)
    for token in Tokenizer(options).count(text, urls=False):
        word = token.removeprefix("$")
        assert token == token.lower()
        assert 1 <= len(word) <= 12
        assert not any(c.isspace() for c in token)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=40))
def test_from_tokens_total_count_equals_input_length(tokens):
    result = Featurizer().from_tokens(tokens)
    assert sum(result.tokens.values()) == len(tokens)


_MIXED = st.text(
    alphabet=st.sampled_from(list("发票优惠正规增值税我司办理ab Z9$.，！\n_é")), max_size=200
)


@settings(max_examples=300, deadline=None)
@given(_MIXED)
def test_fast_count_equals_counting_the_ordered_words(text):
    tokenizer = Tokenizer()
    expected = Counter(tokenizer.words(text))
    expected.update(re.findall(r"\$\d+", text))  # money tokens come on top of the words
    assert tokenizer.count(text) == expected
    # the same words, cut in order when there are too many
    assert sum(tokenizer.count(text, max_tokens=3).values()) <= 3 + text.count("$")


_ASCII_PIECES = st.text(alphabet=st.sampled_from(list("aZ09_-'$. \t\n\x1f/@")), max_size=120)
_WORD_RULES = [
    FeaturizerOptions(),
    FeaturizerOptions(word_joiners=""),
    FeaturizerOptions(word_joiners="'$-", join_digits=True),
    FeaturizerOptions(lowercase=False, min_token_len=1, max_token_len=3),
    FeaturizerOptions(word_joiners="", min_token_len=0, max_token_len=0),
]


@settings(max_examples=300, deadline=None)
@given(_ASCII_PIECES, st.sampled_from(range(len(_WORD_RULES))))
def test_ascii_chunking_finds_the_same_words_as_the_word_regex(text, rules):
    """ASCII text is split by translate/split, not the regex: the counts must not change."""
    tokenizer = Tokenizer(_WORD_RULES[rules])
    expected = Counter(tokenizer.words(text))  # the regex, in order
    assert tokenizer.count(text, urls=False) - Counter(re.findall(r"\$\d+", text)) == expected
    assert Counter(tokenizer.prefixed("subject:", text)) == Counter(
        "subject:" + word for word in expected.elements()
    )


def _url_hosts_by_splitting(text):
    """url_hosts as first written: the text split at each marker, each piece matched alone."""
    from streamnb.features.tokenize import _HOST_RE, _NOT_BEFORE_WWW, _SCHEMES, _URL_HOST_RE

    hosts = []
    pieces = text.split("://")
    for before, after in zip(pieces, pieces[1:], strict=False):
        if before[-5:].lower().endswith(_SCHEMES) and (found := _URL_HOST_RE.match(after)):
            hosts.append(found.group(1).lower())
    pieces = text.replace("WWW.", "www.").split("www.")
    for before, after in zip(pieces, pieces[1:], strict=False):
        if (not before or before[-1] not in _NOT_BEFORE_WWW) and (found := _HOST_RE.match(after)):
            hosts.append("www." + found.group().lower())
    return hosts


_URL_PIECES = ["http", "HTTPS", "ftp", "://", "www.", "WWW.", "a.b", "x", ".", "-", "@", "/"]
_URL_PIECES += [" ", "\n", "1.2.3.4", "com", "user:pw@"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_URL_PIECES), max_size=25))
def test_url_hosts_are_found_between_markers_as_if_split_there(pieces):
    text = "".join(pieces)
    assert url_hosts(text) == _url_hosts_by_splitting(text)
