"""Hostile and broken input: always a result or a FeaturizationError, within the time bound.

"Within the time bound" is checked with a generous wall-clock ceiling (the machine is shared):
what matters is that nothing is unbounded, and the limits are what bound the work.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.features import Features, FeaturizationError, Featurizer, FeaturizerOptions
from streamnb.features.html import MAX_PARSED_TAGS
from streamnb.features.native import _tokens

CEILING_SECONDS = 10.0  # per message, far above the 1 s budget: a hang, not a slow machine
FEATURIZER = Featurizer(FeaturizerOptions(meta_features=True, bigrams=True))
HOSTILE = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def featurize(raw: bytes, featurizer: Featurizer = FEATURIZER) -> Features:
    start = time.perf_counter()
    result = featurizer.from_raw(raw)
    elapsed = time.perf_counter() - start
    assert elapsed < CEILING_SECONDS
    assert isinstance(result, Features)
    assert all(
        isinstance(k, str) and isinstance(v, int) and v > 0 for k, v in result.tokens.items()
    )
    if featurizer.options.meta_features:
        assert len(result.numeric) > 0
    return result


@HOSTILE
@given(st.binary(max_size=5000))
def test_random_bytes(raw):
    featurize(raw)


_FRAGMENTS = [
    b"Content-Type: multipart/mixed; boundary=B\n",
    b'Content-Type: multipart/alternative; boundary="B"\n',
    b"Content-Type: text/html; charset=gb2312\n",
    b"Content-Type: text/plain; charset=utf-16\n",
    b"Content-Type: message/rfc822\n",
    b"Content-Type: text/plain; charset*0*=utf-8''%E4; charset*1=x\n",
    b"Content-Transfer-Encoding: base64\n",
    b"Content-Transfer-Encoding: quoted-printable\n",
    b'Content-Disposition: attachment; filename="a.exe\n',
    b"Subject: =?utf-8?B?5Y+R?= =?x?Q?=ZZ?= =?gb2312?b?***?=\n",
    b'From: <a@b.c> , "x" <@@>\n',
    b"\n",
    b"\n\n",
    b"--B\n",
    b"--B--\n",
    b"--BB\n",
    b"<html><script>",
    b"<a href='http://x.y/'>",
    b"=E9=\n",
    b"SGVsbG8=\n",
    b"\x00\xff\xfe",
    "发票 http://www.例子.中国/".encode("gbk", "replace"),
    b" \t folded\n",
]


@HOSTILE
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.binary(max_size=40)), max_size=60))
def test_mime_shaped_garbage(pieces):
    featurize(b"".join(pieces))


@HOSTILE
@given(cut=st.integers(min_value=0, max_value=4000), which=st.integers(0, 3))
def test_truncated_mime(cut, which):
    raw = _multipart(which + 1).replace(b"\n", b"\r\n")
    featurize(raw[:cut])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(label=st.text(max_size=50), body=st.binary(max_size=300))
def test_invalid_charset_names(label, body):
    raw = (
        b"Subject: =?" + label.encode("utf-8", "surrogatepass") + b"?Q?x?=\n"
        b'Content-Type: text/plain; charset="'
        + label.encode("utf-8", "surrogatepass")
        + b'"\n\n'
        + body
    )
    featurize(raw)


def _multipart(n_parts: int, boundary: bytes = b"XYZ") -> bytes:
    parts = b"".join(
        b"--" + boundary + b"\nContent-Type: text/plain\n\npart " + str(i).encode() + b"\n"
        for i in range(n_parts)
    )
    return (
        b"From: a@b.com\nContent-Type: multipart/mixed; boundary="
        + boundary
        + b"\n\n"
        + parts
        + b"--"
        + boundary
        + b"--\n"
    )


def test_boundary_that_never_closes():
    raw = _multipart(3).replace(b"--XYZ--\n", b"") + b"and the last one just goes on " * 1000
    result = featurize(raw)
    assert result.tokens["part"] == 3 and result.tokens["goes"] == 1000


def test_declared_boundary_that_never_appears():
    raw = b"Content-Type: multipart/mixed; boundary=nowhere\n\nplain words here"
    assert featurize(raw).tokens["words"] == 1


def test_thousand_nested_parts_are_cut_at_max_depth():
    raw = b""
    for depth in range(1000):
        boundary = b"b%d" % depth
        raw += b"Content-Type: multipart/mixed; boundary=" + boundary + b"\n\n--" + boundary + b"\n"
    raw += b"Content-Type: text/plain\n\ndeep inside\n"
    result = featurize(raw)
    assert "max_depth" in result.truncated
    with pytest.raises(FeaturizationError) as error:
        Featurizer(FeaturizerOptions(on_limit="reject")).from_raw(raw)
    assert error.value.reason == "too_deep"


def test_thousand_sibling_parts_are_cut_at_max_parts():
    result = featurize(_multipart(1000))
    assert result.truncated == ("max_parts",)
    assert result.tokens["part"] == 99  # the top level is one of the 100 parts
    with pytest.raises(FeaturizationError) as error:
        Featurizer(FeaturizerOptions(on_limit="reject")).from_raw(_multipart(1000))
    assert error.value.reason == "too_many_parts"


def test_twenty_megabyte_body_is_cut_at_max_bytes():
    raw = b"Subject: big\n\n" + b"word " * (4 * 1024 * 1024)
    result = featurize(raw)
    assert "max_bytes" in result.truncated
    assert 0 < result.tokens["word"] <= 4 * 1024 * 1024 // 5
    with pytest.raises(FeaturizationError) as error:
        Featurizer(FeaturizerOptions(on_limit="reject")).from_raw(raw)
    assert error.value.reason == "too_large"


def test_twenty_megabyte_base64_attachment_is_not_decoded_as_text():
    blob = b"QUFBQUFB\n" * (20 * 1024 * 1024 // 9)
    raw = (
        b"Content-Type: multipart/mixed; boundary=z\n\n--z\n\nhello\n--z\n"
        b"Content-Type: application/zip\nContent-Transfer-Encoding: base64\n\n" + blob
    )
    result = featurize(raw)
    assert result.tokens["hello"] == 1 and result.truncated == ("max_bytes",)


def test_limits_on_text_and_tokens():
    options = FeaturizerOptions(max_text_chars=1000, max_tokens=50)
    result = featurize(b"\n" + b"many words " * 1000, Featurizer(options))
    assert set(result.truncated) == {"max_text_chars", "max_tokens"}
    assert sum(v for k, v in result.tokens.items() if ":" not in k) == 50


def test_time_bound_stops_between_steps():
    options = FeaturizerOptions(max_seconds=0.0)
    result = Featurizer(options).from_raw(_multipart(5))
    assert "max_seconds" in result.truncated
    assert result.tokens.get("part", 0) == 0  # nothing was tokenized after the deadline
    with pytest.raises(FeaturizationError) as error:
        Featurizer(FeaturizerOptions(max_seconds=0.0, on_limit="reject")).from_text("hi there")
    assert error.value.reason == "timeout"


def test_nul_bytes():
    raw = b"Subject: a\x00b\n\n\x00\x00nul\x00separated\x00words\x00"
    tokens = featurize(raw).tokens
    assert tokens["nul"] == 1 and tokens["separated"] == 1


def test_empty_message_gives_empty_features():
    result = featurize(b"")
    assert dict(result.tokens) == {"mime:text/plain": 1} and result.truncated == ()
    assert dict(Featurizer().from_text("").tokens) == {}
    assert dict(Featurizer().from_tokens([]).tokens) == {}


def test_huge_header_block_without_a_body():
    raw = b"Subject: " + b"x" * 100_000 + b"\n" + b"X-A: b\n" * 50_000
    featurize(raw)


def test_wrong_input_types_are_typed_errors():
    f = Featurizer()
    for call, value in ((f.from_raw, 42), (f.from_text, b"bytes"), (f.from_tokens, "str")):
        with pytest.raises(FeaturizationError) as error:
            call(value)
        assert error.value.reason == "wrong_type"
    with pytest.raises(FeaturizationError):
        f.from_tokens(["ok", 3])


def test_raw_given_as_text_with_escaped_bytes():
    raw = "Subject: caf\udce9\n\nbody \ud800 text"  # surrogates from a text channel
    result = Featurizer().from_raw(raw)
    assert result.tokens["subject:café"] == 1 and result.tokens["text"] == 1


_UNITS = [
    b"a",
    b" ",
    b"<",
    b"<script",
    b"<!--",
    b"=?",
    b"?=",
    b"=?utf-8?q?",
    b"@",
    b"a.",
    b"http://",
    b"www.",
    b"\xb0",
    b"\xa1\xa1",
    b"--B\n",
    b"\n ",
    b"$1",
    b"A",
    b";x=",
    b'"',
]
_PLACES = {
    "subject": b"Subject: ",
    "from": b"From: ",
    "content-type": b"Content-Type: multipart/mixed; boundary=B; x=",
    "html": b"Content-Type: text/html\n\n",
    "plain": b"Content-Type: text/plain; charset=gb2312\n\n",
}


@pytest.mark.parametrize("place", list(_PLACES))
@pytest.mark.parametrize("unit", _UNITS, ids=repr)
def test_long_repetitions_take_linear_time(place, unit):
    """A regex that rescans a run from each position would take minutes on 100 kB here."""
    raw = _PLACES[place] + unit * (100_000 // len(unit)) + b"\n\nend"
    featurize(raw)
    if place == "html":
        featurize(raw, Featurizer(FeaturizerOptions(html="strip")))


_HTML_MEGABYTES = {
    "deep nesting": "<div>" * 200_000,
    "formatting nesting": "<b>" * 300_000,
    "misnested formatting": "<b><p></b>" * 100_000,
    "tables in cells": "<table><tr><td>" * 60_000,
    "a in a": "<a>x" * 250_000,
    "list items": "<li>" * 250_000,
    "less-thans": "<" * 1_000_000,
    "ampersands": "&" * 1_000_000,
    "reference-like names": "&aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" * 25_000,
    "unclosed comment": "<!--" + "a" * 1_000_000,
    "unclosed attribute value": '<a x="' + "a" * 1_000_000,
    "many attributes": "<font " + "x=1 " * 250_000,
    "script escapes": "<script><!--" + "<script>" * 120_000,
    "title end tag prefixes": "<title>" + "</titl" * 160_000,
    "selects in selects": "<select><option><b>x" * 55_000,
    "options and optgroups": "<select>" + "<option><optgroup><hr><input>x" * 33_000,
    "paragraphs in selects": "<p><select><i>" * 70_000,
    "text put before a long table": "<table><tr><td>" + "x" * 500_000 + "</td></tr>"
    + "<center> </center>" * 25_000,
    "elements put before a table": "<table><tr>" + "<font> " * 140_000,
}


@pytest.mark.skipif(_tokens is None, reason="the C extension is not built")
@pytest.mark.parametrize("name", list(_HTML_MEGABYTES))
def test_the_html_scanner_takes_linear_time(name):
    """A megabyte of hostile markup: the scanner reads it or gives up, in milliseconds."""
    markup = _HTML_MEGABYTES[name]
    start = time.perf_counter()
    text = _tokens.html_text(markup, True)
    elapsed = time.perf_counter() - start
    assert text is None or isinstance(text, str)
    assert elapsed < 1.0  # about 20 ms at most on an idle machine


@pytest.mark.parametrize("name", list(_HTML_MEGABYTES))
def test_a_megabyte_of_hostile_markup_is_read_in_bounded_time(name):
    """Through the whole reader, whichever HTML path takes it: a part the scanner gives up
    on goes to the HTML parser only with few enough tags for its tree (deep nesting took it
    two minutes), and to the linear tag strip otherwise."""
    markup = _HTML_MEGABYTES[name]
    raw = b"Content-Type: text/html\n\n" + markup.encode() + b"<p>end"
    features = featurize(raw, Featurizer(FeaturizerOptions(max_text_chars=2_000_000)))
    many = markup.count("<") > MAX_PARSED_TAGS
    assert ("html_too_many_tags" in features.defects) == many


def test_markup_with_tags_up_to_the_limit_is_parsed_as_html():
    """At the limit the part is still read by the HTML path, and one tag more by the strip."""
    at_limit = "<p>x" * (MAX_PARSED_TAGS - 2) + "<script>hidden</script>"
    assert at_limit.count("<") == MAX_PARSED_TAGS
    features = featurize(b"Content-Type: text/html\n\n" + at_limit.encode())
    assert "html_too_many_tags" not in features.defects
    over = featurize(b"Content-Type: text/html\n\n" + (at_limit + "<p>").encode())
    assert "html_too_many_tags" in over.defects
