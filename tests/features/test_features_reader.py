"""The mail reader on known corpus messages and on hand-made MIME of each kind."""

from __future__ import annotations

import base64
import re
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.features import Featurizer, FeaturizerOptions, read_mail
from streamnb.features import html as html_module
from streamnb.features import mail as mail_module
from streamnb.features.charsets import codec_for, decode_text


def corpus_message(data_dir, corpus: str, member: str) -> bytes:
    with tarfile.open(data_dir / corpus / "messages.tar.gz") as archive:
        return archive.extractfile(member).read()


# --- spot checks on the corpora ---------------------------------------------------------------


def test_base64_html_spam_is_decoded_to_visible_text(data_dir):
    raw = corpus_message(data_dir, "spamassassin", "spam/00023.b6d27c684f5fc803cfa1060adb2d0805")
    mail = read_mail(raw)
    assert mail.subject == "Penile enlargement method - guaranteed !"
    assert [(p.content_type, p.charset) for p in mail.parts] == [("text/html", "iso-8859-1")]
    text = mail.parts[0].text
    assert "THIS IS FOR ADULT MEN ONLY" in text
    assert "<font" not in text and "PGh0bWw" not in text  # no markup, no base64 left
    tokens = Featurizer().from_raw(raw).tokens
    assert tokens["url:a2200.tripod.com.co"] == 1  # from an <img src> of the markup
    assert tokens["from:mail.com"] == 1 and tokens["mime:text/html"] == 1


def test_rfc2047_quoted_printable_subject(data_dir):
    raw = corpus_message(
        data_dir, "spamassassin", "easy_ham/02434.37126367f2a918fead5ff8ea834cc334"
    )
    mail = read_mail(raw)
    assert mail.subject == "Re: RE: [zzzzteana] Sitting Bull über alles [Long]"
    assert mail.from_addrs == ["billjac@earthlink.net"]
    assert "subject:über" in Featurizer().from_raw(raw).tokens


def test_gb2312_message_with_base64_subject(data_dir):
    raw = corpus_message(data_dir, "chinese-spam", "data/normal/201")
    mail = read_mail(raw)
    assert mail.subject == "● [代发]招聘内容编辑一名，欢迎推荐"
    assert mail.text.startswith("项目管理者联盟招聘内容编辑一名，欢迎大家帮忙推荐。")
    tokens = Featurizer().from_raw(raw).tokens
    assert tokens["subject:招聘"] == 1 and tokens["招聘"] >= 1
    assert tokens["url:www.mypm.net"] == 1 and tokens["charset:gb2312"] == 1


def test_undeclared_gbk_body_and_raw_8bit_subject(data_dir):
    # multipart/alternative with no parts in the body and no charset anywhere
    raw = corpus_message(data_dir, "chinese-spam", "data/normal/282")
    mail = read_mail(raw)
    assert mail.subject == "Re: 明天北京的同学想聚一聚 (转载)"
    assert mail.text.startswith("报了北大的暑期课程")


def test_mislabelled_utf8_that_is_gbk(data_dir):
    raw = corpus_message(data_dir, "chinese-spam", "data/normal/2629")
    assert b'charset="utf-8"' in raw
    assert read_mail(raw).text.startswith("我也没有找到工作呢")


# --- hand-made MIME ------------------------------------------------------------------------------


def test_nested_multipart_quoted_printable_and_attachments():
    raw = b"""From: a@b.com
Subject: test
Content-Type: multipart/mixed; boundary="outer"

preamble is not text
--outer
Content-Type: multipart/alternative; boundary="outer-inner"

--outer-inner
Content-Type: text/plain; charset=iso-8859-1
Content-Transfer-Encoding: quoted-printable

caf=E9 cr=
=E8me
--outer-inner
Content-Type: text/html

<p>caf&eacute; <b>cr&egrave;me</b></p>
--outer-inner--
--outer
Content-Type: application/pdf
Content-Disposition: attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf
Content-Transfer-Encoding: base64

JVBERi0xLjQK
--outer--
epilogue is not text
"""
    mail = read_mail(raw)
    assert [p.text for p in mail.parts] == ["café crème", "café  crème"]
    assert [(a.filename, a.content_type) for a in mail.attachments] == [
        ("résumé.pdf", "application/pdf")
    ]
    assert mail.n_parts == 5 and mail.content_type == "multipart/mixed"


def test_crlf_line_ends_and_mbox_from_line():
    raw = b"From someone Mon Jan 1\r\nSubject: hi\r\nFrom: x@y.org\r\n\r\nline one\r\nline two\r\n"
    mail = read_mail(raw)
    assert mail.subject == "hi" and mail.from_addrs == ["x@y.org"]
    assert mail.text == "line one\nline two\n"


def test_folded_headers_and_encoded_words_across_lines():
    raw = b"Subject: =?utf-8?b?5Y+R56Wo?=\n =?utf-8?b?5LyY5oOg?= now\nTo: a@b.com,\n\tc@d.org\n\nx"
    mail = read_mail(raw)
    assert mail.subject == "发票优惠 now"
    assert mail.to_addrs == ["a@b.com", "c@d.org"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0b\x1f\xa0\u2003")), max_size=40))
def test_folded_values_become_one_line_with_single_spaces_at_the_folds(value):
    assert mail_module._join_lines(value) == re.sub(r"\s*\n\s*", " ", value).strip()


def test_boundary_that_prefixes_a_nested_boundary():
    raw = (
        b"Content-Type: multipart/mixed; boundary=AB\n\n--AB\n"
        b"Content-Type: multipart/alternative; boundary=ABC\n\n--ABC\n\nin inner\n--ABC--\n"
        b"--AB\n\nsecond\n--AB--\n"
    )
    assert [p.text.strip() for p in read_mail(raw).parts] == ["in inner", "second"]


def test_forwarded_message_is_read():
    raw = (
        b"Content-Type: message/rfc822\n\n"
        b"Subject: inner\nContent-Type: text/plain\n\nforwarded body\n"
    )
    assert read_mail(raw).text == "forwarded body\n"


def test_text_without_headers_is_body():
    mail = read_mail(b"just some words, no headers at all")
    assert mail.text == "just some words, no headers at all" and mail.headers == {}


def test_html_invisible_parts_are_dropped_and_title_kept():
    raw = (
        b"Content-Type: text/html\n\n<html><head><title>Cheap meds</title>"
        b"<style>p {color: red}</style></head><body><p>Buy &amp; save</p>"
        b"<script>track()</script><!-- hidden words --></body></html>"
    )
    text = read_mail(raw).text
    assert "Cheap meds" in text and "Buy & save" in text
    for hidden in ("color", "track", "hidden"):
        assert hidden not in text


markup_pieces = st.lists(
    st.sampled_from(["<", "s", "S", "<s", "<S", "cript", "CRIPT", "tyle", "TYLE", "<script",
                     "<Style", "<noscript", "<sCript", "<NOSCRIPT", "<no", "script", ">", " ",
                     "é", "\U0001f600", "<p>"]),
    max_size=12,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(markup=markup_pieces)
def test_the_invisible_mark_search_is_the_check_for_each_spelling(markup):
    # One regex search stands for a substring check of each spelling: the same answer, so
    # the same documents get their script/style elements stripped.
    found = html_module._INVISIBLE_MARK_RE.search(markup) is not None
    assert found == any(mark in markup for mark in html_module._INVISIBLE_MARKS)


@pytest.mark.parametrize("method", ["selectolax", "strip"])
def test_html_methods_agree_on_simple_markup(method):
    raw = b"Content-Type: text/html\n\n<p>Hello <b>world</b> &euro;5</p>"
    tokens = Featurizer(FeaturizerOptions(html=method)).from_raw(raw).tokens
    assert tokens["hello"] == 1 and tokens["world"] == 1


def test_html_detected_in_a_part_without_a_declared_type():
    raw = b"Content-Type: text/x-unknown\n\n<html><body><p>visible</p></body></html>"
    mail = read_mail(raw)
    assert mail.parts[0].html is not None and mail.text == "visible"


# --- charsets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "encoding", "label"),
    [
        ("正规发票", "gbk", "gb2312"),  # a GBK-only character under a GB2312 label
        ("镕基", "gb18030", "gb2312"),
        ("發票優惠", "big5", "big5"),
        ("Привет мир", "koi8-r", "koi8-r"),
        ("ｶﾀｶﾅ 日本語", "cp932", "shift_jis"),
        ("한국어", "cp949", "ks_c_5601-1987"),
        ("€5 – “quoted”", "cp1252", "iso-8859-1"),  # Windows bytes under a Latin-1 label
        ("naïve", "utf-8", "us-ascii"),  # UTF-8 under an ASCII label
    ],
)
def test_charset_labels_and_their_real_world_supersets(text, encoding, label):
    body = text.encode(encoding)
    raw = b"Content-Type: text/plain; charset=" + label.encode() + b"\n\n" + body
    assert read_mail(raw).text == text


@pytest.mark.parametrize(
    "label", ["x-unknown", "rot13", "base64", "idna", "", "a" * 300, "utf-7\0"]
)
def test_unusable_charset_labels_fall_back(label):
    raw = b"Content-Type: text/plain; charset=" + label.encode() + b"\n\ncaf\xe9 au lait"
    assert read_mail(raw).text == "café au lait"


def test_charset_hint_from_an_encoded_word_reads_undeclared_8bit_text():
    subject = base64.b64encode("测试".encode("gbk"))
    raw = b"Subject: =?gb2312?B?" + subject + b"?=\n\n" + "正文内容".encode("gbk")
    mail = read_mail(raw)
    assert mail.subject == "测试" and mail.text == "正文内容"


def test_codec_for_maps_labels():
    assert codec_for("GB2312") == codec_for("gbk") == "gb18030"
    assert codec_for('"ISO-8859-1"') == "cp1252"
    assert codec_for("nonsense") is None and codec_for("unicode_escape") is None


def test_decode_text_never_raises_on_garbage():
    for label in (None, "utf-8", "gb2312", "big5", "utf-16", "hz", "iso-2022-jp"):
        assert isinstance(decode_text(bytes(range(256)) * 3, label), str)
