"""The reader's and the featurizer's shortened Python steps give what the steps they stand for
give: a leaf part's text budget checked before the calls that cut it, a body read as it is
without ``_decode_transfer``, a top entity's MIME fields found in a dict by their raw values,
the header fields of the options of the mail before found by identity, the MIME tokens counted
without their list.
"""

from __future__ import annotations

import binascii
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.features import FeaturizerOptions, mail
from streamnb.features.featurizer import _count_mime_tokens, _mime_tokens

_ENCODINGS = ["", "7bit", "8bit", "binary", "base64", "quoted-printable", "x-uuencode"]
_TYPES = ["text/plain", "text/html", "text/enriched", "application/pdf"]


def reference_read_leaf(parsed, fields, ctype, maintype, body, hint, options, budget, defects):
    """``_read_leaf`` as it was written before its shortcuts: every budget step a call."""
    encoding = fields.encoding
    if encoding not in mail._TRANSFER_ENCODINGS:
        mail._note(defects, "unknown_transfer_encoding")
    if maintype != "text" or fields.named_attachment:
        parsed.attachments.append(
            mail.Attachment(fields.filename, ctype, mail._decoded_size(body, encoding)))
        return
    if budget.text_left <= 0:
        budget.exceeded("max_text_chars")
        return
    data = budget.take_text(mail._decode_transfer(body, encoding, defects))
    text = mail.decode_text(data, fields.charset, hint, options.default_charset)
    if ctype == "text/html" or (ctype != "text/plain" and mail._looks_like_html(text)):
        html = budget.spend_text(text)
        method = options.html
        if method != "strip" and html.count("<") > mail.MAX_PARSED_TAGS:
            mail._note(defects, "html_too_many_tags")
            method = "strip"
        parsed.parts.append(
            mail.TextPart(ctype, fields.charset, mail.html_to_text(html, method), html))
    else:
        parsed.parts.append(mail.TextPart(ctype, fields.charset, budget.spend_text(text)))


texts = st.one_of(
    st.text(st.sampled_from("ab <html>\xe9\u4e2d\n="), max_size=60),
    st.sampled_from(["<html><p>x</p></html>", "x" * 2500 + "<html>", "<body>" + "<p>" * 30]),
)


@settings(max_examples=1500, deadline=None)
@given(
    text=texts,
    encoding=st.sampled_from(_ENCODINGS),
    charset=st.sampled_from([None, "utf-8", "latin-1", "gb2312", "nonsense"]),
    ctype=st.sampled_from(_TYPES),
    attachment=st.booleans(),
    text_left=st.sampled_from([0, 1, 5, 30, 2000, 3000, 10**6]),
    spent_before=st.booleans(),
)
def test_a_leaf_reads_as_its_budget_steps_say(text, encoding, charset, ctype, attachment,
                                              text_left, spent_before):
    data = text.encode(charset if charset in ("latin-1", "gb2312") else "utf-8", "replace")
    if encoding == "base64":
        data = binascii.b2a_base64(data)
    elif encoding == "quoted-printable":
        data = binascii.b2a_qp(data)
    disposition = b"attachment; filename=a.txt" if attachment else None
    raw_type = (ctype + (f"; charset={charset}" if charset else "")).encode()
    fields = mail._part_fields(raw_type, encoding.encode() or None, disposition, "text/plain")
    results = []
    for read in (mail._read_leaf, reference_read_leaf):
        options = FeaturizerOptions(max_text_chars=max(text_left, 1))
        budget = mail.Budget(options)
        budget.text_left = text_left
        if spent_before:
            budget.hit.append("max_bytes")
        parsed, defects = mail.ParsedMail(), []
        read(parsed, fields, fields.ctype, fields.maintype, data, "utf-8", options, budget,
             defects)
        results.append((parsed, defects, budget.text_left, budget.hit))
    assert results[0] == results[1]


@settings(max_examples=300, deadline=None)
@given(values=st.tuples(
    st.one_of(st.none(), st.sampled_from([b"text/plain", b"text/html; charset=utf-8",
                                          b"multipart/mixed; boundary=x", b"a" * 201])),
    st.one_of(st.none(), st.sampled_from([b"base64", b"7BIT", b"x" * 300])),
    st.one_of(st.none(), st.sampled_from([b"attachment; filename=x.doc", b"inline"])),
))
def test_the_top_part_fields_are_part_fields_and_only_short_ones_are_kept(values):
    assert mail._top_part_fields(values) == mail._part_fields(*values, "text/plain")
    long_value = any(v is not None and len(v) > mail._CACHED_CONTENT_TYPE_CHARS for v in values)
    if long_value:
        assert values not in mail._TOP_PART_FIELDS
    assert len(mail._TOP_PART_FIELDS) <= mail._TOP_PART_FIELDS_KEPT


def test_each_options_header_fields_are_read_when_options_alternate():
    raw = b"Subject: s\nX-Mailer: m\nReceived: r\n\nbody"
    mailer = FeaturizerOptions(header_fields=("x-mailer",))
    received = FeaturizerOptions(header_fields=("received",))
    for _ in range(2):
        for native in (True, False):
            assert "x-mailer" in mail.read_mail(raw, mailer, native=native).headers
            assert "received" not in mail.read_mail(raw, mailer, native=native).headers
            read = mail.read_mail(raw, received, native=native)
            assert "received" in read.headers and "x-mailer" not in read.headers


parts = st.builds(mail.TextPart, st.sampled_from(_TYPES), st.none(), st.just(""))
attachments = st.builds(
    mail.Attachment, st.sampled_from([None, "a.PDF", "noext", "x.tar.gz", ".", "a." + "b" * 20]),
    st.sampled_from(["application/pdf", "image/png"]), st.just(0))


@given(
    parts=st.lists(parts, max_size=4),
    attachments=st.lists(attachments, max_size=3),
    content_type=st.sampled_from(["text/plain", "multipart/mixed", "multipart/alternative"]),
    charsets=st.lists(st.sampled_from(["utf-8", "us-ascii", "koi8-r"]), max_size=3),
    before=st.dictionaries(st.sampled_from(["mime:text/plain", "charset:utf-8", "w"]),
                           st.integers(1, 3)),
)
def test_the_mime_tokens_are_counted_as_their_list(parts, attachments, content_type, charsets,
                                                   before):
    parsed = mail.ParsedMail(parts=parts, attachments=attachments, content_type=content_type,
                             charsets=charsets)
    counts = Counter(before)
    _count_mime_tokens(parsed, counts)
    assert counts == Counter(before) + Counter(_mime_tokens(parsed))
