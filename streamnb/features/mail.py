"""Raw RFC 822 / MIME bytes -> the text fields of a mail (:func:`read_mail`).

A small reader of our own rather than :mod:`email`: the standard parser walks the message line
by line in Python and builds objects for every header, which costs more than everything else
the featurizer does. This one splits with ``bytes.find``/``bytes.split`` and regexes, decodes
transfer encodings with :mod:`binascii` and charsets with :mod:`streamnb.features.charsets`,
and keeps only what featurization needs.

Broken mail is read as well as it can be, never rejected for its structure: no blank line after
the headers, a boundary that never closes, a ``multipart`` body with no boundary in it, bad
base64, unknown charsets. Work is bounded by the options' limits (bytes, parts, depth, text,
time); each limit hit is named in :attr:`ParsedMail.truncated`, or raised as a
:class:`FeaturizationError` when ``on_limit = "reject"``.

>>> raw = (b"From: Ann <ann@mail.example.co.uk>\\r\\nTo: bob@example.org\\r\\n"
...        b"Subject: =?utf-8?q?Caf=C3=A9_news?=\\r\\n"
...        b"Content-Type: multipart/mixed; boundary=XX\\r\\n\\r\\n"
...        b"--XX\\r\\nContent-Type: text/html; charset=gb2312\\r\\n"
...        b"Content-Transfer-Encoding: base64\\r\\n\\r\\n"
...        + __import__("base64").b64encode("<p>发票 <b>now</b></p>".encode("gbk"))
...        + b"\\r\\n--XX\\r\\nContent-Type: application/pdf; name=\\"bill.pdf\\"\\r\\n"
...        + b"\\r\\n%PDF\\r\\n--XX--\\r\\n")
>>> mail = read_mail(raw)
>>> mail.subject, mail.from_addrs, mail.to_addrs
('Café news', ['ann@mail.example.co.uk'], ['bob@example.org'])
>>> [(p.content_type, p.charset, p.text) for p in mail.parts]
[('text/html', 'gb2312', '发票 now')]
>>> [(a.filename, a.content_type, a.size) for a in mail.attachments]
[('bill.pdf', 'application/pdf', 4)]
>>> registrable_domain("mail.example.co.uk"), mail.truncated
('example.co.uk', ())
"""

from __future__ import annotations

import binascii
import re
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from streamnb.features import native as _native_path
from streamnb.features.charsets import codec_for, decode_text
from streamnb.features.errors import FeaturizationError
from streamnb.features.html import MAX_PARSED_TAGS, html_to_text
from streamnb.features.options import FeaturizerOptions

__all__ = [
    "Attachment",
    "DEFECTS",
    "Budget",
    "ParsedMail",
    "TextPart",
    "decode_header",
    "read_mail",
    "registrable_domain",
]

_DEFAULT_OPTIONS = FeaturizerOptions()
# The C extension's reading steps, unless pure Python (read_mail's ``native``): the header
# fields picked (_parse_headers' regexes), the values of a plain block unfolded (_unfold) and
# the addresses of an ASCII value found (ADDRESS_RE), each by the rule of the Python beside it.
_in_c = _native_path._tokens if _native_path.enabled() else None

#: What :attr:`ParsedMail.defects` can name. The reader never drops text for a defect; each says
#: how it read the mail anyway.
DEFECTS = {
    "no_headers": "the message does not start with a header field: all of it is body",
    "missing_header_body_separator": "no empty line after the headers: the body starts at the "
    "first line that is not a header field (or not a known one)",
    "first_line_is_continuation": "the headers start with a continuation line (a cut header)",
    "encoded_word_split_across_lines": "an encoded word folded with no white space before its "
    "rest: the line is joined to the field",
    "invalid_content_type": "a Content-Type without a type/subtype: read as text/plain",
    "multipart_without_boundary": "a multipart with no boundary parameter: its body read as text",
    "boundary_not_found": "a multipart whose boundary never occurs: its body read as text",
    "close_boundary_not_found": "no closing boundary: the last part runs to the end",
    "unknown_transfer_encoding": "a Content-Transfer-Encoding RFC 2045 does not define: "
    "the body read as it is",
    "invalid_base64": "a base64 body with bytes outside the alphabet or bad padding: repaired",
    "html_too_many_tags": "an HTML part with more than MAX_PARSED_TAGS tags: its text read by "
    "the linear tag strip, not the HTML parser",
}

# Interned, as the names _header_re gives the fields: _tokens.first_values then finds each
# by identity, without comparing strings.
_MIME_HEADERS = tuple(map(sys.intern, ("content-type", "content-transfer-encoding",
                                       "content-disposition")))
# The longest run of header lines at the start of an entity (RFC 5322 2.2, 3.6.8): fields
# and continuation lines (starting with white space), after an optional mbox "From " line.
# Some archived articles start with the continuation lines of a header whose first line was
# cut. A field name is printable ASCII but ':' (real mail has "X-Copyright(C)", ">Received"),
# '<' and '/', and not followed by "//": a first line "<html><title>::...", "http://..." or
# "/etc/init.d/httpd: ..." is text, not a field. White space before the colon is the obsolete
# syntax. Possessive quantifiers: linear on a long first line with no colon.
_FIELD_NAME = rb"[!-.0-9;=-~]++[ \t]*+:(?!//)"
_HEADER_LINES_RE = re.compile(
    rb"(?:From [^\n]*+(?:\n|\Z))?(?:(?:[ \t]|" + _FIELD_NAME + rb")[^\n]*+(?:\n|\Z))*+"
)
# An encoded word left open at the end of a line, and the rest of one at the start of a line.
_OPEN_ENCODED_WORD_RE = re.compile(rb"=\?[^?\s]{1,40}\?[bBqQ]\?[^?\s]{0,200}$")
_ENCODED_WORD_TAIL_RE = re.compile(rb"[^?\s]{1,200}\?=")
_FIELD_NAME_RE = re.compile(rb"([!-.0-9;=-~]++)[ \t]*+:")
# Fields that identify a header block when no empty line closes it (RFC 5322, 2045, 2369,
# Usenet's 5536, and what mail systems add); see _split_entity.
_KNOWN_FIELDS = frozenset(
    b"""
    date from sender reply-to to cc bcc message-id in-reply-to references subject comments
    keywords received return-path delivered-to envelope-to errors-to mime-version precedence
    organization user-agent importance priority sensitivity thread-topic thread-index
    disposition-notification-to return-receipt-to authentication-results received-spf
    dkim-signature domainkey-signature newsgroups path followup-to distribution summary lines
    approved xref expires supersedes article-id status
    """.split()
)
_KNOWN_FIELD_PREFIXES = (b"x-", b"content-", b"list-", b"resent-", b"arc-", b"nntp-")
# Encoded words may not contain spaces, but mailers wrote "=?GB2312?Q?Re: =D4=AD...?=" anyway.
_ENCODED_WORD_RE = re.compile(r"=\?([^?\s]{1,40})\?([bBqQ])\?([^?]*)\?=")
_ENCODED_WORD_CHARSET_RE = re.compile(rb"=\?([!-~]{1,40}?)\?[bBqQ]\?")
_BETWEEN_ENCODED_WORDS_RE = re.compile(r"(\?=)\s+(=\?)")
_PARAM_RE = re.compile(
    r';\s*([!#-\'*+.0-9A-Z^-~-]+?)(\*\d*\*?)?\s*=\s*("(?:[^"\\]|\\.)*"?|[^;\s]*)', re.S
)
# The look-behind makes a match start only where a run of address characters starts: without
# it, a long run with no "@" is rescanned from every position in it (quadratic).
_LOCAL = r"[\w.!#$%&'*+/=?^`{|}~-]"
ADDRESS_RE = re.compile(rf"(?<!{_LOCAL}){_LOCAL}+@[\w-]+(?:\.[\w-]+)+")
_BASE64_JUNK_RE = re.compile(rb"[^A-Za-z0-9+/]")
#: Labels under which a country's domains have three labels (``example.co.uk``).
SECOND_LEVEL_LABELS = frozenset(
    {"co", "com", "net", "org", "gov", "edu", "ac", "or", "ne", "go", "gob", "mil", "nom"}
)


@dataclass(slots=True)
class TextPart:
    """A text part of a mail: its visible text and, for HTML, the markup it came from."""

    content_type: str  # "text/plain", "text/html", ...
    charset: str | None  # as declared (None if not)
    text: str  # visible text
    html: str | None = None  # decoded markup of an HTML part (links and images live here)


@dataclass(slots=True)
class Attachment:
    """A non-text part: its file name (if any), declared type and decoded size in bytes."""

    filename: str | None
    content_type: str
    size: int


@dataclass(slots=True)
class ParsedMail:
    """What :func:`read_mail` found in a message. Header values are decoded text."""

    headers: dict[str, list[str]] = field(default_factory=dict)  # lower-case field -> values
    subject: str = ""
    from_addrs: list[str] = field(default_factory=list)
    to_addrs: list[str] = field(default_factory=list)  # To and Cc
    parts: list[TextPart] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    content_type: str = "text/plain"  # of the top-level entity
    charsets: list[str] = field(default_factory=list)  # every charset declared, in order
    n_parts: int = 0  # MIME entities visited, the top level included
    size: int = 0  # raw bytes (before truncation)
    #: The limits (``max_bytes``, ``max_parts``, ...) that cut this message short, in the order
    #: they were hit; () when all of it was read.
    truncated: tuple[str, ...] = ()
    #: What was irregular in the message's structure (:data:`DEFECTS`), each once, in the
    #: order found; () for well-formed mail. Nothing is dropped for a defect.
    defects: tuple[str, ...] = ()
    #: The top-level header block as read (line ends ``\n``, no separator line): the layout
    #: tokens of :mod:`streamnb.features.header_layout` come from it.
    header_block: bytes = b""

    def header(self, name: str) -> str:
        """The first value of header ``name`` ('' if absent)."""
        values = self.headers.get(name.lower())
        return values[0] if values else ""

    @property
    def from_domains(self) -> list[str]:
        return [registrable_domain(a.rpartition("@")[2]) for a in self.from_addrs]

    @property
    def to_domains(self) -> list[str]:
        return [registrable_domain(a.rpartition("@")[2]) for a in self.to_addrs]

    @property
    def text(self) -> str:
        """All visible text of the mail's text parts, one part after another."""
        parts = self.parts
        if len(parts) == 1:  # most mail: the part's own str, not a copy
            return parts[0].text
        return "\n".join([p.text for p in parts])


class Budget:
    """The limits of one message: remembers which were hit, or raises in "reject" mode."""

    __slots__ = ("options", "deadline", "hit", "text_left")

    _REASONS = {
        "max_bytes": "too_large",
        "max_parts": "too_many_parts",
        "max_depth": "too_deep",
        "max_text_chars": "too_much_text",
        "max_tokens": "too_many_tokens",
        "max_seconds": "timeout",
    }

    def __init__(self, options: FeaturizerOptions):
        self.options = options
        self.deadline = time.perf_counter() + options.max_seconds
        self.hit: list[str] = []
        self.text_left = options.max_text_chars

    def exceeded(self, limit: str) -> None:
        """Record that ``limit`` cut the message short (or reject the message)."""
        if self.options.on_limit == "reject":
            raise FeaturizationError(
                self._REASONS[limit], f"the message exceeds {limit}={getattr(self.options, limit)}"
            )
        if limit not in self.hit:
            self.hit.append(limit)

    def out_of_time(self) -> bool:
        if time.perf_counter() > self.deadline:
            self.exceeded("max_seconds")
            return True
        return False

    def take_text(self, data: bytes) -> bytes:
        """``data`` cut to the text budget left (a byte is at most one character)."""
        if len(data) > self.text_left:
            self.exceeded("max_text_chars")
            data = data[: self.text_left]
        return data

    def spend_text(self, text: str) -> str:
        if len(text) > self.text_left:
            self.exceeded("max_text_chars")
            text = text[: self.text_left]
        self.text_left -= len(text)
        return text


def read_mail(
    raw: bytes,
    options: FeaturizerOptions = _DEFAULT_OPTIONS,
    budget: Budget | None = None,
    *,
    native: bool | None = None,
) -> ParsedMail:
    """Read raw RFC 822 bytes into a :class:`ParsedMail`, within ``options``' limits.

    ``native``: whether the header steps run in the C extension (the same result); ``None``
    takes C when :func:`streamnb.features.native.enabled` says so.
    """
    c = _in_c if native is None else _native_path._tokens if native else None
    if native and c is None:
        raise RuntimeError("the C extension streamnb.features._tokens is not built")
    if budget is None:
        budget = Budget(options)
    size = len(raw)
    if size > options.max_bytes:
        budget.exceeded("max_bytes")
        raw = raw[: options.max_bytes]
    raw = bytes(raw)
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    header_fields = options.header_fields
    last = _last_wanted  # the fields of the options before (a featurizer's, every mail)
    wanted = last[1] if last[0] is header_fields else _remember_wanted(header_fields)
    if c is not None and wanted.names is not _REGEX_ONLY:
        # Nearly all mail: header lines closed by an empty line, read in one call into C
        top = c.read_top(raw, wanted.names, _MIME_HEADERS)
        if top is not None:
            return _read_closed(top, size, options, budget, c)
    mail = ParsedMail(size=size)
    defects: list[str] = []
    header_block, body = _split_entity(raw, defects, c)
    headers = _parse_headers(header_block, wanted, c)
    # 8-bit text with no (usable) charset of its own is read with one the message declares
    # elsewhere: in an encoded word of a header, or in a Content-Type.
    encoded_words = b"=?" in header_block if c is None else c.has_encoded_word(header_block)
    hint = _encoded_word_charset(headers) if encoded_words else None
    _read_entities(mail, headers, body, hint, options, budget, defects, c)
    _read_header_values(mail, headers, header_block, encoded_words, hint, options, c)
    mail.truncated = tuple(budget.hit)
    mail.defects = tuple(defects)
    mail.header_block = header_block
    return mail


def _read_closed(top: tuple, size: int, options: FeaturizerOptions, budget: Budget, c):
    """:func:`read_mail` of a mail whose header lines an empty line closes, from what
    ``_tokens.read_top`` found: the header block and body, the MIME field values of the top
    entity, and for a plain block (ASCII, no encoded word) the header values unfolded, the
    subject and the addresses. A mail of one part (nine in ten) takes :func:`_read_entities`'
    steps for it without the walk."""
    (header_block, body, headers, top_values, encoded_words, plain_headers, subject,
     from_addrs, to_addrs) = top
    if plain_headers is None:
        mail = ParsedMail(size=size)
    else:
        mail = ParsedMail(plain_headers, subject, from_addrs, to_addrs, size=size)
    defects: list[str] = []
    hint = _encoded_word_charset(headers) if encoded_words else None
    fields = _TOP_PART_FIELDS.get(top_values)
    if fields is None:
        fields = _top_part_fields(top_values)
    if fields.maintype == "multipart" or fields.ctype in _ENCLOSING or options.max_parts < 1:
        _read_entities(mail, headers, body, hint, options, budget, defects, c, top_values)
    else:
        mail.n_parts = 1
        hint = _note_part(mail, fields, True, hint, defects)
        _read_leaf(mail, fields, fields.ctype, fields.maintype, body, hint, options, budget,
                   defects)
    if plain_headers is None:
        _read_header_values(mail, headers, header_block, encoded_words, hint, options, c)
    mail.truncated = tuple(budget.hit)
    mail.defects = tuple(defects)
    mail.header_block = header_block
    return mail


def _top_part_fields(top_values: tuple[bytes | None, ...]) -> _PartFields:
    """``_part_fields`` of a top entity's MIME field values, kept in ``_TOP_PART_FIELDS``
    (looked up by the tuple ``read_top`` gives, without a call) where it would keep them."""
    fields = _part_fields(*top_values, "text/plain")
    if len(_TOP_PART_FIELDS) < _TOP_PART_FIELDS_KEPT and all(
        v is None or len(v) <= _CACHED_CONTENT_TYPE_CHARS for v in top_values
    ):
        _TOP_PART_FIELDS[top_values] = fields
    return fields


# A stream's top entities carry a few hundred distinct short combinations of MIME values:
# the first 4,096 are kept for good (a hostile stream's are read every time, as before).
_TOP_PART_FIELDS: dict[tuple[bytes | None, ...], _PartFields] = {}
_TOP_PART_FIELDS_KEPT = 4096


def _read_header_values(
    mail: ParsedMail,
    headers: list[tuple[str, bytes]],
    header_block: bytes,
    encoded_words: bool,
    hint: str | None,
    options: FeaturizerOptions,
    c,
) -> None:
    """``mail.headers`` (the values decoded), its subject and addresses, from the raw
    ``headers`` (``hint``: the charset of 8-bit text with none of its own)."""
    if hint is None and mail.charsets:
        hint = mail.charsets[0]
    plain = header_block.isascii() and not encoded_words  # nearly all mail: nothing to decode
    default = options.default_charset
    if plain and c is not None:
        c.unfold_headers(headers, mail.headers)
    else:
        for name, value in headers:
            text = _unfold(value) if plain else decode_header(value, hint, default)
            mail.headers.setdefault(name, []).append(text)
    mail.subject = mail.header("subject")
    for name in ("from", "sender", "reply-to"):
        for value in mail.headers.get(name, ()):
            mail.from_addrs += _addresses(value, c)
        if mail.from_addrs:
            break
    for name in ("to", "cc"):
        for value in mail.headers.get(name, ()):
            mail.to_addrs += _addresses(value, c)


def _addresses(value: str, c) -> list[str]:
    """The addresses of a header value, lower-cased (``c``: the C extension, or None)."""
    if c is not None and value.isascii():
        return c.addresses(value)
    return [a.lower() for a in ADDRESS_RE.findall(value)]


# Headers always read (the reader itself needs them); ``options.header_fields`` adds more.
_ALWAYS_READ = ("subject", "from", "to", "cc", "sender", "reply-to", *_MIME_HEADERS)


class _Fields(NamedTuple):
    """The header fields a reader reads: ``pattern`` picks them, and ``_tokens.header_fields``
    does the same in C with ``names``: (lower-case bytes, str) of each name, None for every
    field, or :data:`_REGEX_ONLY` for a name that is not a plain field name."""

    pattern: re.Pattern[bytes]
    names: tuple[tuple[bytes, str], ...] | None | object


_REGEX_ONLY = object()
_EVERY_FIELD_RE = re.compile(rb"^([!-9;-~]+)[ \t]*:[ \t]*(.*(?:\n[ \t].*)*)", re.M)
_PLAIN_FIELD_NAME_RE = re.compile(rb"[!-9;-~]+")


@lru_cache(maxsize=32)
def _header_re(names: tuple[str, ...]) -> _Fields:
    """The header lines (with their folded continuations) of the fields ``names``.

    Matching only the wanted fields skips the dozens of ``Received``/``X-`` lines a mail carries
    without making an object for each.
    """
    encoded = [n.encode("ascii", "ignore") for n in names]
    alternatives = b"|".join(re.escape(n) for n in encoded)
    pattern = re.compile(rb"^(" + alternatives + rb")[ \t]*:[ \t]*(.*(?:\n[ \t].*)*)", re.M | re.I)
    # With names of field-name bytes only, the regex's match is the line's whole name (white
    # space or the colon ends it), compared without case: what the C scan does.
    in_c = all(_PLAIN_FIELD_NAME_RE.fullmatch(n) for n in encoded)
    return _Fields(pattern, tuple((n.lower(), sys.intern(n.lower().decode())) for n in encoded)
                   if in_c else _REGEX_ONLY)


@lru_cache(maxsize=32)
def _wanted_headers(header_fields: tuple[str, ...]) -> _Fields:
    if "*" in header_fields:  # every field: any name of printable characters but the colon
        return _Fields(_EVERY_FIELD_RE, None)
    return _header_re(tuple(dict.fromkeys(_ALWAYS_READ + header_fields)))


_MIME_FIELDS = _header_re(_MIME_HEADERS)

# (header_fields, _wanted_headers(header_fields)) of the mail read last: read_mail finds the
# fields by the tuple's identity, without _wanted_headers' hash of its score of names.
_last_wanted: tuple[tuple[str, ...] | None, _Fields | None] = (None, None)


def _remember_wanted(header_fields: tuple[str, ...]) -> _Fields:
    global _last_wanted
    wanted = _wanted_headers(header_fields)
    _last_wanted = (header_fields, wanted)
    return wanted


def _header_lines_end(data: bytes, pos: int, c) -> int:
    """Where the run of header lines from ``pos`` ends (``c``: the C extension, or None)."""
    if c is not None:
        return c.header_lines_end(data, pos)
    return _HEADER_LINES_RE.match(data, pos).end()


def _split_entity(data: bytes, defects: list[str], c=None) -> tuple[bytes, bytes]:
    """(header block, body) of an entity, as mail software draws the line (RFC 5322 2.1).

    The header block ends at the first line that is neither a header field nor a continuation
    line; an empty line there is the separator and is dropped, any other line starts the body
    (the standard library's ``MissingHeaderBodySeparatorDefect``). Irregular forms are noted
    in ``defects``. ``c``: the C extension for the header-line scan, or None.
    """
    if data.startswith(b"\n"):
        return b"", data[1:]
    end = _header_lines_end(data, 0, c)
    if end and data.startswith(b"\n", end) and data[0] not in b" \t":  # nearly all mail
        return data[: end - 1], data[end + 1 :]
    end, glued = _glue_split_encoded_words(data, end, c)
    if glued:
        _note(defects, "encoded_word_split_across_lines")
        starts, ends = (0, *glued), (*(g - 1 for g in glued), None)  # each newline left out
        data = b"".join(data[a:b] for a, b in zip(starts, ends, strict=True))
        end -= len(glued)
    return _split_irregular(data, end, defects)


def _glue_split_encoded_words(data: bytes, end: int, c=None) -> tuple[int, list[int]]:
    """Header lines that go on past lines holding only the rest of an encoded word.

    Some mailers (and corpus tools) folded a long encoded word without the white space that
    marks a continuation (``Subject: =?gb2312?B?UmU6...+`` then ``fn4=?=`` at the start of the
    next line). Such a line continues the field: returns the new end of the header lines and
    the offsets of the lines to join to the line before.
    """
    glued: list[int] = []
    while 0 < end < len(data) and data[end - 1] == 0x0A and len(glued) < 100:
        line_start = data.rfind(b"\n", 0, end - 1) + 1
        if not _OPEN_ENCODED_WORD_RE.search(data, max(line_start, end - 300), end - 1):
            break
        tail = _ENCODED_WORD_TAIL_RE.match(data, end)
        if not tail:
            break
        glued.append(end)
        end = _header_lines_end(data, data.find(b"\n", end) + 1 or len(data), c)
    return end, glued


def _split_irregular(data: bytes, end: int, defects: list[str]) -> tuple[bytes, bytes]:
    """:func:`_split_entity` for an entity whose header lines (``data[:end]``) are not closed by
    an empty line, or that starts with a continuation line.

    Without the empty line, lines shaped like fields may be text (a first line ``http://...``
    or ``Note: ...`` of a mail that has no headers at all). Only fields with a name a mail
    system writes (:data:`_KNOWN_FIELDS`, ``X-``, ``Content-``, ...) are taken as headers
    then: the first other line starts the body, so its text is read, not dropped. With no
    field at all, all of it is body, a first line ``From ...`` included: without headers after
    it, it is as likely a sentence ("From the desk of ...") as an mbox envelope.
    """
    if not data:
        return b"", b""
    closed = data.startswith(b"\n", end)
    cut, fields, pos = 0, 0, 0
    while pos < end:
        newline = data.find(b"\n", pos, end)
        next_line = end if newline < 0 else newline + 1
        if data[pos] not in b" \t" and not data.startswith(b"From ", pos):
            name = _FIELD_NAME_RE.match(data, pos).group(1).lower()
            if not (closed or name in _KNOWN_FIELDS or name.startswith(_KNOWN_FIELD_PREFIXES)):
                break
            fields += 1
        cut = pos = next_line
    if not fields:
        _note(defects, "no_headers")
        return b"", data
    if data[0] in b" \t":
        _note(defects, "first_line_is_continuation")
    if closed and cut == end:
        return data[: end - 1], data[end + 1 :]
    if cut < len(data):
        _note(defects, "missing_header_body_separator")
    return data[:cut], data[cut:]


def _note(defects: list[str], defect: str) -> None:
    if defect not in defects:
        defects.append(defect)


def _parse_headers(block: bytes, fields: _Fields, c) -> list[tuple[str, bytes]]:
    """(lower-case name, raw value) of the header lines ``fields`` picks, in order, by their
    regex or in C (``c``: the C extension, or None)."""
    if not block:
        return []
    if c is not None and fields.names is not _REGEX_ONLY:
        return c.header_fields(block, fields.names)
    names = _FIELD_NAMES
    return [(names.get(n) or _field_name(n), v) for n, v in fields.pattern.findall(block)]


# Field name as written -> lower-case text: a stream's mail spells the same few hundred.
_FIELD_NAMES: dict[bytes, str] = {}


def _field_name(raw: bytes) -> str:
    name = raw.decode("ascii").lower()
    if len(_FIELD_NAMES) < 4096:  # bounded: a hostile stream may invent names without end
        _FIELD_NAMES[raw] = name
    return name


def _encoded_word_charset(headers: list[tuple[str, bytes]]) -> str | None:
    """The charset of the first RFC 2047 encoded word in ``headers`` that names a codec."""
    for _, value in headers:
        if b"=?" in value:
            for charset in _ENCODED_WORD_CHARSET_RE.findall(value):
                if codec_for(charset.decode("ascii")):
                    return charset.decode("ascii")
    return None


def decode_header(value: bytes, hint: str | None = None, default: str = "cp1252") -> str:
    """A raw header value as text: unfolded, RFC 2047 encoded words decoded, 8-bit guessed.

    >>> decode_header(b"=?gb2312?B?1tDOxA==?= and =?ISO-8859-1?Q?caf=E9?=")
    '中文 and café'
    >>> decode_header(b"=?utf-8?q?a?=  =?utf-8?q?b?=\\n c")
    'ab c'
    """
    if value.isascii() and b"=?" not in value:  # most values: plain ASCII, no encoded word
        return _unfold(value)
    text = decode_text(value, None, hint, default)
    if "\n" in text:
        text = _join_lines(text)
    if "=?" in text:
        text = _BETWEEN_ENCODED_WORDS_RE.sub(r"\1\2", text)
        text = _ENCODED_WORD_RE.sub(lambda m: _decode_word(m, hint, default), text)
    return text.strip()


def _decode_word(match: re.Match, hint: str | None, default: str) -> str:
    charset, encoding, payload = match.groups()
    charset = charset.partition("*")[0]  # RFC 2231 language suffix: =?utf-8*en?...
    data = payload.encode("latin-1", "replace")
    data = _b64decode(data) if encoding in "bB" else binascii.a2b_qp(data, header=True)
    return decode_text(data, charset, hint, default)


def _b64decode(data: bytes) -> bytes:
    try:
        return binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        data = _BASE64_JUNK_RE.sub(b"", data)
        if len(data) % 4 == 1:  # a last lone character holds no whole byte
            data = data[:-1]
        data += b"=" * (-len(data) % 4)  # padding repaired: the last bytes are kept
        try:
            return binascii.a2b_base64(data)
        except (binascii.Error, ValueError):
            return b""


def _content_type(value: str) -> tuple[str, dict[str, str]]:
    """'type/subtype' (lower case, 'text/plain' if unusable) and parameters of a header value.

    The parameters are shared between the mails with the same value: read them, never change
    them. A stream's mail carries a few hundred distinct short values ("text/plain;
    charset=us-ascii"), each parsed once; long ones (a hostile stream) are not kept.
    """
    if len(value) <= _CACHED_CONTENT_TYPE_CHARS:
        return _cached_content_type(value)
    return _parse_content_type(value)


_CACHED_CONTENT_TYPE_CHARS = 200


@lru_cache(maxsize=4096)
def _cached_content_type(value: str) -> tuple[str, dict[str, str]]:
    return _parse_content_type(value)


def _parse_content_type(value: str) -> tuple[str, dict[str, str]]:
    head, _, rest = value.partition(";")
    ctype = head.strip().lower()
    if "/" not in ctype:
        ctype = "text/plain"
    return ctype, _params(";" + rest) if rest else {}


def _params(text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, star, value in _PARAM_RE.findall(text):
        name = name.lower()
        if value.startswith('"'):
            value = value[1:-1] if value.endswith('"') and len(value) > 1 else value[1:]
            if "\\" in value:
                value = re.sub(r"\\(.)", r"\1", value)
        if star.endswith("*"):  # RFC 2231: charset'language'percent-encoded
            charset, _, rest = value.partition("'")
            _, _, encoded = rest.partition("'")
            value = _percent_decode(encoded or value, charset)
        if star and name in params:
            params[name] += value  # continuation: name*0, name*1, ...
        else:
            params[name] = value
    return params


def _percent_decode(text: str, charset: str) -> str:
    from urllib.parse import unquote_to_bytes

    return decode_text(unquote_to_bytes(text), charset or "utf-8")


def _first_values(
    headers: list[tuple[str, bytes]], names: tuple[str, ...], c
) -> tuple[bytes | None, ...]:
    """The raw value of the first field of each of ``names`` in ``headers`` (None if absent),
    in one pass (``c``: the C extension, or None)."""
    if c is not None:
        return c.first_values(headers, names)
    found: dict[str, bytes] = {}
    for name, value in headers:
        if name in names and name not in found:
            found[name] = value
    return tuple(found.get(name) for name in names)


def _unfold(value: bytes) -> str:
    """A plain ASCII header value with no encoded word, as text: unfolded and stripped."""
    text = value.decode("ascii")
    return _join_lines(text) if "\n" in text else text.strip()


def _join_lines(text: str) -> str:
    r"""``text`` with each line break and the white space around it made one space, stripped.

    The same as ``re.sub(r"\s*\n\s*", " ", text).strip()``, several times faster: a folded
    header value has a few lines, and that regex tries its match at every character.

    >>> _join_lines(" Re: your\n\t offer \n\n  now ")
    'Re: your offer now'
    """
    return " ".join(filter(None, map(str.strip, text.split("\n"))))


class _PartFields(NamedTuple):
    """What the walk needs of a part's three MIME fields, read from their raw values."""

    ctype: str  # "type/subtype", lower case ("text/plain" if unusable)
    maintype: str
    params: dict[str, str]  # of the Content-Type; shared: read it, never change it
    charset: str | None  # as declared, stripped and lower-cased (None if absent)
    declares_charset: bool  # a charset parameter that is not empty (before stripping)
    invalid_type: bool  # a Content-Type without type/subtype
    filename: str | None
    named_attachment: bool  # "Content-Disposition: attachment" with a file name
    encoding: str  # Content-Transfer-Encoding, lower case ("" if absent)


def _part_fields(
    raw_type: bytes | None, raw_encoding: bytes | None, raw_disposition: bytes | None,
    implied_type: str,
) -> _PartFields:
    """:class:`_PartFields` of a part's raw MIME field values (None: absent).

    A stream's parts carry a few hundred distinct short combinations, each read once; long
    values (a hostile stream) are read every time and not kept.
    """
    if (
        (raw_type is None or len(raw_type) <= _CACHED_CONTENT_TYPE_CHARS)
        and (raw_encoding is None or len(raw_encoding) <= _CACHED_CONTENT_TYPE_CHARS)
        and (raw_disposition is None or len(raw_disposition) <= _CACHED_CONTENT_TYPE_CHARS)
    ):
        return _cached_part_fields(raw_type, raw_encoding, raw_disposition, implied_type)
    return _read_part_fields(raw_type, raw_encoding, raw_disposition, implied_type)


def _read_part_fields(
    raw_type: bytes | None, raw_encoding: bytes | None, raw_disposition: bytes | None,
    implied_type: str,
) -> _PartFields:
    declared_type = decode_header(raw_type) if raw_type is not None else ""
    ctype, params = _content_type(declared_type or implied_type)
    invalid_type = bool(declared_type) and "/" not in declared_type.partition(";")[0]
    charset = params.get("charset")
    declares_charset = bool(charset)
    if declares_charset:
        charset = charset.strip().lower()
    disposition, disposition_params = _content_type(
        (decode_header(raw_disposition) if raw_disposition is not None else "") or "x/inline"
    )
    filename = disposition_params.get("filename") or params.get("name")
    encoding = decode_header(raw_encoding).lower() if raw_encoding is not None else ""
    return _PartFields(
        ctype, ctype.partition("/")[0], params, charset, declares_charset, invalid_type, filename,
        disposition == "attachment" and bool(filename), encoding,
    )


_cached_part_fields = lru_cache(maxsize=4096)(_read_part_fields)


def _read_entities(
    mail: ParsedMail,
    headers: list[tuple[str, bytes]],
    body: bytes,
    hint: str | None,
    options: FeaturizerOptions,
    budget: Budget,
    defects: list[str],
    c,
    top_values: tuple[bytes | None, ...] | None = None,
) -> None:
    """Walk the MIME tree depth first, in document order, with an explicit stack (``c``: the
    C extension for the part headers, or None; ``top_values``: the top entity's MIME field
    values, when found already)."""
    # (headers, body, depth, the type of a part that declares none: RFC 2046 5.1.5)
    stack: list[tuple[list[tuple[str, bytes]], bytes, int, str]] = [
        (headers, body, 0, "text/plain")
    ]
    top = True
    while stack:
        headers, body, depth, implied_type = stack.pop()
        if mail.n_parts >= options.max_parts:
            budget.exceeded("max_parts")
            return
        if mail.n_parts and budget.out_of_time():
            return
        mail.n_parts += 1
        values = _first_values(headers, _MIME_HEADERS, c) if top_values is None else top_values
        top_values = None
        fields = _part_fields(*values, implied_type)
        ctype, maintype, params = fields[:3]
        hint = _note_part(mail, fields, top, hint, defects)
        top = False
        if maintype == "multipart":
            boundary = params.get("boundary", "")
            children = _split_multipart(body, boundary, defects) if boundary else None
            if children is not None:
                if depth >= options.max_depth:
                    budget.exceeded("max_depth")
                    continue
                room = options.max_parts - mail.n_parts - len(stack)
                if len(children) > room:
                    budget.exceeded("max_parts")
                    children = children[: max(room, 0)]
                child_type = "message/rfc822" if ctype == "multipart/digest" else "text/plain"
                for child in reversed(children):
                    child_headers, child_body = _split_entity(child, defects, c)
                    stack.append(
                        (_parse_headers(child_headers, _MIME_FIELDS, c), child_body, depth + 1,
                         child_type)
                    )
                continue
            # no parts in it: its body is the text
            _note(defects, "multipart_without_boundary" if not boundary else "boundary_not_found")
            ctype, maintype = "text/plain", "text"
        elif ctype in _ENCLOSING:
            if depth >= options.max_depth:
                budget.exceeded("max_depth")
                continue
            inner_headers, inner_body = _split_entity(body, defects, c)
            inner = _parse_headers(inner_headers, _MIME_FIELDS, c)
            stack.append((inner, inner_body, depth + 1, "text/plain"))
            continue
        _read_leaf(mail, fields, ctype, maintype, body, hint, options, budget, defects)


def _note_part(mail: ParsedMail, fields: _PartFields, top: bool, hint: str | None,
               defects: list[str]) -> str | None:
    """What a part's MIME fields tell of the mail: an invalid type noted (the part is read
    as text/plain, as RFC 2045 says), the top part's type, a declared charset; returns the
    charset of 8-bit text with none of its own (``hint``, or the first declared with a
    codec)."""
    if fields.invalid_type:
        _note(defects, "invalid_content_type")
    if top:
        mail.content_type = fields.ctype
    if fields.declares_charset:
        mail.charsets.append(fields.charset)
        if hint is None and codec_for(fields.charset):
            hint = fields.charset
    return hint


# The types whose body is a mail of its own.
_ENCLOSING = frozenset({"message/rfc822", "message/news"})


def _read_leaf(
    mail: ParsedMail,
    fields: _PartFields,
    ctype: str,
    maintype: str,
    body: bytes,
    hint: str | None,
    options: FeaturizerOptions,
    budget: Budget,
    defects: list[str],
) -> None:
    """A part that holds no other (``ctype``/``maintype``: as read, text/plain for a multipart
    read as text): its text decoded into ``mail.parts``, or it noted as an attachment."""
    encoding = fields.encoding
    if encoding not in _TRANSFER_ENCODINGS:
        _note(defects, "unknown_transfer_encoding")  # the body is read as it is
    if maintype != "text" or fields.named_attachment:
        mail.attachments.append(Attachment(fields.filename, ctype, _decoded_size(body, encoding)))
        return
    if budget.text_left <= 0:
        budget.exceeded("max_text_chars")
        return
    data = body if encoding in _AS_IS else _decode_transfer(body, encoding, defects)
    if len(data) > budget.text_left:  # budget.take_text, called only where it cuts
        data = budget.take_text(data)
    charset = fields.charset
    # ASCII (most text): decode_text's first step, without the call
    text = data.decode("ascii") if data.isascii() else decode_text(
        data, charset, hint, options.default_charset
    )
    is_html = ctype == "text/html" or (ctype != "text/plain" and _looks_like_html(text))
    if len(text) <= budget.text_left:  # budget.spend_text, without the call where it cuts none
        budget.text_left -= len(text)
    else:
        text = budget.spend_text(text)
    if is_html:
        html = text
        method = options.html
        # markup of no more characters than the limit holds no more tags: nothing to count
        if (method != "strip" and len(html) > MAX_PARSED_TAGS
                and html.count("<") > MAX_PARSED_TAGS):
            _note(defects, "html_too_many_tags")
            method = "strip"
        mail.parts.append(TextPart(ctype, charset, html_to_text(html, method), html))
    else:
        mail.parts.append(TextPart(ctype, charset, text))


def _looks_like_html(text: str) -> bool:
    head = text[:2000].lower()
    return "<html" in head or "<body" in head


def _split_multipart(body: bytes, boundary: str, defects: list[str]) -> list[bytes] | None:
    """The parts between ``--boundary`` lines, or ``None`` if the boundary never occurs.

    A closing ``--boundary--`` that never comes ends the last part at the end of the body.
    A line that starts with the boundary but goes on with other text (a longer boundary of a
    nested multipart) is part content, not a delimiter.
    """
    delimiter = b"\n--" + boundary.encode("latin-1", "replace")
    pieces = (b"\n" + body).split(delimiter)
    if len(pieces) == 1:
        return None
    parts: list[bytes] = []
    current: bytes | None = None
    for piece in pieces[1:]:
        line_end = piece.find(b"\n")
        rest_of_line = piece if line_end < 0 else piece[:line_end]
        if rest_of_line.startswith(b"--"):
            if current is not None:
                parts.append(current)
            current = None
            break
        if rest_of_line.strip():
            if current is not None:  # not a delimiter: glue it back
                current += delimiter + piece
            continue
        if current is not None:
            parts.append(current)
        current = b"" if line_end < 0 else piece[line_end + 1 :]
    if current is not None:
        parts.append(current)
        _note(defects, "close_boundary_not_found")  # the last part runs to the end
    return parts


# Content-Transfer-Encoding values of RFC 2045 ("" when the header is absent). Any other
# (x-uuencode, "8-bit", garbage) leaves the body as it is.
_TRANSFER_ENCODINGS = frozenset({"", "7bit", "8bit", "binary", "base64", "quoted-printable"})
# The ones whose body is read as it is (_decode_transfer's last case).
_AS_IS = frozenset({"", "7bit", "8bit", "binary"})


def _decode_transfer(body: bytes, encoding: str, defects: list[str]) -> bytes:
    # 8-bit bytes under a base64 label: a relay decoded the part and left the label.
    if encoding == "base64" and body.isascii():
        try:
            return binascii.a2b_base64(body)
        except (binascii.Error, ValueError):
            _note(defects, "invalid_base64")  # junk dropped, padding repaired
            return _b64decode(body)
    if encoding == "quoted-printable":
        return binascii.a2b_qp(body)
    return body


def _decoded_size(body: bytes, encoding: str) -> int:
    if encoding == "base64":  # near enough, without decoding a file we will not read
        return (len(body) - body.count(b"\n")) * 3 // 4
    return len(body)


@lru_cache(maxsize=4096)
def registrable_domain(host: str) -> str:
    """The domain a host name belongs to, approximately: ``a.b.example.co.uk`` -> ``example.co.uk``.

    Two labels, or three when the second-to-last is a typical second-level label under a
    country code. No public-suffix list: it is a token, not a security decision.
    """
    labels = host.strip(".").split(".")
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in SECOND_LEVEL_LABELS:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])
