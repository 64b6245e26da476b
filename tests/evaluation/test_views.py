"""Views: raw mail rewritten into the forms public corpora come in, and read back by streamnb."""

from __future__ import annotations

import base64
import re

import pytest

from streamnb.codec import Message
from streamnb.evaluation.corpora import read_corpus
from streamnb.evaluation.views import VIEWS, view_mail, view_messages
from streamnb.features import Featurizer, FeaturizerOptions, read_mail

MULTIPART = (
    b"From: Ann <ann@example.com>\nSubject: =?utf-8?q?Caf=C3=A9?= offer\n"
    b"Content-Type: multipart/alternative; boundary=B\n\n--B\n"
    b"Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: base64\n\n"
    + base64.b64encode("Cheap café now\n".encode()) + b"\n--B\n"
    b"Content-Type: text/html\n\n<html><style>p{}</style><p>Cheap <b>pills</b></p></html>\n"
    b"--B\nContent-Type: application/pdf\n\n%PDF\n--B--\n"
)


def test_views_of_a_multipart_mail():
    assert view_mail(MULTIPART, "original") == MULTIPART
    subject = "Subject: Café offer\n".encode()
    text = b"Cheap caf\xc3\xa9 now\n"
    html = b"<html><style>p{}</style><p>Cheap <b>pills</b></p></html>"  # "\n": the boundary's
    assert view_mail(MULTIPART, "subject-blank") == subject + b"\n" + text + b"\n" + html
    assert view_mail(MULTIPART, "subject-noblank") == subject + text + b"\n" + html
    assert view_mail(MULTIPART, "body-only") == text + b"\n" + html
    assert view_mail(MULTIPART, "html-text") == subject + text + b"\nCheap pills\n"


@pytest.mark.parametrize("view", [v for v in VIEWS if v != "original"])
def test_streamnb_reads_every_view_as_subject_and_body(view):
    mail = read_mail(view_mail(MULTIPART, view))
    assert mail.subject == ("" if view == "body-only" else "Café offer")
    assert "Cheap café now" in mail.text
    assert "pills" in mail.text
    tokens = Featurizer().from_raw(view_mail(MULTIPART, view)).tokens
    assert {"cheap", "café", "now", "pills"} <= set(tokens)


def test_8bit_subject_and_body_keep_their_bytes():
    subject, body = "发票优惠活动".encode("gbk"), "优惠价格开始".encode("gbk")
    raw = b"Subject: " + subject + b"\nContent-Type: text/plain\n\n" + body + b"\n"
    assert view_mail(raw, "subject-noblank") == b"Subject: " + subject + b"\n" + body + b"\n"
    mail = read_mail(view_mail(raw, "subject-noblank"))
    assert mail.subject == "发票优惠活动" and mail.text == "优惠价格开始\n"


def test_multipart_whose_boundary_never_occurs_keeps_its_text():
    raw = b"Subject: x\nContent-Type: multipart/mixed; boundary=Q\n\nplain words\n"
    assert view_mail(raw, "body-only") == b"plain words\n"


def test_view_messages_leaves_text_messages_and_rejects_unknown_views():
    messages = [Message(id="a", label="ham", raw=MULTIPART), Message(id="b", label="spam",
                                                                      text="hi")]
    viewed = view_messages(messages, "body-only")
    assert viewed[0].raw == view_mail(MULTIPART, "body-only") and viewed[1] is messages[1]
    with pytest.raises(ValueError, match="unknown view"):
        view_mail(MULTIPART, "subject-only")


def _has_body_words(featurizer: Featurizer, raw: bytes) -> bool:
    return any(":" not in t for t in featurizer.from_raw(raw).tokens)


@pytest.mark.slow
def test_no_view_of_a_corpus_mail_loses_its_body(data_dir):
    corpus = read_corpus(data_dir / "spamassassin")
    # max_seconds is wall clock: on a loaded machine a long mail can pass the default 1 s and
    # be cut short, which is not what this test is about.
    featurizer = Featurizer(FeaturizerOptions(max_seconds=120.0))
    wordless = {m.id for m in corpus.messages if not _has_body_words(featurizer, m.raw)}
    assert len(wordless) == 16  # image-only spam
    for view in VIEWS[1:]:
        viewed = corpus.in_view(view)
        assert viewed.view == view and len(viewed) == len(corpus)
        lost = []
        for message in viewed.messages:
            if message.id in wordless or _has_body_words(featurizer, message.raw):
                continue
            rest = message.raw.partition(b"\n")[2] if view != "body-only" else message.raw
            if view == "html-text" and not re.search(rb"[A-Za-z]{2}", rest):
                continue  # HTML with no visible text (images, links)
            if view == "subject-noblank" and rest[:1] in (b" ", b"\t"):
                continue  # a body starting with white space continues the subject
            lost.append(message.id)
        assert lost == [], view
