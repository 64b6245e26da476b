"""Where the headers end and the body starts, and the defects the reader records on the way.

The header block ends at the first line that is neither a header field nor a continuation;
that line starts the body (RFC 5322 2.1). Constructed messages for each irregular form real
streams carry: no headers, only a Subject line, an mbox line, CR/LF/CRLF line ends, 8-bit
header bytes, a very long first line, body lines shaped like fields.
"""

from __future__ import annotations

import email
import email.policy
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.features import Featurizer, FeaturizerOptions, read_mail
from streamnb.features.mail import DEFECTS


def tokens(raw: bytes, **options) -> dict[str, int]:
    return dict(Featurizer(FeaturizerOptions(**options)).from_raw(raw).tokens)


def body_words(raw: bytes) -> set[str]:
    return {t for t in tokens(raw) if ":" not in t}


# --- the header/body boundary -----------------------------------------------------------------


def test_subject_line_followed_directly_by_the_body_keeps_the_body():
    raw = b"Subject: cheap meds\nlow cost prescription medications\nsoma ultram\n"
    mail = read_mail(raw)
    assert mail.subject == "cheap meds"
    assert mail.text == "low cost prescription medications\nsoma ultram\n"
    assert mail.defects == ("missing_header_body_separator",)
    found = tokens(raw)
    assert {"low", "cost", "prescription", "medications", "soma", "ultram"} <= set(found)
    assert found["subject:cheap"] == 1 and "subject:low" not in found
    assert found["defect:missing_header_body_separator"] == 1


def test_subject_line_then_empty_line_is_well_formed():
    mail = read_mail(b"Subject: cheap meds\n\nlow cost\n")
    assert (mail.subject, mail.text, mail.defects) == ("cheap meds", "low cost\n", ())


def test_only_a_subject_line():
    for raw in (b"Subject: cheap meds", b"Subject: cheap meds\n"):
        mail = read_mail(raw)
        assert (mail.subject, mail.text, mail.defects) == ("cheap meds", "", ())


def test_no_headers_at_all_is_all_body_and_says_so():
    raw = b"Hello Bob,\nthe meeting moved to Tuesday.\n"
    mail = read_mail(raw)
    assert mail.headers == {} and mail.text == raw.decode()
    assert mail.defects == ("no_headers",)
    assert tokens(raw)["defect:no_headers"] == 1


def test_empty_message_has_no_defect():
    assert read_mail(b"").defects == () and tokens(b"") == {"mime:text/plain": 1}


@pytest.mark.parametrize(
    "first_line",
    [b"http://cheap.example.com/pills", b"Note: read this first", b"URGENT: reply now",
     b"Re: your order"],
)
def test_field_shaped_first_line_of_a_mail_without_headers_is_body(first_line):
    # Without an empty line to close them, only fields a mail system writes are headers:
    # "http:", "Note:" and "Re:" start text, and their words are read.
    raw = first_line + b"\nbuy now at low prices\n"
    mail = read_mail(raw)
    assert mail.headers == {} and mail.defects == ("no_headers",)
    assert mail.text == raw.decode()
    assert "buy" in body_words(raw) and "now" in body_words(raw)


@pytest.mark.parametrize(
    "line", [b"http://x.example.com/a", b"<html><head><title>::FREE QUOTE::</title>"]
)
@pytest.mark.parametrize("headers", [b"", b"Subject: hi\n"])
def test_a_url_or_markup_line_is_text_even_before_an_empty_line(headers, line):
    # "http:" and "<html><head><title>" have the shape of field names; no mail system writes
    # them, and taking them as fields would drop the link and the title
    mail = read_mail(headers + line + b"\n\nmore\n")
    assert mail.text.startswith(line.decode()) and mail.text.endswith("\n\nmore\n")
    assert mail.subject == ("hi" if headers else "")


def test_unknown_field_after_known_ones_starts_the_body_when_nothing_closes_the_headers():
    raw = b"Subject: offer\nDate: Mon, 1 Jan 2024\nNote: this is text\nmore text\n"
    mail = read_mail(raw)
    assert mail.subject == "offer" and mail.header("date") == "Mon, 1 Jan 2024"
    assert mail.text == "Note: this is text\nmore text\n"


def test_closed_header_block_takes_every_field_as_the_rfc_says():
    raw = b"Subject: offer\nNote: a field\n\nbody\n"
    mail = read_mail(raw, FeaturizerOptions(header_fields=["*"]))
    assert mail.header("note") == "a field" and mail.text == "body\n" and mail.defects == ()


@pytest.mark.parametrize("separator", [b"\n", b""])
def test_field_shaped_body_lines_after_a_text_line_stay_body(separator):
    raw = (b"Subject: hi\n" + separator + b"Dear Ann,\nPrice: $100\nDate: tomorrow\n"
           b"From: your friend\n")
    mail = read_mail(raw)
    assert mail.subject == "hi" and mail.from_addrs == []
    assert mail.text == "Dear Ann,\nPrice: $100\nDate: tomorrow\nFrom: your friend\n"
    assert set(mail.headers) == {"subject"}
    found = tokens(raw)
    assert {"price", "tomorrow", "friend"} <= set(found)
    assert "date:tomorrow" not in found and "from:friend" not in found


def test_field_shaped_body_lines_after_the_empty_line_stay_body():
    raw = b"Subject: hi\n\nPrice: $100\nDate: tomorrow\n"
    mail = read_mail(raw)
    assert mail.text == "Price: $100\nDate: tomorrow\n" and mail.defects == ()
    assert "date:tomorrow" not in tokens(raw)


def test_mbox_from_line_first():
    raw = b"From ann@example.com Mon Jan  1 00:00:00 2024\nSubject: hi\nlow cost\n"
    mail = read_mail(raw)
    assert mail.subject == "hi" and mail.text == "low cost\n"
    # "From " and then only text: as likely a sentence as an envelope, so it is kept
    mail = read_mail(b"From the desk of the director\nlow cost\n")
    assert mail.text == "From the desk of the director\nlow cost\n"
    assert mail.defects == ("no_headers",)


@pytest.mark.parametrize("separator", [b"", b"\n"])
def test_line_ends_lf_crlf_cr_and_mixed_read_alike(separator):
    lines = [b"Subject: cheap meds", b"From: a@example.com"]
    body = [b"low cost", b"Note: text", b"soma"]

    def joined(ends):
        head = b"".join(line + end for line, end in zip(lines, ends, strict=False))
        sep = separator.replace(b"\n", ends[-1])
        return head + sep + b"".join(line + end for line, end in zip(body, ends[2:], strict=False))

    variants = {
        "lf": joined([b"\n"] * 5),
        "crlf": joined([b"\r\n"] * 5),
        "cr": joined([b"\r"] * 5),
        "mixed": joined([b"\r\n", b"\r", b"\n", b"\r\n", b"\r"]),
    }
    expected = tokens(variants["lf"])
    assert {"low", "cost", "note", "text", "soma", "subject:cheap"} <= set(expected)
    for raw in variants.values():
        assert tokens(raw) == expected


def test_8bit_bytes_in_header_values_and_in_a_field_name():
    subject = "发票 优惠".encode("gbk")
    raw = b"Subject: " + subject + b"\nFrom: a@example.com\n\n\xd5\xfd\xb9\xe6 text\n"
    mail = read_mail(raw)
    assert mail.subject == "发票 优惠" and mail.from_addrs == ["a@example.com"]
    # a "field name" with 8-bit bytes is not a field: the body starts there
    raw = b"Subject: hi\n" + "名字: 值".encode() + b"\nmore\n"
    mail = read_mail(raw)
    assert mail.subject == "hi" and mail.text == "名字: 值\nmore\n"
    assert mail.defects == ("missing_header_body_separator",)


@pytest.mark.parametrize(
    "first_line", [b"a" * 300_000, b"X-Long: " + b"a " * 150_000, b"a" * 300_000 + b":"]
)
def test_very_long_first_line(first_line):
    raw = first_line + b"\nbuy now\n"
    started = time.perf_counter()
    mail = read_mail(raw)
    assert time.perf_counter() - started < 1.0
    assert mail.text.endswith("buy now\n") and mail.truncated == ()


def test_encoded_word_folded_without_white_space_continues_the_field():
    raw = (b"Subject: =?utf-8?b?5Y+R56Wo?= =?utf-8?b?5Y+R\n56Wo?=\nTo: a@example.com\n\n"
           b"body\n")
    mail = read_mail(raw)
    assert mail.subject == "发票发票" and mail.to_addrs == ["a@example.com"]
    assert mail.text == "body\n" and mail.defects == ("encoded_word_split_across_lines",)


def test_first_line_is_a_continuation():
    mail = read_mail(b"\tcut header rest\nSubject: hi\n\nbody\n")
    assert mail.subject == "hi" and mail.text == "body\n"
    assert mail.defects == ("first_line_is_continuation",)
    # continuation-shaped lines with no field anywhere are text, not a header block
    mail = read_mail(b"   indented first line\n\nsecond paragraph\n")
    assert mail.text.startswith("   indented") and mail.defects == ("no_headers",)


# --- the boundary agrees with the standard library's on generated mail --------------------------

_WORD = st.text(alphabet="abcdefghij", min_size=2, max_size=6)
_FIELD = st.sampled_from(["Subject", "From", "To", "Date", "X-Mailer", "Content-Type"])


@st.composite
def _mails(draw):
    fields = draw(st.lists(st.tuples(_FIELD, st.lists(_WORD, min_size=1, max_size=4),
                                     st.booleans()), max_size=5))
    lines = []
    for name, words, folded in fields:
        value = " ".join(words) if name != "Content-Type" else "text/plain"
        lines.append(f"{name}: {value}" + ("\n\tfolded more" if folded else ""))
    closed = draw(st.booleans())
    body = draw(st.lists(st.one_of(
        st.lists(_WORD, min_size=1, max_size=5).map(" ".join),
        st.tuples(_WORD, _WORD).map(lambda p: f"{p[0]}: {p[1]}"),
        st.tuples(_FIELD, _WORD).map(lambda p: f"{p[0]}: {p[1]}"),
    ), min_size=1, max_size=6))
    if not closed or not lines:  # then what starts the body is a line that is not a field
        body.insert(0, " ".join(draw(st.lists(_WORD, min_size=1, max_size=4))))
    text = "\n".join(lines) + ("\n\n" if closed else "\n") if lines else ""
    return (text + "\n".join(body) + "\n").encode(), lines


@settings(max_examples=300, deadline=None)
@given(_mails())
def test_body_starts_where_the_standard_library_starts_it(generated):
    raw, header_lines = generated
    ours = read_mail(raw)
    theirs = email.message_from_bytes(raw, policy=email.policy.compat32)
    if header_lines:
        assert ours.text == theirs.get_payload()
        assert ours.subject == " ".join((theirs.get("subject") or "").split())
        missing = any(type(d).__name__ == "MissingHeaderBodySeparatorDefect"
                      for d in theirs.defects)
        assert missing == ("missing_header_body_separator" in ours.defects)
    else:
        assert ours.text == raw.decode() and ours.headers == {}


# --- other places the reader could drop text --------------------------------------------------


def test_unknown_transfer_encoding_keeps_the_text_and_says_so():
    raw = (b"Content-Type: text/plain\nContent-Transfer-Encoding: x-gibberish\n\n"
           b"plain words here\n")
    mail = read_mail(raw)
    assert mail.text == "plain words here\n" and mail.defects == ("unknown_transfer_encoding",)


def test_parts_without_a_type_are_text_and_in_a_digest_are_mails():
    raw = (b"Content-Type: multipart/mixed; boundary=B\n\n--B\n\nuntyped words\n"
           b"--B\nContent-Type: text\n\nbad type words\n--B--\n")
    mail = read_mail(raw)
    assert [p.text.strip() for p in mail.parts] == ["untyped words", "bad type words"]
    assert mail.defects == ("invalid_content_type",)
    digest = (b"Content-Type: multipart/digest; boundary=B\n\n--B\n\n"
              b"Subject: inner\n\ninner body\n--B--\n")
    parts = read_mail(digest).parts
    assert [p.text for p in parts] == ["inner body"]


def test_multipart_defects_keep_the_text():
    no_boundary = b"Content-Type: multipart/mixed\n\nall the words\n"
    assert read_mail(no_boundary).text == "all the words\n"
    assert read_mail(no_boundary).defects == ("multipart_without_boundary",)
    never = b"Content-Type: multipart/mixed; boundary=ZZ\n\nall the words\n"
    assert read_mail(never).text == "all the words\n"
    assert read_mail(never).defects == ("boundary_not_found",)
    unclosed = b"Content-Type: multipart/mixed; boundary=B\n\n--B\n\nlast part\n"
    assert read_mail(unclosed).text == "last part\n"
    assert read_mail(unclosed).defects == ("close_boundary_not_found",)


def test_invalid_base64_is_repaired_and_noted():
    raw = b"Content-Type: text/plain\nContent-Transfer-Encoding: base64\n\naGVsbG8gd29ybGQ*\n"
    mail = read_mail(raw)
    assert mail.text == "hello world" and mail.defects == ("invalid_base64",)


def test_defects_and_truncations_are_on_the_features():
    f = Featurizer(FeaturizerOptions(max_text_chars=10))
    result = f.from_raw(b"Subject: hi\nsome long body text over ten characters\n")
    assert result.truncated == ("max_text_chars",)
    assert result.defects == ("missing_header_body_separator",)
    assert result.tokens["defect:missing_header_body_separator"] == 1
    quiet = Featurizer(FeaturizerOptions(defect_tokens=False)).from_raw(b"Subject: hi\nbody\n")
    assert quiet.defects == ("missing_header_body_separator",)
    assert not any(t.startswith("defect:") for t in quiet.tokens)


def test_every_defect_is_documented():
    raws = [
        b"text", b"Subject: a\ntext", b" cont\nSubject: a\n\nx", b"Content-Type: text\n\nx",
        b"Content-Type: multipart/mixed\n\nx", b"Content-Type: multipart/mixed; boundary=Q\n\nx",
        b"Content-Type: multipart/mixed; boundary=Q\n\n--Q\n\nx",
        b"Content-Transfer-Encoding: x-y\n\nx", b"Content-Transfer-Encoding: base64\n\naGk*\n",
        b"Subject: =?utf-8?b?5Y+R\n56Wo?=\n\nx",
        b"Content-Type: text/html\n\n" + b"<p>" * 20_001,
    ]
    seen = {d for raw in raws for d in read_mail(raw).defects}
    assert seen == set(DEFECTS)
