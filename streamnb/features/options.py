"""The featurizer's options: one frozen dataclass, filled from ``config.toml``'s ``[features]``.

Every field is a plain TOML value (bool, int, float, str or list of str), so
``FeaturizerOptions(**table)`` works on the parsed table; an unknown key raises ``TypeError``.
Lists are stored as tuples, which keeps the options hashable and immutable.

>>> opts = FeaturizerOptions(bigrams=True, stop_lists=["english"])
>>> opts.bigrams, opts.stop_lists
(True, ('english',))
>>> FeaturizerOptions(colour="red")
Traceback (most recent call last):
...
TypeError: FeaturizerOptions.__init__() got an unexpected keyword argument 'colour'
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["DEFAULT_HEADER_FIELDS", "DEFAULT_IGNORE_FIELDS", "FeaturizerOptions"]

#: Headers whose content becomes prefixed tokens (``subject:free``, ``from:example.com``).
#: Besides the author and recipient fields, the routing, list and date headers (``received``,
#: ``return-path``, ``message-id``, ``list-id``, ``date``, ...) are what a mail client never
#: shows but a spammer's software writes differently; with the default model they take
#: SpamAssassin's (1-ROCA)% from about 0.20 to 0.14 (docs/accuracy.md). Where a collection
#: leaks its labels through one relay (the Chinese set), mask ``Received:`` or drop it from
#: this list; ``["*"]`` reads every header.
DEFAULT_HEADER_FIELDS = (
    "subject",
    "from",
    "to",
    "cc",
    "reply-to",
    "sender",
    "x-mailer",
    "user-agent",
    "received",
    "return-path",
    "message-id",
    "content-type",
    "list-id",
    "precedence",
    "x-mailing-list",
    "mailing-list",
    "delivered-to",
    "errors-to",
    "list-unsubscribe",
    "x-beenthere",
    "organization",
    "date",
)

_NUMBER_MODES = ("keep", "drop", "shape")
_ON_LIMIT = ("truncate", "reject")
_LIST_FIELDS = ("header_fields", "ignore_fields", "stop_lists", "stop_words")

#: Header fields a filter adds with its verdict: streamnb's (``http.verdict_header``) and
#: rspamd's proxy's ``X-Spam``. A mail is read as if it did not carry them, so a mail learned
#: from a mailbox does not teach the model its own earlier verdict, and a sender cannot move
#: a verdict by forging one (the milter proxy scores the mail before it removes them).
DEFAULT_IGNORE_FIELDS = ("x-streamnb", "x-spam")


@dataclass(frozen=True)
class FeaturizerOptions:
    """How raw mail and text become tokens; see ``docs/features.md`` for each option."""

    # --- tokens ---------------------------------------------------------------------------
    lowercase: bool = True
    min_token_len: int = 2  # shorter words are dropped
    max_token_len: int = 40  # longer ones too, whole: base64 debris, hashes, one letter repeated
    min_cjk_token_len: int = 1  # a segmented Chinese word of one character is a real word
    word_joiners: str = "-"  # kept inside a word (click-here; "'$-": don't, us$5); "" splits
    join_digits: bool = False  # a joiner may also be followed by a digit (us$5, 555-1234)
    cjk_runs: bool = True  # also keep each whole run of Han characters as one token
    cjk_bigrams: bool = False  # also count each pair of adjacent Han characters
    numbers: str = "keep"  # "keep" | "drop" | "shape" (digits replaced by 0: "$100" -> "$000")
    url_tokens: bool = True  # URLs also give "url:host" and "url:domain" tokens
    header_tokens: bool = True  # tokens of ``header_fields`` ("*": all), prefixed by the field
    header_fields: tuple[str, ...] = DEFAULT_HEADER_FIELDS
    # Top-level header fields read as if absent (name, layout and value): filters' verdicts.
    ignore_fields: tuple[str, ...] = DEFAULT_IGNORE_FIELDS
    address_words: bool = False  # addresses in headers also give their words (from:john)
    # The header block's layout (streamnb.features.header_layout): each run of min_header_order
    # to header_order consecutive field names ("order:^>from>subject"; 0: off), and each
    # field's value shape ("shape:date:a, 0 a 0 0:0:0 +0").
    header_order: int = 4
    min_header_order: int = 3
    header_shapes: bool = True
    mime_tokens: bool = True  # "mime:text/html", "charset:gb2312", "attach:.pdf", ...
    defect_tokens: bool = True  # "defect:missing_header_body_separator", ... (ParsedMail.defects)
    stop_lists: tuple[str, ...] = ()  # built-in stop-word lists to drop: "english", "chinese"
    stop_words: tuple[str, ...] = ()  # further words to drop
    bigrams: bool = False  # also count adjacent body-word pairs, as "first second"
    # > 1: also count each body word paired with each of the next osb_window - 1 words, the
    # distance kept (crm114's orthogonal sparse bigrams; 5 is crm114's window): "cheap pills",
    # "cheap _ pills" (one word between), "cheap _ _ pills", ... Includes what bigrams counts.
    osb_window: int = 0
    cjk_segmenter: str = "rjieba"  # "rjieba" (Rust port of jieba) | "jieba" | "chars"
    cjk_hmm: bool = True  # let the segmenter guess words missing from its dictionary
    html: str = "selectolax"  # visible text of HTML parts: "selectolax" | "strip" (a regex)
    default_charset: str = "cp1252"  # for 8-bit text with no usable charset declaration
    hash_buckets: int = 0  # > 0: tokens become "#<bucket>" of a stable hash (bounded vocabulary)
    # --- numeric meta-features ------------------------------------------------------------
    meta_features: bool = False  # fill Features.numeric (see META_FEATURE_NAMES)
    # --- limits ---------------------------------------------------------------------------
    max_bytes: int = 4 * 1024 * 1024  # raw message bytes read
    max_parts: int = 100  # MIME parts visited
    max_depth: int = 10  # multipart nesting
    max_text_chars: int = 1_000_000  # decoded text tokenized per message
    max_tokens: int = 100_000  # body tokens counted per message
    max_seconds: float = 1.0  # checked between steps; the other limits bound the real work
    on_limit: str = "truncate"  # "truncate" (and say so in Features.truncated) | "reject"

    def __post_init__(self) -> None:
        for name in _LIST_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{name} must be a list of strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(
            self, "header_fields", tuple(f.strip().lower() for f in self.header_fields)
        )
        object.__setattr__(
            self, "ignore_fields", tuple(f.strip().lower() for f in self.ignore_fields if f.strip())
        )
        _check_choice("numbers", self.numbers, _NUMBER_MODES)
        _check_choice("on_limit", self.on_limit, _ON_LIMIT)
        _check_choice("cjk_segmenter", self.cjk_segmenter, ("rjieba", "jieba", "chars"))
        _check_choice("html", self.html, ("selectolax", "strip"))
        if not isinstance(self.word_joiners, str) or any(
            c.isalnum() or c.isspace() or c == "_" for c in self.word_joiners
        ):
            raise ValueError(
                f"word_joiners must be punctuation characters, got {self.word_joiners!r}"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith(("max_", "min_")) and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise ValueError(f"{f.name} must be a non-negative number, got {value!r}")
        if isinstance(self.hash_buckets, bool) or self.hash_buckets < 0:
            raise ValueError(f"hash_buckets must be 0 (off) or positive, got {self.hash_buckets!r}")
        if isinstance(self.osb_window, bool) or not isinstance(self.osb_window, int) or (
            self.osb_window < 0 or self.osb_window == 1
        ):
            raise ValueError(
                f"osb_window must be 0 (off) or at least 2 (words per window), "
                f"got {self.osb_window!r}"
            )
        if isinstance(self.header_order, bool) or not isinstance(self.header_order, int) or (
            self.header_order and not 1 <= self.min_header_order <= self.header_order
        ):
            raise ValueError(
                f"header_order must be 0 (off) or at least min_header_order (>= 1), got "
                f"header_order {self.header_order!r}, min_header_order {self.min_header_order!r}"
            )
        if self.min_token_len > self.max_token_len:
            raise ValueError("min_token_len must not exceed max_token_len")
        import codecs

        try:
            codecs.lookup(self.default_charset)
        except LookupError:
            raise ValueError(f"default_charset: unknown codec {self.default_charset!r}") from None


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
