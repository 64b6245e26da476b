"""The reader's C step for the top-level entity (``_tokens.read_top``) and its one-part path read
a mail exactly as the pure-Python reader does.

``read_top`` stands for ``_split_entity``, ``_parse_headers``, ``_first_values``,
``has_encoded_word``, the unfolding and the subject and address look-ups of ``read_mail`` on a
mail whose header lines an empty line closes; ``read_mail`` then reads a mail of one part without
the MIME walk. Both are compared here with the Python steps they replace, on generated header
blocks, on generated whole mails under the options that change what the reader does (every
field, the limits, reject), and on real mail of the shared corpora (every message of the three
raw corpora is also compared, under six option sets, by ``test_features_native``).
"""

from __future__ import annotations

import base64
import binascii
import os
import tarfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamnb.features import FeaturizationError, FeaturizerOptions, mail, native
from tests.features.test_features_native import entity_starts, header_blocks

_tokens = native._tokens
pytestmark = pytest.mark.skipif(
    _tokens is None and os.environ.get("STREAMNB_PURE_PYTHON") == "1",
    reason="STREAMNB_PURE_PYTHON=1 and the extension is not built",
)

_DEFAULT_NAMES = mail._wanted_headers(FeaturizerOptions().header_fields)
_EVERY_NAME = mail._wanted_headers(("*",))


def python_read_top(raw: bytes, fields: mail._Fields):
    """What read_top must return, by the pure-Python steps of read_mail."""
    defects: list[str] = []
    end = mail._HEADER_LINES_RE.match(raw).end()
    if raw.startswith(b"\n") or not end or not raw.startswith(b"\n", end) or raw[0] in b" \t":
        return None
    block, body = mail._split_entity(raw, defects, None)
    assert not defects  # a closed block is the regular split
    headers = mail._parse_headers(block, fields, None)
    values = mail._first_values(headers, mail._MIME_HEADERS, None)
    encoded = b"=?" in block
    if not block.isascii() or encoded:
        return block, body, headers, values, encoded, None, None, None, None
    parsed = mail.ParsedMail()
    for name, value in headers:
        parsed.headers.setdefault(name, []).append(mail._unfold(value))
    authors: list[str] = []
    for name in ("from", "sender", "reply-to"):
        for value in parsed.headers.get(name, ()):
            authors += mail._addresses(value, None)
        if authors:
            break
    recipients = [a for name in ("to", "cc") for value in parsed.headers.get(name, ())
                  for a in mail._addresses(value, None)]
    return (block, body, None, values, False, parsed.headers, parsed.header("subject"), authors,
            recipients)


address_lines = st.lists(
    st.sampled_from([b"From: Ann <ann@mail.example.co.uk>", b"To: b@c.d, x@y", b"Cc: e@f.gh",
                     b"Sender: s@t.org", b"Reply-To: r@q.cn", b"SUBJECT: Re: cheap", b"from: ",
                     b"To: a@b@c.org", b"Content-Type: text/html", b"content-type: text/plain",
                     b"Content-Transfer-Encoding: base64", b"Content-Disposition: inline",
                     b" folded@x.yz", b"\tmore", b"Received: by a.b", b"X-Mailer: m 1.0",
                     b"Subject: =?utf-8?q?caf=C3=A9?=", b"Subject: caf\xe9", b"Date: 1 Jan"]),
    max_size=12,
).map(b"\n".join)


@settings(max_examples=2000, deadline=None)
@given(block=st.one_of(header_blocks, entity_starts, address_lines),
       separator=st.sampled_from([b"\n\n", b"\n", b"\n\n\n", b"", b"\n \n"]),
       body=st.sampled_from([b"", b"body", b"\n", b"a: b\n\nc", b"\xe9t\xe9"]),
       every_field=st.booleans())
@example(block=b"From: a@b.cd\nTo: e@f.gh\nSubject: x", separator=b"\n\n", body=b"hi",
         every_field=False)
@example(block=b"From x\nA: b\n c", separator=b"\n\n", body=b"body", every_field=True)
@example(block=b"Content-Type: text/plain\nContent-Type: text/html", separator=b"\n\n",
         body=b"", every_field=False)
def test_read_top_is_the_python_split_and_reads(block, separator, body, every_field):
    raw = block + separator + body
    fields = _EVERY_NAME if every_field else _DEFAULT_NAMES
    assert _tokens.read_top(raw, fields.names, mail._MIME_HEADERS) == python_read_top(raw, fields)


def test_read_top_refuses_bad_arguments():
    with pytest.raises(TypeError):
        _tokens.read_top("From: a\n\n", None, mail._MIME_HEADERS)
    with pytest.raises(TypeError):
        _tokens.read_top(b"From: a\n\n", ((b"From", "from"),), mail._MIME_HEADERS)
    with pytest.raises(TypeError):
        _tokens.read_top(b"From: a\n\n", None, ["content-type"])


def _b64(data: bytes) -> bytes:
    return base64.encodebytes(data)


_TEXTS = ["plain words here", "café crème, naïve", "正规发票 优惠", "<html><body><p>Hi <b>there"
          "</b> http://a.example.com</p></body></html>", "$100 now!!! www.cheap.example.org"]
_CHARSETS = ["us-ascii", "utf-8", "iso-8859-1", "gb2312", "x-unknown", "rot13", ""]

text_bodies = st.tuples(st.sampled_from(_TEXTS), st.sampled_from(_CHARSETS),
                        st.sampled_from(["", "7bit", "8bit", "binary", "base64", "Base64",
                                         "quoted-printable", "x-uuencode", "8-bit"]))


@st.composite
def one_part_mails(draw) -> bytes:
    """A mail with a Content-Type (or none) over a body in some charset and transfer encoding:
    the one-part path's cases, and the multiparts and enclosed mails it leaves to the walk."""
    text, charset, encoding = draw(text_bodies)
    try:
        data = text.encode(charset or "utf-8")
    except (LookupError, UnicodeEncodeError):
        data = text.encode("utf-8")
    if encoding.lower() == "base64":
        data = draw(st.sampled_from([_b64(data), _b64(data)[:-3], b"!!" + _b64(data)]))
    elif encoding == "quoted-printable":
        data = binascii.b2a_qp(data)
    ctype = draw(st.sampled_from(["text/plain", "text/html", "TEXT/HTML", "text/enriched",
                                  "application/pdf", "textplain", "", "multipart/mixed",
                                  "multipart/alternative; boundary=XX", "message/rfc822",
                                  "image/png; name=x.png"]))
    lines = [b"From: Ann <ann@example.com>", b"Subject: hello"]
    if ctype or charset:
        value = ctype + (f'; charset="{charset}"' if charset else "")
        lines.append(b"Content-Type: " + value.encode())
    if encoding:
        lines.append(b"Content-Transfer-Encoding: " + encoding.encode())
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from([b"Content-Disposition: attachment; filename=a.txt",
                                           b"Content-Disposition: inline"])))
    if ctype.startswith("multipart/alternative"):
        data = b"--XX\nContent-Type: text/plain\n\n" + data + b"\n--XX--\n"
    elif ctype == "message/rfc822":
        data = b"Subject: inner\n\n" + data
    lines += draw(st.lists(st.sampled_from([b"X-Mailer: m", b"Subject: =?utf-8?q?x?=",
                                            b"To: b@c.de", b"Received: caf\xe9"]), max_size=2))
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    return newline.join(lines) + newline + newline + data.replace(b"\n", newline)


limit_options = st.fixed_dictionaries({}, optional={
    "max_parts": st.sampled_from([0, 1, 2]),
    "max_text_chars": st.sampled_from([0, 5, 30]),
    "max_bytes": st.sampled_from([40, 100]),
    "header_fields": st.sampled_from([("*",), ("subject",), ("received", "x-mailer")]),
    "on_limit": st.just("reject"),
    "html": st.just("strip"),
    "default_charset": st.just("latin-1"),
})


def read_both(raw: bytes, options: FeaturizerOptions):
    """read_mail with the C steps and in pure Python: the mail, or the error's reason."""
    results = []
    for in_c in (True, False):
        try:
            results.append(mail.read_mail(raw, options, native=in_c))
        except FeaturizationError as error:
            results.append(error.reason)
    return results


@settings(max_examples=1500, deadline=None)
@given(raw=one_part_mails(), options=limit_options)
def test_generated_mail_reads_the_same_in_c_and_in_python(raw, options):
    in_c, in_python = read_both(raw, FeaturizerOptions(**options))
    assert in_c == in_python


def _messages(data_dir, corpus, every):
    with tarfile.open(data_dir / corpus / "messages.tar.gz") as archive:
        for k, member in enumerate(m for m in archive if m.isfile()):
            if k % every == 0:
                yield archive.extractfile(member).read()


@pytest.mark.parametrize("corpus", ["spamassassin", "chinese-spam"])
def test_real_mail_reads_the_same_under_the_limits(data_dir, corpus):
    # The one-part path and the walk against Python, with limits that cut real mail short.
    option_sets = [FeaturizerOptions(max_parts=1), FeaturizerOptions(max_text_chars=200),
                   FeaturizerOptions(max_bytes=3000, header_fields=("*",)),
                   FeaturizerOptions(max_parts=0, on_limit="reject")]
    one_part = 0
    for raw in _messages(data_dir, corpus, 7):
        for options in option_sets:
            in_c, in_python = read_both(raw, options)
            assert in_c == in_python
        one_part += mail.read_mail(raw).n_parts == 1
    assert one_part > 500  # the one-part path was taken
