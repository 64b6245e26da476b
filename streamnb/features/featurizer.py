"""Raw mail, plain text or pre-split tokens -> :class:`Features` (token counts, meta-features).

>>> f = Featurizer(FeaturizerOptions(meta_features=True))
>>> result = f.from_raw(b"From: Win <win@promo.example.com>\\nSubject: FREE offer\\n\\n"
...                     b"Claim your FREE prize at http://198.51.100.7/claim now")
>>> sorted(result.tokens)
['100', '198', '51', 'at', 'claim', 'free', 'from:example.com', 'from:promo.example.com',
 'from:win', 'from:win@promo.example.com', 'http', 'mime:text/plain', 'now',
 'order:^>from>subject', 'order:^>from>subject>$', 'order:from>subject>$', 'prize',
 'shape:from:a <a@a.a.a>', 'shape:subject:a a', 'subject:free', 'subject:offer',
 'url:198.51.100.7', 'url:ip', 'your']
>>> from streamnb.features import META_FEATURE_NAMES
>>> len(result.numeric) == len(META_FEATURE_NAMES), result.truncated
(True, ())
>>> f.from_text("WIN cash now").tokens
Counter({'win': 1, 'cash': 1, 'now': 1})
>>> f.from_tokens(["Cash", "cash", "NOW"]).tokens
Counter({'cash': 2, 'now': 1})
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from streamnb.features import native as _native_path
from streamnb.features.errors import FeaturizationError
from streamnb.features.header_layout import header_layout_tokens
from streamnb.features.mail import (
    ADDRESS_RE,
    SECOND_LEVEL_LABELS,
    Budget,
    ParsedMail,
    read_mail,
    registrable_domain,
)
from streamnb.features.meta import meta_features
from streamnb.features.options import FeaturizerOptions
from streamnb.features.tokenize import Tokenizer, url_tokens
from streamnb.hashing import stable_bucket

__all__ = ["Featurizer", "Features"]

# Surrogates that surrogateescape did not make (it maps bytes 0x80-0xFF to U+DC80-U+DCFF).
_NOT_A_BYTE_RE = re.compile("[\ud800-\udc7f\udd00-\udfff]")

# Header fields whose tokens are addresses and domains rather than words.
_ADDRESS_FIELDS = frozenset(
    {"from", "to", "cc", "bcc", "reply-to", "sender", "return-path", "delivered-to", "errors-to"}
)


@dataclass(slots=True)
class Features:
    """What one message contributes: token counts, optional meta-features, limits hit."""

    tokens: dict[str, int] = field(default_factory=dict)
    numeric: list[float] | None = None
    #: The limits that cut the message short (``max_bytes``, ``max_parts``, ``max_depth``,
    #: ``max_text_chars``, ``max_tokens``, ``max_seconds``); () when it was read whole.
    truncated: tuple[str, ...] = ()
    #: Structural defects of the mail (:data:`streamnb.features.mail.DEFECTS`); () if none.
    defects: tuple[str, ...] = ()


class Featurizer:
    """Turns messages into :class:`Features` according to :class:`FeaturizerOptions`.

    Never raises on content: bad mail is read as well as it can be. It raises
    :class:`FeaturizationError` for input of the wrong type, and for a message over a limit
    when ``on_limit = "reject"``.
    """

    def __init__(self, options: FeaturizerOptions | None = None, *, native: bool | None = None):
        self.options = options or FeaturizerOptions()
        self.tokenizer = Tokenizer(self.options, native=native)  # native: see Tokenizer
        self._header_fields = _header_field_specs(self.options.header_fields)
        self._add_header_layout = (
            _native_path._tokens.header_layout if self.tokenizer.native
            else _add_header_layout
        )
        options = self.options
        # What _from_mail does besides the body's words, decided once: the URL tokens of each
        # part counted in C, the header and layout tokens, the MIME tokens.
        self._count_urls_in_c = (
            _native_path._tokens.count_url_tokens
            if self.tokenizer.native and options.url_tokens and not options.meta_features
            else None
        )
        self._layout = bool(options.header_order or options.header_shapes)
        self._every_field = "*" in options.header_fields
        self._ignored = ignored_fields_pattern(options.ignore_fields)
        self._ignored_names = tuple(name.encode("ascii", "replace")
                                    for name in options.ignore_fields)
        self._has_field = (_native_path._tokens.has_field if self.tokenizer.native
                           else has_field)

    def read(self, raw: bytes) -> ParsedMail:
        """The parsed mail (subject, addresses, text parts, attachments) of raw bytes."""
        raw = _as_bytes(raw)
        mail = read_mail(raw, self.options, native=self.tokenizer.native)
        if self._ignored is not None and self._carries_ignored(mail.header_block):
            mail = read_mail(without_fields(raw, self._ignored), self.options,
                             native=self.tokenizer.native)
        return mail

    def from_raw(self, raw: bytes) -> Features:
        """Features of an RFC 822 message given as bytes (without ``ignore_fields``)."""
        budget = Budget(self.options)
        if type(raw) is not bytes:  # nearly all raw mail is bytes: no call to see that
            raw = _as_bytes(raw)
        mail = read_mail(raw, self.options, budget, native=self.tokenizer.native)
        if self._ignored is not None and self._carries_ignored(mail.header_block):
            budget = Budget(self.options)
            mail = read_mail(without_fields(raw, self._ignored), self.options, budget,
                             native=self.tokenizer.native)
        return self._from_mail(mail, budget)

    def _carries_ignored(self, header_block: bytes) -> bool:
        """Whether a header block as read has a field of ``ignore_fields`` (most have none)."""
        return self._has_field(header_block, self._ignored_names)

    def from_mail(self, mail: ParsedMail) -> Features:
        """Features of a mail already read with :meth:`read` (its truncations carried over)."""
        budget = Budget(self.options)
        budget.hit.extend(mail.truncated)
        return self._from_mail(mail, budget)

    def _from_mail(self, mail: ParsedMail, budget: Budget) -> Features:
        options = self.options
        text = mail.text
        if budget.out_of_time():  # self._count's steps, without its call
            counts, n_words = Counter(), 0
        else:
            counts, n_words = self.tokenizer.count_words(
                text, options.max_tokens, lambda: budget.exceeded("max_tokens"), False,
                _expected_tokens(text, mail),
            )
        hosts = None
        # URL tokens from the markup of HTML parts: links are not visible text
        count_urls = self._count_urls_in_c
        if count_urls is not None:  # tokenizer.count_url_tokens' C call, without the method
            for part in mail.parts:
                count_urls(part.html or part.text, counts, SECOND_LEVEL_LABELS)
        elif options.meta_features:  # which needs the hosts themselves
            find = self.tokenizer.url_hosts
            hosts = [h for part in mail.parts for h in find(part.html or part.text)]
            if options.url_tokens:
                counts.update(url_tokens(hosts))
        elif options.url_tokens:
            count = self.tokenizer.count_url_tokens
            for part in mail.parts:
                count(part.html or part.text, counts)
        if options.header_tokens:
            self._count_header_tokens(mail, counts)
        if self._layout and mail.header_block:
            self._add_header_layout(
                mail.header_block, options.min_header_order, options.header_order,
                options.header_shapes, counts,
            )
        if options.mime_tokens:
            _count_mime_tokens(mail, counts)
        if options.defect_tokens and mail.defects:
            counts.update("defect:" + d for d in mail.defects)
        numeric = None
        if options.meta_features:
            numeric = meta_features(mail, text, counts, n_words, hosts)
        if options.hash_buckets:
            counts = self._hashed(counts)
        return Features(counts, numeric, tuple(budget.hit), mail.defects)

    def from_text(self, text: str) -> Features:
        """Features of plain text (an SMS, a note): the same tokenizer, no headers."""
        if not isinstance(text, str):
            raise FeaturizationError("wrong_type", f"text must be str, not {type(text).__name__}")
        budget = Budget(self.options)
        text = budget.spend_text(text)
        counts, n_words = self._count(text, budget)
        numeric = None
        if self.options.meta_features:
            numeric = meta_features(None, text, counts, n_words)
        return Features(self._hashed(counts), numeric, tuple(budget.hit))

    def from_tokens(self, tokens: Sequence[str]) -> Features:
        """Counts of pre-split tokens (lower-cased if ``lowercase``); nothing else is done."""
        if isinstance(tokens, str | bytes) or not all(isinstance(t, str) for t in tokens):
            raise FeaturizationError("wrong_type", "tokens must be a sequence of str")
        budget = Budget(self.options)
        if len(tokens) > self.options.max_tokens:
            budget.exceeded("max_tokens")
            tokens = tokens[: self.options.max_tokens]
        if self.options.lowercase:
            tokens = [t.lower() for t in tokens]
        return Features(self._hashed(Counter(tokens)), None, tuple(budget.hit))  # no defects

    def _hashed(self, counts: Counter[str]) -> Counter[str]:
        """``counts`` with each token replaced by its hash bucket, if ``hash_buckets`` is set."""
        n_buckets = self.options.hash_buckets
        if not n_buckets:
            return counts
        hashed: Counter[str] = Counter()
        for token, n in counts.items():
            hashed[f"#{stable_bucket(token, n_buckets)}"] += n
        return hashed

    def _count(
        self, text: str, budget: Budget, urls: bool = True, expected: int = 0
    ) -> tuple[Counter[str], int]:
        if budget.out_of_time():
            return Counter(), 0
        return self.tokenizer.count_words(
            text, self.options.max_tokens, lambda: budget.exceeded("max_tokens"), urls, expected
        )

    def _header_tokens(self, mail: ParsedMail) -> Counter[str]:
        """The counts of the header tokens of ``mail`` (``subject:free``, ``from:example.com``)."""
        counts: Counter[str] = Counter()
        self._count_header_tokens(mail, counts)
        return counts

    def _count_header_tokens(self, mail: ParsedMail, counts: Counter[str]) -> None:
        names = self.options.header_fields
        if self._every_field:  # every header of the message, in the order first seen
            fields = _header_field_specs(
                tuple(dict.fromkeys(n for n in (*names, *mail.headers) if n != "*"))
            )
        else:
            fields = self._header_fields
        native = self.tokenizer._native
        if native is not None:  # the ASCII values (nearly all) in one call into C
            options = self.options
            left = native.count_header_fields(
                fields, mail.headers, counts, SECOND_LEVEL_LABELS, options.address_words,
                options.lowercase,
            )
            for prefix, text, address in left:
                if address:
                    self._count_address_value(prefix, text, counts)
                else:
                    self.tokenizer.count_prefixed(prefix, text, counts)
            return
        for name, prefix, address in fields:
            values = mail.headers.get(name)
            if not values:
                continue
            if not address:
                # The words of all of a field's values at once (a mail has five Received
                # lines): no word spans the newline between two values.
                text = values[0] if len(values) == 1 else "\n".join(values)
                self.tokenizer.count_prefixed(prefix, text, counts)
                continue
            for value in values:
                self._count_address_value(prefix, value, counts)

    def _count_address_value(self, prefix: str, value: str, counts: Counter[str]) -> None:
        """The tokens of one value of an address field: its addresses, domains and hosts, and
        the words of the text around them (of all of it with ``address_words``)."""
        if "@" in value:
            # One regex pass: the text around the addresses, then the addresses.
            pieces = _ADDRESS_SPLIT_RE.split(value)
            counts.update(_address_tokens(prefix, pieces[1::2]))
            if not self.options.address_words:
                value = " ".join(pieces[0::2])  # each address made a space
        self.tokenizer.count_prefixed(prefix, value, counts)


def _expected_tokens(text: str, mail: ParsedMail) -> int:
    """About how many distinct tokens a mail gives with the header tokens (on SpamAssassin,
    the tokens are 0.8-1.4 times this for nine mails in ten): the size its counts are made."""
    return 50 + min(len(text), 20_000) // 25 + len(mail.header_block) // 10


def _add_header_layout(
    block: bytes, shortest: int, longest: int, shapes: bool, counts: Counter[str]
) -> None:
    """The pure-Python ``_tokens.header_layout``: the layout tokens of ``block`` counted."""
    counts.update(header_layout_tokens(block, shortest, longest, shapes))


@lru_cache(maxsize=256)
def _header_field_specs(names: tuple[str, ...]) -> tuple[tuple[str, str, bool], ...]:
    """(name, token prefix, whether it is an address field) of each header field tokenized."""
    return tuple((name, name + ":", name in _ADDRESS_FIELDS) for name in names)


_ADDRESS_SPLIT_RE = re.compile(f"({ADDRESS_RE.pattern})")


def _address_tokens(prefix: str, addresses: list[str]) -> list[str]:
    tokens = []
    for address in addresses:
        address = address.lower()
        host = address.rpartition("@")[2]
        domain = registrable_domain(host)
        tokens += (prefix + address, prefix + domain)
        if host != domain:
            tokens.append(prefix + host)
    return tokens


def _count_mime_tokens(mail: ParsedMail, counts: Counter[str]) -> None:
    """``counts.update(_mime_tokens(mail))``, without the list: a mail has a few, for which
    ``Counter.update``'s checks cost more than the loop."""
    for part in mail.parts:
        token = "mime:" + part.content_type
        counts[token] = counts.get(token, 0) + 1
    if mail.content_type.startswith("multipart/"):
        token = "mime:" + mail.content_type
        counts[token] = counts.get(token, 0) + 1
    for charset in mail.charsets:
        token = "charset:" + charset
        counts[token] = counts.get(token, 0) + 1
    if mail.attachments:
        for token in _attachment_tokens(mail):
            counts[token] = counts.get(token, 0) + 1


def _attachment_tokens(mail: ParsedMail) -> list[str]:
    tokens = []
    for attachment in mail.attachments:
        tokens.append("attach:" + attachment.content_type)
        if attachment.filename and "." in attachment.filename:
            tokens.append("attach:." + attachment.filename.rpartition(".")[2].lower()[:10])
    return tokens


def _mime_tokens(mail: ParsedMail) -> list[str]:
    tokens = ["mime:" + p.content_type for p in mail.parts]
    if mail.content_type.startswith("multipart/"):
        tokens.append("mime:" + mail.content_type)
    tokens += ["charset:" + c for c in mail.charsets]
    return tokens + _attachment_tokens(mail)


# The end of a header block: its last line's line break, then an empty line.
_HEADER_END = re.compile(rb"\n\r?\n")
# A line with its line break (the last one may have none).
_LINE = re.compile(rb"[^\n]*\n|[^\n]+$")


def ignored_fields_pattern(names: Sequence[str]) -> re.Pattern[bytes] | None:
    """What finds a field of ``names`` at the start of a header line (None: no names)."""
    if not names:
        return None
    alternatives = b"|".join(re.escape(name.encode("ascii", "replace")) for name in names)
    return re.compile(rb"(?im)^(?:" + alternatives + rb")[ \t]*:")


def has_field(block: bytes, names: tuple[bytes, ...]) -> bool:
    """Whether a header block (line ends ``\\n``) has a field of ``names`` (lower-case):
    the reference of ``_tokens.has_field``.

    >>> has_field(b"Subject: hi\\nX-Spam : Yes\\n", (b"x-spam",))
    True
    >>> has_field(b"Subject: hi\\nX-Spam-Level: *\\n x-spam: folded\\n", (b"x-spam",))
    False
    """
    for line in block.split(b"\n"):
        lowered = line.lower()
        for name in names:
            if name and lowered.startswith(name) and \
                    lowered[len(name):].lstrip(b" \t")[:1] == b":":
                return True
    return False


def without_fields(raw: bytes, pattern: re.Pattern[bytes] | None) -> bytes:
    r"""``raw`` without the top-level header fields ``pattern`` finds (a field's folded
    continuation lines go with it); every other byte, the body's included, unchanged.

    >>> pattern = ignored_fields_pattern(["x-spam", "x-streamnb"])
    >>> without_fields(b"X-Spam: Yes\r\nSubject: hi\r\nX-STREAMNB: ham;\r\n  more\r\n"
    ...                b"\r\nX-Spam: in the body", pattern)
    b'Subject: hi\r\n\r\nX-Spam: in the body'
    >>> without_fields(b"X-Spam-Level: ***\n\nhi", pattern)
    b'X-Spam-Level: ***\n\nhi'
    """
    if pattern is None:
        return raw
    found = _HEADER_END.search(raw)
    end = found.start() + 1 if found is not None else len(raw)
    head = raw[:end]
    if pattern.search(head) is None:
        return raw
    kept, skipping = [], False
    for line in _LINE.findall(head):
        if line[:1] in (b" ", b"\t"):  # a folded continuation of the field before
            if not skipping:
                kept.append(line)
            continue
        skipping = pattern.match(line) is not None
        if not skipping:
            kept.append(line)
    return b"".join(kept) + raw[end:]


def _as_bytes(raw: bytes) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, bytearray | memoryview):
        return bytes(raw)
    if isinstance(raw, str):  # a mail that went through a text channel; keep unknown bytes
        try:
            return raw.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate that stands for no byte
            return _NOT_A_BYTE_RE.sub("\ufffd", raw).encode("utf-8", "surrogateescape")
    raise FeaturizationError("wrong_type", f"raw mail must be bytes, not {type(raw).__name__}")
