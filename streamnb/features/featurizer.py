"""Raw mail, plain text or pre-split tokens -> :class:`Features` (token counts, meta-features).

>>> f = Featurizer(FeaturizerOptions(meta_features=True))
>>> result = f.from_raw(b"From: Win <win@promo.example.com>\\nSubject: FREE offer\\n\\n"
...                     b"Claim your FREE prize at http://198.51.100.7/claim now")
>>> sorted(result.tokens)
['100', '198', '51', 'at', 'claim', 'free', 'from:example.com', 'from:promo.example.com',
 'from:win', 'from:win@promo.example.com', 'http', 'mime:text/plain', 'now', 'prize',
 'subject:free', 'subject:offer', 'url:198.51.100.7', 'url:ip', 'your']
>>> from streamnb.features import META_FEATURE_NAMES
>>> len(result.numeric) == len(META_FEATURE_NAMES), result.truncated
(True, ())
>>> f.from_text("WIN cash now").tokens
Counter({'win': 1, 'cash': 1, 'now': 1})
>>> f.from_tokens(["Cash", "cash", "NOW"]).tokens
Counter({'cash': 2, 'now': 1})
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from streamnb.features.errors import FeaturizationError
from streamnb.features.mail import _ADDRESS_RE as ADDRESS_RE
from streamnb.features.mail import Budget, ParsedMail, read_mail, registrable_domain
from streamnb.features.meta import meta_features
from streamnb.features.options import FeaturizerOptions
from streamnb.features.tokenize import Tokenizer, url_hosts, url_tokens

__all__ = ["Featurizer", "Features"]

# Header fields whose tokens are addresses and domains rather than words.
_ADDRESS_FIELDS = frozenset(
    {"from", "to", "cc", "bcc", "reply-to", "sender", "return-path", "delivered-to", "errors-to"}
)


@dataclass(slots=True)
class Features:
    """What one message contributes: token counts, optional meta-features, limits hit."""

    tokens: dict[str, int] = field(default_factory=dict)
    numeric: list[float] | None = None
    truncated: tuple[str, ...] = ()


class Featurizer:
    """Turns messages into :class:`Features` according to :class:`FeaturizerOptions`.

    Never raises on content: bad mail is read as well as it can be. It raises
    :class:`FeaturizationError` for input of the wrong type, and for a message over a limit
    when ``on_limit = "reject"``.
    """

    def __init__(self, options: FeaturizerOptions | None = None):
        self.options = options or FeaturizerOptions()
        self.tokenizer = Tokenizer(self.options)

    def read(self, raw: bytes) -> ParsedMail:
        """The parsed mail (subject, addresses, text parts, attachments) of raw bytes."""
        return read_mail(_as_bytes(raw), self.options)

    def from_raw(self, raw: bytes) -> Features:
        """Features of an RFC 822 message given as bytes."""
        options = self.options
        budget = Budget(options)
        mail = read_mail(_as_bytes(raw), options, budget)
        text = mail.text
        counts = self._count(text, budget, urls=False)
        if options.url_tokens:
            for part in mail.parts:
                source = part.html if part.html is not None else part.text
                if "://" in source or "www." in source or "WWW." in source:
                    counts.update(url_tokens(url_hosts(source)))
        if options.header_tokens:
            counts.update(self._header_tokens(mail))
        if options.mime_tokens:
            counts.update(_mime_tokens(mail))
        numeric = meta_features(mail, text, counts) if options.meta_features else None
        return Features(counts, numeric, tuple(budget.hit))

    def from_text(self, text: str) -> Features:
        """Features of plain text (an SMS, a note): the same tokenizer, no headers."""
        if not isinstance(text, str):
            raise FeaturizationError("wrong_type", f"text must be str, not {type(text).__name__}")
        budget = Budget(self.options)
        text = budget.spend_text(text)
        counts = self._count(text, budget)
        numeric = meta_features(None, text, counts) if self.options.meta_features else None
        return Features(counts, numeric, tuple(budget.hit))

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
        return Features(Counter(tokens), None, tuple(budget.hit))

    def _count(self, text: str, budget: Budget, urls: bool = True) -> Counter[str]:
        if budget.out_of_time():
            return Counter()
        return self.tokenizer.count(
            text, self.options.max_tokens, lambda: budget.exceeded("max_tokens"), urls
        )

    def _header_tokens(self, mail: ParsedMail) -> list[str]:
        tokens: list[str] = []
        prefixed = self.tokenizer.prefixed
        names = self.options.header_fields
        if "*" in names:  # every header of the message, in the order first seen
            names = tuple(dict.fromkeys(n for n in (*names, *mail.headers) if n != "*"))
        for name in names:
            for value in mail.headers.get(name, ()):
                prefix = name + ":"
                if name in _ADDRESS_FIELDS and "@" in value:
                    tokens += _address_tokens(prefix, value)
                    if not self.options.address_words:
                        value = _strip_addresses(value)
                tokens += prefixed(prefix, value)
        return tokens


def _address_tokens(prefix: str, value: str) -> list[str]:
    tokens = []
    for address in ADDRESS_RE.findall(value):
        address = address.lower()
        host = address.rpartition("@")[2]
        domain = registrable_domain(host)
        tokens += (prefix + address, prefix + domain)
        if host != domain:
            tokens.append(prefix + host)
    return tokens


def _strip_addresses(value: str) -> str:
    return ADDRESS_RE.sub(" ", value)


def _mime_tokens(mail: ParsedMail) -> list[str]:
    tokens = ["mime:" + p.content_type for p in mail.parts]
    if mail.content_type.startswith("multipart/"):
        tokens.append("mime:" + mail.content_type)
    tokens += ["charset:" + c for c in mail.charsets]
    for attachment in mail.attachments:
        tokens.append("attach:" + attachment.content_type)
        if attachment.filename and "." in attachment.filename:
            tokens.append("attach:." + attachment.filename.rpartition(".")[2].lower()[:10])
    return tokens


def _as_bytes(raw: bytes) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, bytearray | memoryview):
        return bytes(raw)
    if isinstance(raw, str):  # a mail that went through a text channel; keep unknown bytes
        try:
            return raw.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return raw.encode("utf-8", "replace")
    raise FeaturizationError("wrong_type", f"raw mail must be bytes, not {type(raw).__name__}")
