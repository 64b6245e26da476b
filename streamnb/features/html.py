"""Visible text of an HTML document.

``"selectolax"`` (the default) gives the text nodes of the tree an HTML5 parser builds, the
way a browser reads markup: entities, unclosed and misnested tags, comments, ``<script>`` and
``<style>`` bodies dropped. Two readers give that same text: the C extension's one-pass scanner
(``_tokens.html_text``: the HTML5 tokenizer and as much of the tree builder as decides the
text), and selectolax (the Lexbor parser, in C), which builds the whole tree. The scanner reads
87% of SpamAssassin's HTML parts (every part of the Chinese set), about five times faster; a
part it cannot be sure of (a <select>, foster-parented table content, foreign content, frames,
...) it hands to selectolax, and tests compare the two on every shared corpus, on generated
markup and on every named reference (docs/features.md, "HTML to text"). ``"strip"`` is a regex
fallback that is faster and cruder (kept as an option so the two can be compared).

>>> html_to_text("<p>Fr&eacute;e <b>money</b><script>x=1</script><!-- hidden --></p>")
'Fr\\xe9e  money'
>>> html_to_text("<p>Fr&eacute;e <b>money</b><script>x=1</script></p>", "strip")
'Fr\\xe9e  money'
"""

from __future__ import annotations

import html as _html
import re

from selectolax.lexbor import LexborHTMLParser

from streamnb.features import native as _native_path

__all__ = ["MAX_PARSED_TAGS", "html_to_text"]

# The one-pass scanner of the C extension, unless pure Python (as the reader's C steps)
_scan = _native_path._tokens.html_text if _native_path.enabled() else None

_INVISIBLE_TAGS = ["script", "style", "noscript", "template"]
# Whether the tree may hold an invisible element worth a strip_tags call: one of these literal
# spellings occurs. One search for the alternation of the literals (case-sensitive) passes over
# the markup once, where a substring check per spelling took seven passes (3 us a mail on
# SpamAssassin against 0.7); a case-blind regex would be slower than both.
_INVISIBLE_MARKS = ("<script", "<style", "<SCRIPT", "<STYLE", "<Script", "<Style", "<noscript")
_INVISIBLE_MARK_RE = re.compile("|".join(map(re.escape, _INVISIBLE_MARKS)))
_TAG_RE = re.compile(r"<[^<>]*>")  # stops at the next "<": linear even if ">" never comes
_INVISIBLE_BLOCKS = (("<script", "</script"), ("<style", "</style"), ("<!--", "-->"))

#: The most ``<`` a part's markup may hold for an HTML parser to build its tree; beyond it the
#: reader takes the linear tag strip (``"strip"``) and notes ``html_too_many_tags``. Lexbor's
#: time grows with the square of the nesting: 20,000, 50,000 and 200,000 nested ``<div>`` took
#: 0.31 s, 2.2 s and 126 s, where the most in one part of the shared corpora is 2,299.
MAX_PARSED_TAGS = 20_000


def html_to_text(markup: str, method: str = "selectolax", *, scan: bool | None = None) -> str:
    """The text a reader of ``markup`` would see (whitespace as it comes).

    ``scan``: whether ``"selectolax"`` tries the C scanner first (the same text); ``None``
    takes it when :func:`streamnb.features.native.enabled` says so, ``False`` always parses
    with selectolax.
    """
    if method == "strip":
        text = _html.unescape(_TAG_RE.sub(" ", _drop_invisible(markup)))
    else:
        strip = _INVISIBLE_MARK_RE.search(markup) is not None
        scanner = _scan if scan is None else _native_path._tokens.html_text if scan else None
        if scanner is not None and (text := scanner(markup, strip)) is not None:
            return text.strip()
        tree = LexborHTMLParser(markup)
        if strip:
            tree.strip_tags(_INVISIBLE_TAGS)
        root = tree.root  # the <title> is visible too
        text = root.text(separator=" ") if root is not None else ""
    return text.strip()


def _drop_invisible(markup: str) -> str:
    """``markup`` without script, style and comment blocks, in one pass.

    An unclosed block runs to the end, as in a browser. Each kind's next start is looked up
    again only once passed, so the scan stays linear however many blocks there are.
    """
    lower = markup.lower()
    kept = []
    pos = 0
    next_start = {opening: lower.find(opening) for opening, _ in _INVISIBLE_BLOCKS}
    while True:
        for opening, _ in _INVISIBLE_BLOCKS:
            if 0 <= next_start[opening] < pos:
                next_start[opening] = lower.find(opening, pos)
        found = [(i, o, c) for o, c in _INVISIBLE_BLOCKS if (i := next_start[o]) >= 0]
        if not found:
            kept.append(markup[pos:])
            return " ".join(kept)
        start, opening, closing = min(found)
        kept.append(markup[pos:start])
        end = lower.find(closing, start + len(opening))
        if end < 0:
            return " ".join(kept)
        end = lower.find(">", end + len(closing) - 1)
        pos = len(markup) if end < 0 else end + 1
