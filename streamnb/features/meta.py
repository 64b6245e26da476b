"""Numeric meta-features of a mail or text, so a Gaussian model (GDA) can read mail too.

The first 57 follow UCI Spambase's definitions, in its order (``spambase.names``):
``word_freq_W`` = 100 × occurrences of word W / number of words, ``char_freq_C`` = 100 ×
occurrences of character C / number of characters, and the lengths of runs of capital letters
(average, longest, total). Words are this featurizer's tokens (so lower-cased when
``lowercase`` is on, which is what Spambase's case-blind counts mean); capitals are ASCII A-Z.
The rest describe the mail as a whole: its size, parts, links, images and character classes.

>>> from collections import Counter
>>> v = meta_features(None, "FREE money!!! Call NOW", Counter(["free", "money", "call", "now"]), 4)
>>> named = dict(zip(META_FEATURE_NAMES, v))
>>> named["word_freq_free"], named["char_freq_!"], named["capital_run_length_longest"]
(25.0, 13.636363636363637, 4.0)
>>> len(META_FEATURE_NAMES) == len(v) == 57 + len(EXTRA_NAMES)
True
"""

from __future__ import annotations

import math
import operator
import re
import string
from collections import Counter
from collections.abc import Mapping

from streamnb.features.mail import ParsedMail
from streamnb.features.tokenize import url_hosts

__all__ = ["EXTRA_NAMES", "META_FEATURE_NAMES", "SPAMBASE_NAMES", "meta_features"]

SPAMBASE_WORDS = (
    "make",
    "address",
    "all",
    "3d",
    "our",
    "over",
    "remove",
    "internet",
    "order",
    "mail",
    "receive",
    "will",
    "people",
    "report",
    "addresses",
    "free",
    "business",
    "email",
    "you",
    "credit",
    "your",
    "font",
    "000",
    "money",
    "hp",
    "hpl",
    "george",
    "650",
    "lab",
    "labs",
    "telnet",
    "857",
    "data",
    "415",
    "85",
    "technology",
    "1999",
    "parts",
    "pm",
    "direct",
    "cs",
    "meeting",
    "original",
    "project",
    "re",
    "edu",
    "table",
    "conference",
)
SPAMBASE_CHARS = (";", "(", "[", "!", "$", "#")
SPAMBASE_NAMES = (
    tuple(f"word_freq_{w}" for w in SPAMBASE_WORDS)
    + tuple(f"char_freq_{c}" for c in SPAMBASE_CHARS)
    + (
        "capital_run_length_average",
        "capital_run_length_longest",
        "capital_run_length_total",
    )
)
EXTRA_NAMES = (
    "log_bytes",  # log(1 + raw size in bytes); the text length for plain text
    "log_text_chars",  # log(1 + characters of visible text)
    "n_text_parts",
    "n_html_parts",
    "html_only",  # 1 if there is HTML and no plain-text part
    "n_attachments",
    "n_images",  # <img> tags in the HTML
    "n_urls",
    "n_url_hosts",  # distinct host names linked to
    "n_ip_urls",  # links to a numeric IP address
    "capital_share",  # capitals among ASCII letters
    "digit_share",  # digits among characters
    "non_ascii_share",  # non-ASCII among characters
    "subject_chars",
    "subject_capital_share",
    "subject_exclamations",
    "n_recipients",  # To and Cc addresses
)
META_FEATURE_NAMES = SPAMBASE_NAMES + EXTRA_NAMES

_word_counts = operator.itemgetter(*SPAMBASE_WORDS)
_CAPITALS_AS_A = bytes(65 if 65 <= b <= 90 else 32 for b in range(256))  # A-Z -> A, else space
_IMG_TAGS = ("<img", "<IMG", "<Img")
_IP_HOST_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_LOWER = string.ascii_lowercase.encode()
_DIGITS = string.digits.encode()
_ASCII = bytes(range(128))


def meta_features(
    mail: ParsedMail | None,
    text: str,
    counts: Mapping[str, int],
    n_words: int,
    hosts: list[str] | None = None,
) -> list[float]:
    """The :data:`META_FEATURE_NAMES` vector of a mail (or plain ``text`` if ``mail`` is None).

    ``counts`` are the tokens of ``text``, ``n_words`` the number of words read from it and
    ``hosts`` the URL hosts found (looked up here if not given).
    """
    words = n_words or 1
    n_chars = len(text) or 1
    if not isinstance(counts, Counter):
        counts = Counter(counts)  # missing words read as 0
    # map/itemgetter keep these per-message loops in C
    vector = list(map((100.0 / words).__mul__, _word_counts(counts)))
    vector += map((100.0 / n_chars).__mul__, map(text.count, SPAMBASE_CHARS))
    # Character classes counted on the UTF-8 bytes: bytes.translate runs in C, and an ASCII
    # letter or digit is one byte while no byte of a non-ASCII character is ASCII.
    data = text.encode("utf-8", "surrogatepass")
    runs, capitals, longest = _capital_runs(data)
    vector += [capitals / runs if runs else 0.0, float(longest), float(capitals)]

    lower = len(data) - len(data.translate(None, _LOWER))
    digits = len(data) - len(data.translate(None, _DIGITS))
    non_ascii = len(text) - (len(data) - len(data.translate(None, _ASCII)))
    if hosts is None:
        if mail is None:
            hosts = url_hosts(text)
        else:
            hosts = [h for p in mail.parts for h in url_hosts(p.html or p.text)]
    if mail is not None:
        html = [p.html for p in mail.parts if p.html is not None]
        n_html = len(html)
        n_plain = len(mail.parts) - n_html
        n_images = sum(h.count(tag) for h in html for tag in _IMG_TAGS)
        size, subject = mail.size, mail.subject
        n_attachments, n_recipients = len(mail.attachments), len(mail.to_addrs)
    else:
        n_html, n_plain, n_images, n_attachments, n_recipients = 0, 1, 0, 0, 0
        size, subject = len(text), ""
    subject_capitals = sum(map(subject.count, string.ascii_uppercase))
    subject_letters = subject_capitals + sum(map(subject.count, string.ascii_lowercase))
    vector += [
        math.log1p(size),
        math.log1p(len(text)),
        float(n_plain + n_html),
        float(n_html),
        float(n_html > 0 and n_plain == 0),
        float(n_attachments),
        float(n_images),
        float(len(hosts)),
        float(len(set(hosts))),
        float(sum(1 for h in hosts if _IP_HOST_RE.fullmatch(h))),
        capitals / ((capitals + lower) or 1),
        digits / n_chars,
        non_ascii / n_chars,
        float(len(subject)),
        subject_capitals / (subject_letters or 1),
        float(subject.count("!")),
        float(n_recipients),
    ]
    return vector


def _capital_runs(data: bytes) -> tuple[int, int, int]:
    """(number of runs of A-Z, capitals in all, longest run) without a string per run.

    >>> _capital_runs(b"FREE money for YOU, Ok")
    (3, 8, 4)
    """
    mapped = data.translate(_CAPITALS_AS_A)
    capitals = mapped.count(b"A")
    if not capitals:
        return 0, 0, 0
    runs = mapped.count(b" A") + mapped.startswith(b"A")
    shortest_absent, longest = capitals + 1, 1  # the longest run: binary search with `in`
    while shortest_absent - longest > 1:
        middle = (longest + shortest_absent) // 2
        if b"A" * middle in mapped:
            longest = middle
        else:
            shortest_absent = middle
    return runs, capitals, longest
