"""Tokens of how a message's header block is laid out, not of what it says.

Mail software writes its header fields in a fixed order and formats each value its own way
(``Content-Type: text/plain;charset="GB2312"`` against ``Content-Type: text/plain;
charset=gb2312``, ``Date: Mon, 11 Jul 2005 ...`` against ``Date: 11 Jul 2005 ...``). A
spam tool does that the same way in every mail it sends, whatever words it puts in, so the
layout is evidence the words cannot give (docs/accuracy.md, "Header layout").

Two token kinds, both from the raw top-level header block:

- **field order** (``order:``): each run of ``shortest`` to ``longest`` consecutive field
  names, lower-cased, with ``^`` for the start of the block and ``$`` for its end;
- **value shapes** (``shape:<field>:``): each field's value with every run of ASCII letters
  written ``a``, of digits ``0``, of 8-bit bytes ``h`` and of white space one space; other
  characters are kept, and the shape is cut at :data:`SHAPE_CHARS` characters.

The featurizer counts these tokens in C where the extension is built
(``streamnb.features._tokens.header_layout``, the same tokens; this module is its reference).

>>> block = b'From: Ann <ann@example.com>\\nSubject: Hi 2 you\\nDate: Mon, 1 Jul 2024'
>>> header_order_tokens(block, 3, 4)
['order:^>from>subject', 'order:from>subject>date', 'order:subject>date>$', \
'order:^>from>subject>date', 'order:from>subject>date>$']
>>> header_shape_tokens(block)
['shape:from:a <a@a.a>', 'shape:subject:a 0 a', 'shape:date:a, 0 a 0']
"""

from __future__ import annotations

import re

__all__ = ["MAX_FIELDS", "SHAPE_CHARS", "header_layout_tokens", "header_order_tokens",
           "header_shape_tokens", "value_shape"]

#: Fields read from one header block (a hostile mail may carry thousands).
MAX_FIELDS = 256
#: Characters of a value's shape kept (a long value is the same tool's beyond this).
SHAPE_CHARS = 60

# A field line and its folded continuation lines (the reader's own rule for "every field").
_FIELD_RE = re.compile(rb"^([!-9;-~]+)[ \t]*:[ \t]*(.*(?:\n[ \t].*)*)", re.M)
# Each byte as its class (letter a, digit 0, 8-bit h, white space), then runs made one
# (:func:`_runs_made_one`): C-level passes instead of a Python call per run.
_CLASSES = bytes(
    ord("a") if chr(b).isascii() and chr(b).isalpha() else ord("0") if 48 <= b <= 57
    else ord("h") if b >= 0x80 else ord(" ") if chr(b) in " \t\n\r\x0b\x0c" else b
    for b in range(256)
)
# Bytes of a value shaped: enough for SHAPE_CHARS characters of shape in all but odd values.
_SHAPED_BYTES = 4 * SHAPE_CHARS


def _fields(block: bytes) -> list[tuple[bytes, bytes]]:
    fields = _FIELD_RE.findall(block, 0)
    return fields[:MAX_FIELDS]


def header_order_tokens(block: bytes, shortest: int, longest: int) -> list[str]:
    """The runs of ``shortest`` .. ``longest`` consecutive field names of the header ``block``
    (``\\n`` line ends), framed by ``^`` and ``$``; [] for an empty block."""
    return _order_tokens([name for name, _ in _fields(block)], shortest, longest)


def _order_tokens(raw_names: list[bytes], shortest: int, longest: int) -> list[str]:
    names = [name.decode("ascii").lower() for name in raw_names]
    if not names:
        return []
    framed = ["^", *names, "$"]
    tokens = []
    for n in range(shortest, longest + 1):
        tokens += ["order:" + ">".join(framed[i : i + n]) for i in range(len(framed) - n + 1)]
    return tokens


def value_shape(value: bytes) -> str:
    """``value`` with each run of letters, digits, 8-bit bytes and white space replaced by one
    character (``a``, ``0``, ``h``, a space), at most :data:`SHAPE_CHARS` characters.

    >>> value_shape(b'text/plain;\\n\\tcharset="GB2312"')
    'a/a; a="a0"'
    >>> value_shape("=?gb2312?B?0MK2q7e9?= <x@y.cn>".encode())
    '=?a0?a?0a0a0a0?= <a@a.a>'
    >>> value_shape("\u5f20\u4e09 <z@a.cn>".encode("gb18030"))
    'h <a@a.a>'
    """
    shape = _runs_made_one(value[:_SHAPED_BYTES].strip().translate(_CLASSES))
    return shape[:SHAPE_CHARS].decode("ascii")  # ASCII by construction: 8-bit bytes became h


def header_shape_tokens(block: bytes) -> list[str]:
    """``shape:<field>:<shape>`` for each field of the header ``block``, in order."""
    return _shape_tokens(_fields(block))


# Runs of one class made one character: a literal substitution per class, and split/join for
# the spaces, take a third of the time of one regex alternation with look-behinds.
_RUNS = tuple((re.compile(c + c + b"+"), c) for c in (b"a", b"0", b"h"))


def _runs_made_one(classes: bytes) -> bytes:
    """Each run of ``a``, ``0``, ``h`` or spaces in ``classes`` as one character; ``classes``
    neither starts nor ends with a space (the values are stripped)."""
    for run, one in _RUNS:
        classes = run.sub(one, classes)
    return b" ".join(classes.split()) if b"  " in classes else classes


def _shape_tokens(fields: list[tuple[bytes, bytes]]) -> list[str]:
    # Every value shaped in one translate and one pass over the values joined by NUL (a class
    # of its own, so no run crosses it); a value holding a NUL itself is shaped alone. Shapes
    # are ASCII by construction (8-bit bytes became ``h``).
    values = [value[:_SHAPED_BYTES].strip() for _, value in fields]
    shapes = _runs_made_one(b"\0".join(values).translate(_CLASSES)).decode("ascii").split("\0")
    if len(shapes) != len(values):
        shapes = [value_shape(value) for _, value in fields]
    return [_shape_prefix(name) + shape[:SHAPE_CHARS]
            for (name, _), shape in zip(fields, shapes, strict=True)]


_PREFIXES: dict[bytes, str] = {}


def _shape_prefix(name: bytes) -> str:
    """``shape:<name lower-cased>:``, made once per spelling (a bounded cache: a hostile
    stream may invent a field name a mail)."""
    prefix = _PREFIXES.get(name)
    if prefix is None:
        if len(_PREFIXES) >= 4096:
            _PREFIXES.clear()
        prefix = _PREFIXES[name] = f"shape:{name.decode('ascii').lower()}:"
    return prefix


def header_layout_tokens(block: bytes, shortest: int, longest: int, shapes: bool) -> list[str]:
    """:func:`header_order_tokens` (``longest`` > 0) and :func:`header_shape_tokens`
    (``shapes``) of ``block``, its fields read once."""
    fields = _fields(block)
    tokens = _order_tokens([name for name, _ in fields], shortest, longest) if longest else []
    if shapes:
        tokens += _shape_tokens(fields)
    return tokens
