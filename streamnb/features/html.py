"""Visible text of an HTML document.

``selectolax`` (the Lexbor HTML5 parser, in C) reads markup the way a browser does: entities,
unclosed tags, comments, ``<script>`` and ``<style>`` bodies. ``"strip"`` is a regex fallback
that is faster and cruder (kept as an option so the two can be compared).

>>> html_to_text("<p>Fr&eacute;e <b>money</b><script>x=1</script><!-- hidden --></p>")
'Fr\\xe9e  money'
>>> html_to_text("<p>Fr&eacute;e <b>money</b><script>x=1</script></p>", "strip")
'Fr\\xe9e  money'
"""

from __future__ import annotations

import html as _html
import re

from selectolax.lexbor import LexborHTMLParser

__all__ = ["html_to_text"]

_INVISIBLE_TAGS = ["script", "style", "noscript", "template"]
# Literal checks are much faster than a case-blind regex over the whole document.
_INVISIBLE_MARKS = ("<script", "<style", "<SCRIPT", "<STYLE", "<Script", "<Style", "<noscript")
_STRIP_RE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>", re.S | re.I)


def html_to_text(markup: str, method: str = "selectolax") -> str:
    """The text a reader of ``markup`` would see (whitespace as it comes)."""
    if method == "strip":
        text = _html.unescape(_STRIP_RE.sub(" ", markup))
    else:
        tree = LexborHTMLParser(markup)
        if any(mark in markup for mark in _INVISIBLE_MARKS):
            tree.strip_tags(_INVISIBLE_TAGS)
        root = tree.root  # the <title> is visible too
        text = root.text(separator=" ") if root is not None else ""
    return text.strip()
