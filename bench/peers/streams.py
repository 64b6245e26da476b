"""The streams every filter is run on: which corpus, in which order, with what masked."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from streamnb.codec import Message
from streamnb.evaluation.corpora import read_corpus
from streamnb.evaluation.views import VIEWS, view_messages

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@dataclass(frozen=True)
class Stream:
    name: str
    path: str  # relative to the data folder
    shuffle: int | None
    mask_received: bool = False
    mask_message_id: bool = False
    description: str = ""
    view: str = "original"  # streamnb.evaluation.views: the form the mail is given in
    mail: bool = True  # raw mail, so it has views (SMS is text: every view is the original)
    views: bool = True  # replayed in each view by --views (a view keeps no Message-ID anyway)


STREAMS = {
    "spamassassin": Stream(
        "spamassassin", "spamassassin", 1, description="SpamAssassin public corpus, shuffle 1"
    ),
    "sms": Stream(
        "sms",
        "sms-spam-collection/SMSSpamCollection",
        None,
        description="SMS Spam Collection, corpus order",
        mail=False,
    ),
    "chinese": Stream(
        "chinese",
        "chinese-spam",
        1,
        mask_received=True,
        description="trec06c subset (shared 40%), shuffle 1, Received: headers removed",
    ),
    "chinese-no-msgid": Stream(
        "chinese-no-msgid",
        "chinese-spam",
        1,
        mask_received=True,
        mask_message_id=True,
        description="the chinese stream with its Message-ID: headers removed as well (the spam's "
        "name a spam gateway, @spam-gw.ccert.edu.cn, in 3,121 of 3,190)",
        views=False,
    ),
}

_RECEIVED = re.compile(rb"^received:", re.IGNORECASE)
_MESSAGE_ID = re.compile(rb"^message-id:", re.IGNORECASE)


def mask_received(raw: bytes) -> bytes:
    """``raw`` without its ``Received:`` header lines (and their continuation lines).

    In the Chinese set one relay in ``Received:`` separates spam from ham almost perfectly, so
    every filter gets the mail without them.

    >>> mask_received(b"Received: from a\\n\\tby b\\nSubject: hi\\n\\nReceived: body line\\n")
    b'Subject: hi\\n\\nReceived: body line\\n'
    """
    return mask_header(raw, _RECEIVED)


def mask_header(raw: bytes, field: re.Pattern[bytes]) -> bytes:
    """``raw`` without the header lines that ``field`` matches (and their continuation lines).

    >>> mask_header(b"Message-ID: <1@spam-gw>\\nSubject: hi\\n\\nbody\\n", _MESSAGE_ID)
    b'Subject: hi\\n\\nbody\\n'
    """
    match = re.search(rb"\r?\n\r?\n", raw)
    head, body = (raw[: match.start()], raw[match.start():]) if match else (raw, b"")
    kept, skipping = [], False
    for line in head.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t") and skipping:
            continue
        skipping = bool(field.match(line))
        if not skipping:
            kept.append(line)
    return b"".join(kept).rstrip(b"\r\n") + body if kept else body.lstrip(b"\r\n")


def load(stream: Stream, data: Path, limit: int | None = None) -> list[Message]:
    corpus = read_corpus(data / stream.path, shuffle=stream.shuffle, limit=limit)
    messages = corpus.messages
    if stream.mask_received:
        messages = [
            Message(id=m.id, label=m.label, raw=mask_received(m.raw)) for m in messages
        ]
    if stream.mask_message_id:
        messages = [
            Message(id=m.id, label=m.label, raw=mask_header(m.raw, _MESSAGE_ID))
            for m in messages
        ]
    return view_messages(messages, stream.view)


def stream_named(name: str) -> Stream:
    """A stream of :data:`STREAMS` by name, or ``<stream>+<view>`` for one of its views.

    >>> stream_named("spamassassin+subject-noblank").view
    'subject-noblank'
    """
    base, _, view = name.partition("+")
    if view and view not in VIEWS:
        raise KeyError(name)
    return in_view(STREAMS[base], view or "original")


def with_views(names: list[str], views: list[str]) -> list[str]:
    """``names`` with, after each mail stream, its ``<stream>+<view>`` for each of ``views``.

    >>> with_views(["spamassassin", "sms"], ["body-only", "html-text"])
    ['spamassassin', 'spamassassin+body-only', 'spamassassin+html-text', 'sms']
    """
    out = []
    for name in names:
        out.append(name)
        stream = stream_named(name)
        if stream.mail and stream.views and stream.view == "original":
            out += [f"{name}+{view}" for view in views if view != "original"]
    return out


def in_view(stream: Stream, view: str) -> Stream:
    """``stream`` with its mail rewritten into ``view``, named ``<stream>+<view>``."""
    if view == "original":
        return stream
    return replace(stream, name=f"{stream.name}+{view}", view=view,
                   description=f"{stream.description}, view {view}")
