"""The C word rules (``streamnb.features._tokens``) give exactly the tokens of the Python ones.

The pure-Python tokenizer (``Tokenizer(..., native=False)``) is the reference: every test here
runs both on the same input and compares what they give, on arbitrary text and on every message
of the shared raw corpora. The first test makes a checkout built by ``make setup`` fail when the
extension is missing, so the slow path is never measured or shipped by accident.
"""

from __future__ import annotations

import os
import tarfile
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamnb.features import (
    Featurizer,
    FeaturizerOptions,
    Tokenizer,
    featurizer,
    header_layout,
    mail,
    native,
)
from streamnb.features import tokenize as tokenize_module
from tests.features.token_digests import CORPORA, OPTION_SETS

_tokens = native._tokens
pytestmark = pytest.mark.skipif(
    _tokens is None and os.environ.get("STREAMNB_PURE_PYTHON") == "1",
    reason="STREAMNB_PURE_PYTHON=1 and the extension is not built",
)


def test_the_c_extension_is_built_and_used_unless_pure_python_is_asked_for():
    if os.environ.get("STREAMNB_PURE_PYTHON", "") not in ("", "0"):
        assert Featurizer().tokenizer._native is None
        return
    assert _tokens is not None, (
        "streamnb.features._tokens is not built: run `make setup` (pip install -e .), "
        "or set STREAMNB_PURE_PYTHON=1 to test the pure-Python featurizer"
    )
    assert native.enabled()
    assert Featurizer().tokenizer._native is not None
    assert mail._in_c is not None


def test_pure_python_is_chosen_by_the_environment(monkeypatch):
    monkeypatch.setenv("STREAMNB_PURE_PYTHON", "1")
    assert Tokenizer()._native is None
    monkeypatch.setenv("STREAMNB_PURE_PYTHON", "0")
    assert Tokenizer()._native is not None


def test_a_missing_extension_is_logged_once_as_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(native, "_tokens", None)
    monkeypatch.setattr(native, "_logged", False)
    monkeypatch.delenv("STREAMNB_PURE_PYTHON", raising=False)
    with caplog.at_level("DEBUG", logger="streamnb.features"):
        assert Tokenizer()._native is None  # the fallback: the pure-Python rules
        Tokenizer()
        with pytest.raises(RuntimeError, match="not built"):
            Tokenizer(native=True)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "not built" in warnings[0].getMessage()


# Characters that exercise the rules: joiners, "_", ASCII and other digits (isdecimal and
# not), letters of several scripts, combining marks, Han, separators, surrogates, the largest
# code points.
_INTERESTING = (
    "aZ09_-'$.:@/ \t\n\xa0\u2019"
    "éßİıǅΣσς\u0301\u0308٣७²½ⅫⅠ〇"
    "ж中文字\U00020000ｱ한ไทย\u200d\ufeff\ud800\udfff\U0010ffff\U0001f600"
)
any_code_point = st.characters(exclude_categories=())  # surrogates too
texts = st.text(alphabet=st.one_of(st.sampled_from(_INTERESTING), any_code_point), max_size=300)
word_options = st.fixed_dictionaries(
    {
        "word_joiners": st.sampled_from(["", "-", "'$-", "-.", "\u2013", "-@/"]),
        "join_digits": st.booleans(),
        "lowercase": st.booleans(),
        "min_token_len": st.integers(0, 4),
        "max_token_len": st.integers(4, 12),
    }
)


def pair(**options) -> tuple[Tokenizer, Tokenizer]:
    opts = FeaturizerOptions(**options)
    return Tokenizer(opts, native=True), Tokenizer(opts, native=False)


@settings(max_examples=400, deadline=None)
@given(text=texts, options=word_options)
@example(text="__init__ x_y 555-1234 click-here- e-mail don't", options={})
@example(text="a" * 41 + " " + "b-" * 30 + "c", options={})
@example(text="İstanbul ǅemal ΣΑΣ", options={"max_token_len": 40})
@example(text="x²y ٣٤ a-٣ a-² ⅫⅠ-b", options={"join_digits": True})
@example(text="ab-²c ab-٣c ab-Ⅻc", options={})  # ² and Ⅻ are digits, not decimals: letters here
def test_words_and_counts_equal_the_python_rules_on_any_text(text, options):
    native, python = pair(**options)
    assert native.words(text) == python.words(text)
    assert native.count(text) == python.count(text)
    assert native.count_words(text, 5) == python.count_words(text, 5)  # cut in order


@settings(max_examples=300, deadline=None)
@given(prefix=st.sampled_from(["subject:", "x-mailer:", "", "é:", "中:"]), text=texts,
       options=word_options)
def test_prefixed_words_equal_the_python_rules(prefix, text, options):
    native, python = pair(**options)
    assert native.prefixed(prefix, text) == python.prefixed(prefix, text)
    counts: Counter[str] = Counter({prefix + "already": 2, "other": 1})
    expected = counts.copy()
    native.count_prefixed(prefix, text, counts)
    python.count_prefixed(prefix, text, expected)
    assert counts == expected


@settings(max_examples=100, deadline=None)
@given(text=texts)
def test_every_token_option_set_of_the_digests_counts_the_same(text):
    for options in OPTION_SETS.values():
        native, python = pair(**options)
        assert native.count(text) == python.count(text)


def python_prepared_count(options: dict, text: str) -> tuple[Counter[str], int]:
    """The Python rule the C ``count_prepared`` follows: ``_prepare``, then the word count."""
    python = Tokenizer(FeaturizerOptions(**options), native=False)
    counts = python._count_text(python._prepare(text))
    return counts, counts.total()


@settings(max_examples=500, deadline=None)
@given(text=texts, options=word_options)
@example(text="Café NAÏVE \u2019s\u2014x Ωmega \u212a \u1e9e é\u2013é", options={})
@example(text="é\u2013b", options={"word_joiners": "\u2013"})  # a separator, even as a joiner
@example(text="ΣΑΣ σ", options={"lowercase": True})  # final sigma: Python's
@example(text="İstanbul é", options={"lowercase": True})  # two code points: Python's
def test_count_prepared_is_the_prepared_text_counted(text, options):
    lowercase = FeaturizerOptions(**options).lowercase
    counts: Counter[str] = Counter()
    native = Tokenizer(FeaturizerOptions(**options), native=True)._native
    n_words = native.count_prepared(
        text, counts, tokenize_module._NON_ASCII_SEPARATORS, lowercase
    )
    if n_words is None:  # left to Python: only where str.lower() is not one for one
        assert lowercase and ("\u0130" in text or "\u03a3" in text)
        assert not counts
        return
    assert (counts, n_words) == python_prepared_count(options, text)


def test_count_prepared_lower_cases_every_code_point_as_python():
    chars = [chr(c) for c in range(0x110000) if c not in (0x130, 0x3A3)]
    lowered = [c.lower() for c in chars]
    assert all(len(c) == 1 for c in lowered)  # one for one, but the two Python prepares
    # each character between two letters, "xCx": a word with its lower-case form in the
    # middle, or two words "x" where it is no word character or a separator
    joined = " ".join("x" + c + "x" for c in chars)
    native = Tokenizer(FeaturizerOptions(min_token_len=1, max_token_len=3), native=True)._native
    counts: Counter[str] = Counter()
    assert native.count_prepared(joined, counts, tokenize_module._NON_ASCII_SEPARATORS, True)
    expected = python_prepared_count({"min_token_len": 1, "max_token_len": 3}, joined)[0]
    assert counts == expected
    with pytest.raises(ValueError, match="ASCII"):
        native.count_prepared("é", Counter(), "\xa0 ", True)


@settings(max_examples=500, deadline=None)
@given(text=texts)
@example(text="\u33ff\u3400\u4dbf\u4dc0\u4dff\u4e00\u9fff\ua000")
@example(text="\uf8ff\uf900\ufaff\ufb00\U0001ffff\U00020000\U0002ebef\U0002ebf0")
@example(text="é" * 100 + "中")  # a 2-byte str with its only Han character last
def test_has_han_equals_the_han_regex(text):
    assert _tokens.has_han(text) == tokenize_module.has_han(text)
    for char in set(text):  # each character alone, at the edges of the ranges too
        assert _tokens.has_han(char) == tokenize_module.has_han(char)


def python_money(text: str, counts: Counter) -> None:
    """The Python rule of ``_tokens.count_money``: each amount the money regex finds, counted."""
    for amount in tokenize_module._MONEY_RE.findall(text):
        counts[amount] = counts.get(amount, 0) + 1


money_texts = st.one_of(
    st.text(st.sampled_from("$$1 9a\u0663\u00b2\u2167\uff15\U0001d7ce\u4e2d\u00e9"), max_size=40),
    st.text(max_size=40),
)


@settings(max_examples=1000)
@given(text=money_texts, before=st.dictionaries(st.sampled_from(["$1", "$19", "x"]),
                                                 st.integers(1, 5)))
@example(text="$", before={})
@example(text="$$$1$", before={"$1": 2})
@example(text="é" * 50 + "$\u0663\u0664" + "$" * 3, before={})  # a 2-byte str
@example(text="\U0001d7ce$\U0001d7cf0", before={})  # a 4-byte str
def test_count_money_counts_what_the_money_regex_finds(text, before):
    in_c, in_python = Counter(before), Counter(before)
    _tokens.count_money(text, in_c)
    python_money(text, in_python)
    assert in_c == in_python and list(in_c) == list(in_python)  # the order found, too


def test_count_money_agrees_with_the_regex_on_every_code_point_after_the_dollar():
    for start in range(0, 0x110000, 0x8000):  # "$" and each code point, a block at a time
        text = "".join("$" + chr(c) for c in range(start, start + 0x8000) if c != 0x24)
        in_c, in_python = Counter(), Counter()
        _tokens.count_money(text, in_c)
        python_money(text, in_python)
        assert in_c == in_python
    with pytest.raises(TypeError):
        _tokens.count_money(b"$1", Counter())
    with pytest.raises(TypeError):
        _tokens.count_money("$1", [])


def test_has_han_agrees_with_the_regex_on_every_code_point():
    chars = "".join(map(chr, range(0x110000)))
    found = [i for i in range(0x110000) if tokenize_module._HAN_CHAR_RE.match(chars, i)]
    assert [i for i in range(0x110000) if _tokens.has_han(chars[i])] == found
    # and lower-casing makes or removes none, so the raw text answers for the prepared one
    han = tokenize_module.has_han
    assert not [c for c in chars if han(c) != han(c.lower())]
    with pytest.raises(TypeError, match="str"):
        _tokens.has_han(b"\xe4\xb8\xad")


url_texts = st.lists(
    st.one_of(
        st.sampled_from(["http", "HTTPS", "ftp", "hTtP", "://", "www.", "WWW.", "Www.", "@",
                         "user:pw@", ".", "-", "_", "/", "?", "#", " ", "\n", '"', "<a href=",
                         "example", "co.uk", "a" * 65, "10.0.0.1", "é", "中", "\ud800"]),
        st.text(max_size=5),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=url_texts)
@example(text="see http://" + "u" * 64 + "@host.example.com/ and http://" + "u" * 65 + "@x.org")
@example(text="xhttp://a.b ftp://@c.d http://e@/f.g www.h.i.www.j.k awww.l.m -www.n.o")
@example(text="ww.www.WWW.wWw.www.x.y http:/:/http://a.b::// www.")  # markers side by side
@example(text="http://a.b/" + "x: " * 500 + "www.c.d ... www" + ".")  # many colons and dots
@example(text="é http://a.b www.c.d :// www.")  # the same rules on a str of 1-byte characters
@example(text="中 http://a.b www.c.d :// www.")  # and of 2-byte ones
def test_url_hosts_equal_the_python_function(text):
    assert _tokens.url_hosts(text) == tokenize_module.url_hosts(text)


@settings(max_examples=1000, deadline=None)
@given(text=st.lists(st.sampled_from(["http", "ftp", ":", "/", "//", "://", ".", "w", "ww", "www",
                                       "W", "WWW", "a", "b-c", "@", " ", "_", "é", "中",
                                       "http://a.b", "www.c.d", "WWW.E.F", "ftp://u@g.h"]),
                     max_size=30).map("".join))
def test_url_hosts_equal_the_python_function_on_texts_dense_with_markers(text):
    # colons, slashes, dots and w's next to each other and at the ends: where the C search
    # for the markers (memchr over a str of 1-byte characters) could go one off
    assert _tokens.url_hosts(text) == tokenize_module.url_hosts(text)


url_token_texts = st.lists(
    st.sampled_from(["http://", "https://u@", "www.", "WWW.", "ftp://", "a", "Shop", "-", ".",
                     "co", "uk", "com", "cn", "10", "1", "255", "1234", "x.co.uk", "b.com.cn",
                     "192.168.0.1", "1.2.3", "1.2.3.4.5", " ", "/", "é", "中"]),
    max_size=30,
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(text=st.one_of(url_token_texts, url_texts))
@example(text="http://10.0.0.1 http://1.2.3.4.5 http://1234.1.1.1 www.a.b.co.uk http://c.co.uk")
def test_url_tokens_are_counted_as_the_python_tokens(text):
    counts = {"url:ip": 2, "other": 1}  # added to, like the message's other tokens
    _tokens.count_url_tokens(text, counts, mail.SECOND_LEVEL_LABELS)
    expected = Counter({"url:ip": 2, "other": 1})
    expected.update(tokenize_module.url_tokens(tokenize_module.url_hosts(text)))
    assert counts == expected
    assert list(counts) == list(expected)  # the same insertion order as Counter.update
    native, python = pair()
    assert native.count(text) == python.count(text)  # the tokenizer's own URL tokens


def test_count_url_tokens_refuses_bad_arguments():
    with pytest.raises(TypeError):
        _tokens.count_url_tokens(b"http://a.b", {}, mail.SECOND_LEVEL_LABELS)
    with pytest.raises(TypeError):
        _tokens.count_url_tokens("http://a.b", [], mail.SECOND_LEVEL_LABELS)
    with pytest.raises(TypeError):  # the labels are looked up in it
        _tokens.count_url_tokens("http://a.b.co.uk", {}, None)


header_values = st.lists(
    st.sampled_from(["a", "Re:", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "x y",
                     "=?", "\x00", "\x7f", ":"]),
    max_size=30,
).map(lambda pieces: "".join(pieces).encode("ascii"))


@settings(max_examples=500, deadline=None)
@given(fields=st.lists(st.tuples(st.sampled_from(["subject", "to", "received"]), header_values),
                       max_size=8))
def test_header_values_are_unfolded_as_the_python_reader_does(fields):
    headers: dict[str, list[str]] = {"to": ["already"]}
    expected = {"to": ["already"]}
    _tokens.unfold_headers(fields, headers)
    for name, value in fields:
        expected.setdefault(name, []).append(mail._unfold(value))
    assert headers == expected


def test_unfolding_refuses_what_is_not_an_ascii_field():
    for fields in ([("subject", "text")], [("subject",)], [("subject", "é".encode())]):
        with pytest.raises((TypeError, ValueError)):
            _tokens.unfold_headers(fields, {})
    with pytest.raises(TypeError):
        _tokens.unfold_headers([("subject", b"x")], {"subject": "not a list"})


header_blocks = st.lists(
    st.one_of(
        st.sampled_from([b"From", b"X-Mailer", b"SUBJECT", b"Received", b"a", b":", b": ", b" ",
                         b"\t", b"\n", b"\n ", b"\n\t", b"\r", b"\x00", b"\x0b", b"\x0c",
                         b"\x1c", b"\x7f", b"\xb0", b"\xa1\xa1", b"=?gb2312?B?", b"<a@b.cn>",
                         b"123", b"Aa9", b";", b"/", b'"']),
        st.binary(max_size=6),
    ),
    max_size=60,
).map(b"".join)


entity_starts = st.lists(
    st.one_of(
        st.sampled_from([b"From ", b"From", b"From: a", b"http://x", b"a: //b", b"a://", b"a:/",
                         b"X :", b"<html>:", b"/etc/x:", b"\n", b"\n\n", b" ", b"\t", b":",
                         b"a", b"X-Copyright(C)", b">Received", b"\xe9", b"\x00", b"\r"]),
        st.binary(max_size=4),
    ),
    max_size=25,
).map(b"".join)


@settings(max_examples=2000, deadline=None)
@given(data=st.one_of(header_blocks, entity_starts, st.binary(max_size=80)),
       pos=st.integers(-2, 90))
@example(data=b"From x\nA: b\n c\nB :\n\nbody", pos=0)
@example(data=b"A:/", pos=0)
@example(data=b"A://", pos=0)
@example(data=b"From ", pos=0)
def test_the_header_lines_end_where_the_regex_says(data, pos):
    start = min(max(pos, 0), len(data))
    assert _tokens.header_lines_end(data, pos) == mail._HEADER_LINES_RE.match(data, start).end()
    if pos == 0:
        assert _tokens.header_lines_end(data) == mail._HEADER_LINES_RE.match(data).end()
        defects_c: list[str] = []
        defects_python: list[str] = []
        assert (mail._split_entity(data, defects_c, _tokens)
                == mail._split_entity(data, defects_python, None))
        assert defects_c == defects_python


@settings(max_examples=1000, deadline=None)
@given(fields=st.lists(st.tuples(st.sampled_from(["content-type", "content-disposition",
                                                  "content-transfer-encoding", "subject", "to",
                                                  "Content-Type", ""]),
                                 st.binary(max_size=5)), max_size=12),
       names=st.sampled_from([mail._MIME_HEADERS, ("subject",), ("to", "to"), ()]))
def test_first_values_are_the_first_value_of_each_name(fields, names):
    expected = tuple(next((v for n, v in fields if n == name), None) for name in names)
    assert _tokens.first_values(fields, names) == expected
    assert mail._first_values(fields, names, None) == expected


def test_first_values_refuses_what_is_not_a_list_of_pairs():
    for fields in ([("content-type",)], [["content-type", b"x"]], (("a", b"x"),)):
        with pytest.raises(TypeError):
            _tokens.first_values(fields, mail._MIME_HEADERS)


def test_content_types_are_parsed_once_and_long_ones_not_kept():
    value = 'text/plain; charset="iso-8859-1"; format=flowed'
    assert mail._content_type(value) is mail._content_type(value)  # cached
    assert mail._content_type(value) == mail._parse_content_type(value)
    long_value = "text/html; name=" + "x" * 300
    assert mail._content_type(long_value) == mail._parse_content_type(long_value)
    assert mail._content_type(long_value) is not mail._content_type(long_value)


def test_header_lines_end_refuses_what_is_not_bytes():
    with pytest.raises(TypeError):
        _tokens.header_lines_end("From: a\n")


@settings(max_examples=1000, deadline=None)
@given(data=st.one_of(
    st.lists(st.sampled_from([b"=", b"?", b"=?", b"?=", b"a", b"\n", b"\x00", b"\xff"]),
             max_size=30).map(b"".join),
    st.binary(max_size=60),
))
@example(data=b"?=")
@example(data=b"=" * 100 + b"?")
def test_has_encoded_word_is_the_bytes_search(data):
    assert _tokens.has_encoded_word(data) == (b"=?" in data)


def test_has_encoded_word_refuses_what_is_not_bytes():
    with pytest.raises(TypeError, match="bytes"):
        _tokens.has_encoded_word("=?utf-8?q?a?=")


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.one_of(st.text(max_size=6), st.integers(-3, 3), st.binary(max_size=3)),
                     max_size=400),
       n=st.integers(-1, 5000), deleted=st.integers(0, 5))
def test_a_reserved_counter_counts_as_a_new_one(keys, n, deleted):
    reserved: Counter = Counter()
    _tokens.reserve(reserved, n)
    expected: Counter = Counter()
    for counts in (reserved, expected):
        counts.update(keys)
        for key in list(counts)[:deleted]:
            del counts[key]
        counts.update(keys[::2])
    assert reserved == expected and list(reserved.items()) == list(expected.items())
    assert type(reserved) is Counter


def test_reserve_leaves_a_dict_that_is_not_empty_as_it_is():
    counts = {"a": 1, "b": 2}
    _tokens.reserve(counts, 1000)
    assert counts == {"a": 1, "b": 2}
    counts.clear()  # empty again: reserved, and still a working dict
    _tokens.reserve(counts, 1000)
    counts.update(dict.fromkeys(map(str, range(2000)), 1))
    assert len(counts) == 2000 and counts["1999"] == 1
    with pytest.raises(TypeError):
        _tokens.reserve([], 10)


def layout_in_python(block, shortest, longest, shapes, counts=None):
    counts = Counter() if counts is None else counts
    featurizer._add_header_layout(block, shortest, longest, shapes, counts)
    return counts


@settings(max_examples=1000, deadline=None)
@given(block=header_blocks, shortest=st.integers(1, 5), extra=st.integers(-1, 3),
       shapes=st.booleans())
@example(block=b"A: x\n\nB: y\n \nC:\n\tz\r\nD :e", shortest=1, extra=2, shapes=True)
@example(block=b"F: " + b"a1 \xb0" * 100 + b"\n\tb", shortest=2, extra=0, shapes=True)
def test_header_layout_tokens_equal_the_python_rules(block, shortest, extra, shapes):
    longest = 0 if extra < 0 else shortest + extra
    counts = {"order:^>a": 5}  # added to, like the message's other tokens
    _tokens.header_layout(block, shortest, longest, shapes, counts)
    expected = layout_in_python(block, shortest, longest, shapes, Counter({"order:^>a": 5}))
    assert counts == expected
    assert list(counts) == list(expected)  # the same insertion order as Counter.update


def fields_by_regex(block, fields):
    return mail._parse_headers(block, fields, None)  # the reader's regexes


field_lists = st.sampled_from([
    FeaturizerOptions().header_fields, ("*",), ("subject",), ("x-a", "x-ab", "a"),
])


@settings(max_examples=1000, deadline=None)
@given(block=header_blocks, header_fields=field_lists)
@example(block=b"Subject : x\nSUBJECT:\n\ty\nSubjects: z\n subject: w\nX-AB:1\nx-a :2",
         header_fields=("x-a", "x-ab", "a"))
def test_header_fields_are_read_as_the_regexes_read_them(block, header_fields):
    for fields in (mail._wanted_headers(header_fields), mail._MIME_FIELDS):
        assert mail._parse_headers(block, fields, _tokens) == fields_by_regex(block, fields)


def test_names_that_are_not_plain_field_names_are_read_by_the_regex():
    # A configured name with a space or a colon in it, or none left once encoded as ASCII,
    # matches what only the regex can say; the C scan is not used for it.
    for names in (("x y",), ("a:b",), ("é",)):
        fields = mail._header_re(names)
        assert fields.names is mail._REGEX_ONLY
    block = b"X Y: 1\nA:B: 2\n: 3\nSubject: 4"
    fields = mail._header_re(("x y", "é"))
    assert mail._parse_headers(block, fields, _tokens) == [("x y", b"1"), ("", b"3")]
    for bad in (((b"Subject", "subject"),), ((b"", ""),), ((b"a b", "a b"),), [],
                ((b"subject",),), ((b"subject", b"subject"),)):
        with pytest.raises(TypeError):
            _tokens.header_fields(b"Subject: x", bad)


def test_header_layout_reads_at_most_max_fields_and_long_names_whole():
    many = b"".join(b"X-%d: v %d\n" % (k, k) for k in range(3 * header_layout.MAX_FIELDS))
    long_name = b"N" * 100_000 + b": " + b"v" * 1_000_000 + b"\n\t" + b"\xff" * 500_000
    for block in (many, long_name, b"", b"\n\n", b":x", b"no field here"):
        for shortest, longest in ((1, 1), (3, 4), (2, 0)):
            counts = {}
            _tokens.header_layout(block, shortest, longest, True, counts)
            assert counts == layout_in_python(block, shortest, longest, True)


def test_header_layout_refuses_bad_arguments():
    for args in ((b"A: b", 0, 4, True, {}), (b"A: b", 1, -1, True, {}),
                 ("A: b", 1, 4, True, {}), (b"A: b", 1, 4, True, [])):
        with pytest.raises((TypeError, ValueError)):
            _tokens.header_layout(*args)
    counts = {"order:^>a": "not a number"}
    with pytest.raises(TypeError):
        _tokens.header_layout(b"a: b", 2, 2, False, counts)
    assert counts == {"order:^>a": "not a number"}


address_values = st.lists(
    st.one_of(
        st.sampled_from(["Ann", "<", ">", "@", ".", "-", "_", "+", "!", "'", '"', " ", ",", "co",
                         "uk", "com", "cn", "Mail", "EXAMPLE", "a.b", "1", "=?", "é", "\n"]),
        st.text(alphabet="ab.@-_+ ", max_size=4),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(address_values, min_size=1, max_size=3), subject=address_values,
       address_words=st.booleans(), lowercase=st.booleans(), joiners=st.sampled_from(["-", ""]))
@example(values=["Ann <Ann.Lee@Mail.Example.CO.UK>, b@c.d, x@y, a@b@c.org, .a@b.cc."],
         subject="", address_words=False, lowercase=True, joiners="-")
def test_header_tokens_equal_the_python_path(values, subject, address_words, lowercase, joiners):
    options = {"address_words": address_words, "lowercase": lowercase, "word_joiners": joiners}
    parsed = mail.ParsedMail(headers={"from": values, "to": values[:1], "subject": [subject]})
    in_c = Featurizer(FeaturizerOptions(**options), native=True)
    in_python = Featurizer(FeaturizerOptions(**options), native=False)
    assert in_c._header_tokens(parsed) == in_python._header_tokens(parsed)


@settings(max_examples=400, deadline=None)
@given(headers=st.dictionaries(
           st.sampled_from(["from", "to", "cc", "subject", "received", "x-mailer", "reply-to"]),
           st.lists(address_values, max_size=4), max_size=7),
       every_field=st.booleans(), address_words=st.booleans(), lowercase=st.booleans())
@example(headers={"received": ["by a.b", "from Ünïcode"], "to": ["x@y.cn", "Zoë <z@q.de>"]},
         every_field=False, address_words=False, lowercase=True)
def test_every_header_field_gives_the_tokens_of_the_python_path(
    headers, every_field, address_words, lowercase
):
    # Several values a field, ASCII and not (the C call leaves those to Python), every field
    # ("*") or the default list.
    options = {"address_words": address_words, "lowercase": lowercase}
    if every_field:
        options["header_fields"] = ["*"]
    parsed = mail.ParsedMail(headers=headers)
    in_c = Featurizer(FeaturizerOptions(**options), native=True)
    in_python = Featurizer(FeaturizerOptions(**options), native=False)
    assert in_c._header_tokens(parsed) == in_python._header_tokens(parsed)


def test_count_header_fields_refuses_bad_arguments():
    counter = Tokenizer(native=True)._native
    labels = frozenset({"co"})
    for fields, headers in ((("subject",), {}), ((("subject", 3, False),), {}),
                            ((("subject", "subject:", False),), {"subject": "not a list"}),
                            ((("subject", "subject:", False),), {"subject": [b"bytes"]}),
                            ((("to", "to:", True),), {"to": [3]})):
        with pytest.raises(TypeError):
            counter.count_header_fields(fields, headers, {}, labels, False, True)
    left = counter.count_header_fields((("subject", "subject:", False), ("to", "to:", True)),
                                       {"subject": ["é a", "b"], "to": ["Zoë <z@q.de>"]}, {},
                                       labels, False, True)
    assert left == [("subject:", "é a\nb", False), ("to:", "Zoë <z@q.de>", True)]


@settings(max_examples=500, deadline=None)
@given(value=address_values)
@example(value="Ann <Ann.Lee@Mail.Example.CO.UK>, b@c.d, x@y, a@b@c.org, .a@b.cc., a@-.-")
def test_addresses_are_found_as_the_address_regex_finds_them(value):
    if value.isascii():
        assert _tokens.addresses(value) == [a.lower() for a in mail.ADDRESS_RE.findall(value)]
    else:
        with pytest.raises(ValueError):
            _tokens.addresses(value)


def test_long_runs_are_linear_and_dropped_or_kept_as_the_rules_say():
    native, python = pair()
    for text in ("a" * 1_000_000, "a-" * 500_000, "_" * 1_000_000, "-" * 1_000_000,
                 "ab " * 300_000, "\U00020000a" * 200_000, "http://" * 200_000,
                 "www." * 300_000, "http://" + "a." * 500_000):
        assert native.count(text) == python.count(text)
    in_c, in_python = Featurizer(native=True), Featurizer(native=False)
    for value in ("a@" * 300_000, "a" * 500_000 + "@b", "a@b." * 200_000, "." * 500_000):
        parsed = mail.ParsedMail(headers={"from": [value]})
        assert in_c._header_tokens(parsed) == in_python._header_tokens(parsed)
        assert _tokens.addresses(value) == [a.lower() for a in mail.ADDRESS_RE.findall(value)]


def test_bad_arguments_raise_and_leave_the_counts_usable():
    counter = Tokenizer(native=True)._native
    with pytest.raises(TypeError):
        counter.count(b"bytes", {})
    with pytest.raises(TypeError):
        counter.count("text", [])
    with pytest.raises(TypeError):
        counter.count("text", {}, prefix=3)
    counts = {"word": "not a number"}
    with pytest.raises(TypeError):
        counter.count("word", counts)
    assert counts == {"word": "not a number"}
    with pytest.raises(TypeError):
        counter.words(None)
    with pytest.raises(ValueError):
        type(counter)(3, 2, "-", False)
    with pytest.raises(ValueError):
        type(counter)(1, 2, "a", False)


def test_many_distinct_words_grow_the_table():
    native, python = pair()
    text = " ".join(f"w{i}x" for i in range(100_000))  # the table grows many times
    assert native.count(text) == python.count(text)
    assert native.words(text) == python.words(text)


def _messages(data_dir, corpus):
    with tarfile.open(data_dir / corpus / "messages.tar.gz") as archive:
        for member in archive:
            if member.isfile():
                yield member.name, archive.extractfile(member).read()


@pytest.mark.slow
@pytest.mark.parametrize("corpus", CORPORA)
def test_every_message_of_every_corpus_gives_the_same_features(data_dir, corpus):
    featurizers = {
        name: (Featurizer(FeaturizerOptions(**o), native=True),
               Featurizer(FeaturizerOptions(**o), native=False))
        for name, o in OPTION_SETS.items()
    }
    differing: list[tuple[str, str]] = []
    n = 0
    for member, raw in _messages(data_dir, corpus):
        n += 1
        for name, (in_c, in_python) in featurizers.items():
            read_in_c = in_c.read(raw)
            read_in_python = in_python.read(raw)  # the reader's pure-Python path too
            a, b = in_c.from_mail(read_in_c), in_python.from_mail(read_in_python)
            if read_in_c != read_in_python or (a.tokens, a.numeric, a.truncated, a.defects) != (
                b.tokens, b.numeric, b.truncated, b.defects
            ):
                differing.append((member, name))
    assert n > 5000
    assert not differing, f"{len(differing)} differ, first: {differing[:5]}"
