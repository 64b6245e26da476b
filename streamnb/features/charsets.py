"""Bytes -> str for mail text, whatever the declared charset says.

Mail declares charsets wrongly all the time. The rules, in order:

1. pure ASCII bytes are ASCII, and bytes that are valid UTF-8 are UTF-8, whatever the label
   (8-bit text in another charset is almost never valid UTF-8 by chance);
2. a declared charset is mapped through :data:`ALIASES` to the superset browsers actually use
   (``gb2312``/``gbk`` -> GB18030, ``iso-8859-1``/``us-ascii`` -> cp1252, ``big5`` -> Big5-HKSCS,
   ``euc-kr``/``ks_c_5601-1987`` -> cp949, ``shift_jis`` -> cp932) and tried strictly;
3. if that fails, or nothing usable was declared: the message's other declared charset (the
   *hint*) strictly;
4. 8-bit text shaped like GBK (every non-ASCII byte part of a two- or four-byte GB18030
   sequence, and at least four such characters) is read as GB18030: Chinese mail without a
   label, or labelled UTF-8 after a botched re-encoding, is common, while Latin-1 text almost
   always has an accented letter followed by a space or punctuation, which breaks the shape;
5. else the declared (or default) charset with replacement characters.

A label that names no text codec (``rot13``, ``zlib``, garbage, a 300-byte string) counts as no
declaration. Decoding never raises.

>>> decode_text("中文".encode("gbk"), "gb2312")
'中文'
>>> decode_text(b"caf\\xe9", None)
'café'
>>> decode_text("naïve".encode(), "us-ascii")
'naïve'
>>> decode_text("正规发票".encode("gbk"), None), decode_text("Grüße, été".encode("latin-1"), None)
('正规发票', 'Grüße, été')
>>> codec_for("x-unknown"), codec_for("GB2312"), codec_for("rot13")
(None, 'gb18030', None)
"""

from __future__ import annotations

import codecs
import re
from functools import lru_cache

__all__ = ["ALIASES", "codec_for", "decode_text"]

ALIASES = {
    "gb2312": "gb18030",
    "gb_2312-80": "gb18030",
    "gb_2312": "gb18030",
    "gbk": "gb18030",
    "x-gbk": "gb18030",
    "cp936": "gb18030",
    "ms936": "gb18030",
    "windows-936": "gb18030",
    "euc-cn": "gb18030",
    "euccn": "gb18030",
    "x-euc-cn": "gb18030",
    "csgb2312": "gb18030",
    "chinese": "gb18030",
    "hz-gb-2312": "hz",
    "big5": "big5hkscs",
    "x-big5": "big5hkscs",
    "big-5": "big5hkscs",
    "cn-big5": "big5hkscs",
    "csbig5": "big5hkscs",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "iso_8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "l1": "cp1252",
    "iso-8859-9": "cp1254",
    "iso-8859-11": "cp874",
    "tis-620": "cp874",
    "euc-kr": "cp949",
    "ks_c_5601-1987": "cp949",
    "ks_c_5601": "cp949",
    "korean": "cp949",
    "shift_jis": "cp932",
    "shift-jis": "cp932",
    "sjis": "cp932",
    "x-sjis": "cp932",
    "windows-31j": "cp932",
    "unicode-1-1-utf-7": "utf-7",
    "utf8": "utf-8",
    "unicode": "utf-8",
    "x-user-defined": "cp1252",
}

# Possessive quantifiers: a failed match must not backtrack through every way of splitting.
_GBK_SHAPE_RE = re.compile(
    rb"(?:[\x00-\x7f]++|[\x81-\xfe](?:[\x40-\x7e\x80-\xfe]|[\x30-\x39][\x81-\xfe][\x30-\x39]))*+"
    rb"[\x81-\xfe]?"  # a message cut short in the middle of a character
)
_ASCII_BYTES = bytes(range(128))

# Codecs that exist in Python but are not charsets a mail could be written in: they interpret
# escapes or raise on any input.
_NOT_CHARSETS = frozenset(
    {"unicode_escape", "raw_unicode_escape", "idna", "punycode", "undefined", "mbcs", "oem"}
)


@lru_cache(maxsize=512)
def codec_for(label: str | None) -> str | None:
    """The Python codec to read a declared ``label`` with, or ``None`` if it names none."""
    if not label or len(label) > 40:
        return None
    name = label.strip().strip("\"'").lower()
    name = ALIASES.get(name, name)
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name.replace("-", "_") in _NOT_CHARSETS:
        return None
    return ALIASES.get(info.name, info.name)


def decode_text(
    data: bytes, declared: str | None, hint: str | None = None, default: str = "cp1252"
) -> str:
    """``data`` as text: UTF-8, else declared codec, else ``hint``, else ``default``."""
    if data.isascii():
        return data.decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeError:
        pass
    codec = codec_for(declared) if declared else None
    if codec is not None and codec != "utf-8":
        try:
            return data.decode(codec)
        except (UnicodeError, LookupError):
            pass
    hint_codec = codec_for(hint) if hint else None
    if hint_codec is not None and hint_codec != codec:
        try:
            return data.decode(hint_codec)
        except (UnicodeError, LookupError):
            pass
    if (
        codec != "gb18030"
        and len(data.translate(None, _ASCII_BYTES)) >= 8
        and _GBK_SHAPE_RE.fullmatch(data)
    ):
        return data.decode("gb18030", "replace")
    try:
        return data.decode(codec or default, "replace")
    except (UnicodeError, LookupError):
        return data.decode(default, "replace")
