"""The C scanner of HTML (``_tokens.html_text``) gives exactly selectolax's text, or gives up.

``html_to_text(markup, scan=False)`` parses with selectolax (Lexbor's HTML5 tree builder) and
is the reference; ``scan=True`` tries the scanner first. They are compared on every HTML part
of the shared raw corpora (read by the featurizer's reader), on markup generated from a
grammar of tags, attributes, references, comments, text and junk, and on every named character
reference. Where the scanner is not sure of the tree it returns None and the caller parses with
selectolax, so a test here fails only if the scanner returns a text that differs.
"""

from __future__ import annotations

import tarfile
from html.entities import html5

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scripts.gen_html_entities import HEADER, render
from streamnb.features import mail, native
from streamnb.features.html import _INVISIBLE_MARK_RE, html_to_text
from tests.features.token_digests import CORPORA

_tokens = native._tokens
pytestmark = pytest.mark.skipif(_tokens is None, reason="the C extension is not built")


def both(markup: str) -> tuple[str | None, str]:
    """The scanner's text (stripped, as html_to_text gives it; None: it gave up), selectolax's."""
    scanned = _tokens.html_text(markup, _INVISIBLE_MARK_RE.search(markup) is not None)
    reference = html_to_text(markup, scan=False)
    assert html_to_text(markup, scan=True) == reference
    return (None if scanned is None else scanned.strip()), reference


def assert_scanned_text_is_selectolax(markup: str) -> None:
    """The scanner gives up on ``markup`` or gives selectolax's text."""
    scanned, reference = both(markup)
    if scanned is not None:
        assert scanned == reference


def html_parts(data_dir, corpus: str):
    with tarfile.open(data_dir / corpus / "messages.tar.gz") as archive:
        for member in archive:
            if member.isfile():
                parsed = mail.read_mail(archive.extractfile(member).read())
                for part in parsed.parts:
                    if part.html is not None:
                        yield member.name, part.html


# the least share of each corpus' HTML parts the scanner reads itself (measured: 0.962, 1.0)
FAST_SHARE = {"spamassassin": 0.95, "chinese-spam": 0.95}


@pytest.mark.parametrize("corpus", CORPORA)
def test_every_html_part_of_the_corpora_gives_selectolax_text(data_dir, corpus):
    parts = fast = 0
    for name, markup in html_parts(data_dir, corpus):
        scanned, reference = both(markup)
        parts += 1
        if scanned is not None:
            fast += 1
            assert scanned == reference, name
    if corpus in FAST_SHARE:
        assert parts > 100 and fast / parts >= FAST_SHARE[corpus], (fast, parts)


def test_the_entity_header_is_pythons_list():
    assert HEADER.read_text() == render()


@pytest.mark.parametrize("name", sorted(html5))
def test_every_named_reference_as_lexbor_reads_it(name):
    for markup in (f"x&{name}y", f"<p>&{name}</p>", f"&{name};", f"&{name}a;b", f"&{name}1"):
        scanned, reference = both(markup)
        assert scanned == reference, markup


_TAG_NAMES = [
    "html", "head", "body", "title", "p", "div", "span", "b", "i", "u", "a", "font", "strong",
    "em", "s", "big", "small", "tt", "code", "table", "tbody", "thead", "tfoot", "tr", "td", "th",
    "caption", "col", "colgroup", "li", "ul", "ol", "dl", "dd", "dt", "pre", "listing", "form",
    "input", "br", "img", "hr", "meta", "link", "base", "basefont", "script", "style", "iframe",
    "textarea", "xmp", "noembed", "noframes", "noscript", "select", "option", "optgroup",
    "selectedcontent", "h1", "h2", "h6",
    "center", "blockquote", "address", "button", "nobr", "template", "svg", "math", "frameset",
    "frame", "plaintext", "marquee", "object", "applet", "area", "wbr", "param", "source",
    "embed", "image", "main", "section", "o:p", "xml", "x-y", "unknown"
]
_ATTRIBUTES = st.sampled_from([
    "", " class=a", ' type="hidden"', " type=hidden", " TYPE='Hidden'", " type=text", ' a=">"',
    " a='<b>'", " a", " a=", " =x", ' a="x" b', " /", "/", ' a="unclosed', " type=hidden type=x",
    ' face="Arial"', ' size="2"', " color=red",
])
_REFERENCES = st.sampled_from([
    "&amp;", "&amp", "&nbsp;", "&nbsp", "&notit;", "&notin;", "&#65;", "&#x41;", "&#X41", "&#128;",
    "&#0;", "&#xD800;", "&#1114112;", "&#99999999999;", "&#13;", "&#10;", "&#", "&#x;", "&", "&;",
    "&lt", "&gt;", "&copy", "&quot;", "&eacute;", "&unknown;", "&#x80", "&#159;", "&#1;",
    "&#x1F600;", "&AMP;", "&ampx",
])
_JUNK = st.sampled_from([
    "<", ">", "&", "</", "</>", "<!", "<!--", "-->", "<!-->", "<!--->", "<!-- c -->", "<!---->",
    "<!-- a --!> b", "<!x>", "<?x?>", "</3>", "<3", "< p>", "<!DOCTYPE html>", "<!doctype HTML>",
    '<!DOCTYPE html PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">', "<![CDATA[x]]>",
    '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01//EN" "http://www.w3.org/TR/html4/strict.dtd">',
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "x.dtd">',
    "<!DOCTYPE HTML PUBLIC '-//W3C//DTD HTML 4.01 Transitional//EN' 'x'>", "<!DOCTYPE>",
    '<!DOCTYPE html SYSTEM "about:legacy-compat">', "<!DOCTYPE html PUBLIC>", "<!DOCTYPEhtml>",
    "<!DOCTYPE html PUBLIC 'x'x>", '<!DOCTYPE html PUBLIC "x" "y" z>', "<!DOCTYPE svg>",
    "</title>", "</script>", "<script><!--x</script>", "\x00", "\ud800", "\r\n", "\r", "\f",
    "<script><!--", "-->", "<!--<script>", "--></script>", "</script >", "<scripts>",
])
_TEXT = st.sampled_from([
    "a", "word", " ", "  ", "\n", "\t", "x y", "é", "中文", "\U0001f600", "Free!", "\xa0",
])


@st.composite
def tags(draw):
    name = draw(st.sampled_from(_TAG_NAMES))
    name = draw(st.sampled_from([name, name.upper(), name.capitalize()]))
    kind = draw(st.sampled_from(["<{}{}>", "</{}{}>", "<{}{}/>"]))
    return kind.format(name, draw(_ATTRIBUTES))


markups = st.lists(
    st.one_of(tags(), tags(), tags(), _REFERENCES, _JUNK, _TEXT, _TEXT), max_size=60
).map("".join)


@settings(max_examples=3000, deadline=None)
@given(markups)
@example("<b>1<p>2</b>3")
@example("<b>1<p><i>2</b>3")
@example("<a>1<a>2</a>")
@example("<a>1<b>2<a>3</a>4")
@example("<script><!--<script></script>x</script>y")
@example('<font size=2><font size=2><font size=2><font size=2>a</font></font></font></font>b')
@example("x<table>y</table>")
@example("Tesco.<table><tr><table>   <tr>   <td>We</table>b")
@example("<table><tr><td><table>\n<table><tr><td>a</table>b</table>c")
@example("<table><tr><td>a</td></tr></table><p>b")
@example("<p>a<table><tr><td>b</table>c")
@example('<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.0 Transitional//EN"><p>a<table>b</table>c</p>')
@example('<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "x"><p>a<table></table></p>b')
@example("<font><font><font><font>a</font>b")
@example("<pre>\nx</pre>")
@example("<title>a&amp;b</title>c")
@example("<html><head>\n<title>T</title>\n</head>\n<body>\nHello</body></html>\nafter")
def test_generated_markup_gives_selectolax_text(markup):
    assert_scanned_text_is_selectolax(markup)


# The elements whose rules decide a select's text (Lexbor reads a select's content by the rules
# for in body, a select being a scope boundary; option, optgroup, hr and input close parts of
# it), with the formatting, block, list, form and table tags they meet.
_SELECT_TAG_NAMES = [
    "select", "option", "optgroup", "select", "option", "p", "b", "i", "a", "font", "div", "span",
    "input", "hr", "li", "ul", "dd", "table", "tr", "td", "br", "button", "textarea", "form",
    "h1", "pre", "body", "html", "selectedcontent", "keygen",
]


@st.composite
def tags_of(draw, names: list[str], attributes: list[str]):
    """A start tag (twice as likely) or an end tag of one of ``names``, maybe an attribute."""
    kind = draw(st.sampled_from(["<{}{}>", "<{}{}>", "</{}{}>"]))
    return kind.format(draw(st.sampled_from(names)), draw(st.sampled_from(attributes)))


select_tags = tags_of(_SELECT_TAG_NAMES, ["", " class=a", " type=hidden"])
select_markups = st.lists(
    st.one_of(select_tags, select_tags, select_tags, _TEXT), max_size=40
).map("".join)


@settings(max_examples=2000, deadline=None)
@given(select_markups)
@example("<p>a<select><option>x<p>y</p>z</select>w</p>q")
@example("<div><select>a</div>b")
@example("<select><option>a<option>b<optgroup>c<option>d</select>e")
@example("<select><b>x<option>y</b>z</select>w")
@example("<select>a<select>b<input>c<hr>d")
@example("<p>a<select></p>b")
def test_generated_select_markup_gives_selectolax_text(markup):
    assert_scanned_text_is_selectolax(markup)


# Tables with content that is not the table's own: an element in a table goes before it
# (foster parenting), its text before the table's text, and the mode stays the table's.
_TABLE_TAG_NAMES = [
    "table", "tbody", "tr", "td", "th", "table", "tr", "td", "font", "b", "i", "center", "div",
    "p", "span", "br", "img", "input", "meta", "hr", "a", "caption", "form", "ul", "li", "select",
]
_TABLE_TEXT = st.sampled_from([" ", "\n", "  ", "x", "y z", "<!--c-->", "&nbsp;", "\r\n"])


table_tags = tags_of(_TABLE_TAG_NAMES, ["", " size=2", " type=hidden"])
table_markups = st.lists(
    st.one_of(table_tags, table_tags, _TABLE_TEXT), max_size=40
).map("".join)


@settings(max_examples=3000, deadline=None)
@given(table_markups)
@example("a<table><tr><center>\n  <td>b</td></center></table>c")
@example("<table><tr><td>a</td><font face=x>\n<td>b</td></tr></table>c<br>d")
@example("x<table><tr> <br> <td>a</table>")
@example("<table>\n<center> </center>\n<tr><td>a</table>")
@example("<b><table><tr><td>a</td></tr><p> \n<p>\n</table>c")
def test_generated_table_markup_gives_selectolax_text(markup):
    assert_scanned_text_is_selectolax(markup)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("<>/!-&#;=\"' abpx\n\r"), max_size=80))
def test_markup_of_delimiters_gives_selectolax_text(markup):
    assert_scanned_text_is_selectolax(markup)


def test_the_scanner_reads_common_mail_markup_itself():
    markup = (
        "<html><head><title>Offer</title><style>p {}</style></head><body>"
        "<table><tr><td><font face=Arial>Fr<b>ee</b>&nbsp;money</font></td></tr></table>"
        "<p>Click <a href='http://x'>here</a><br>now<!-- hidden --></p></body></html>"
    )
    scanned, reference = both(markup)
    assert scanned == reference == "Offer Fr ee \xa0money Click  here now"
