"""Visible text of an HTML document.

``selectolax`` (the Lexbor HTML5 parser, in C) reads markup the way a browser does: entities,
unclosed tags, comments, ``<script>`` and ``<style>`` bodies. ``"strip"`` is a regex fallback
that is faster and cruder (kept as an option so the two can be compared).

>>> html_to_text("<p>Fr&eacute;e <b>money</b><script>x=1</script><!-- hidden --></p>")
'Fr\\xe9e money'
>>> html_to_text("<p>Fr&eacute;e <b>money</b><script>x=1</script></p>", "strip")
'Fr\\xe9e money'
"""

from __future__ import annotations

import html as _html
import re

from selectolax.lexbor import LexborHTMLParser

__all__ = ["html_to_text"]

_INVISIBLE_TAGS = ["script", "style", "noscript", "template"]
_SPACES_RE = re.compile(r"\s+")
_STRIP_RE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>", re.S | re.I)


def html_to_text(markup: str, method: str = "selectolax") -> str:
    """The text a reader of ``markup`` would see, whitespace collapsed."""
    if method == "strip":
        text = _html.unescape(_STRIP_RE.sub(" ", markup))
    else:
        tree = LexborHTMLParser(markup)
        tree.strip_tags(_INVISIBLE_TAGS)
        root = tree.root  # the <title> is visible too
        text = root.text(separator=" ") if root is not None else ""
    return _SPACES_RE.sub(" ", text).strip()
