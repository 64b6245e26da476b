"""Text -> tokens: Unicode words, Chinese segmentation, URL hosts, numbers, stop words, bigrams.

Rules (each an option of :class:`~streamnb.features.options.FeaturizerOptions`):

* a word is a run of Unicode letters, digits, marks and ``_`` that starts with a letter or
  digit (so ``____`` rules are not words); punctuation and spaces split words, except the
  ``word_joiners`` (``-``) inside a word and before a letter: ``click-here`` stays whole,
  ``555-1234`` does not (``join_digits`` joins it too);
* runs of Han characters go to a Chinese segmenter (rjieba by default) instead
  (``cjk_runs`` also keeps the whole run, ``cjk_bigrams`` each pair of adjacent characters);
* text is lower-cased first (``lowercase``);
* words shorter than ``min_token_len`` or longer than ``max_token_len`` are dropped whole
  (segmented Chinese words use ``min_cjk_token_len``);
* an amount of money gives a ``$100`` token besides the ``100``;
* ``numbers``: ``keep`` them, ``drop`` them, or ``shape`` them (each digit becomes ``0``);
* URLs give ``url:<host>`` and ``url:<domain>`` tokens (``url:ip`` for a numeric host);
* stop words (``stop_lists``, ``stop_words``) are dropped;
* ``bigrams`` adds ``"first second"`` for each pair of adjacent words that were kept.

>>> tok = Tokenizer(FeaturizerOptions(bigrams=True))
>>> sorted(tok.count("Get $100 NOW, at http://www.Cheap-Pills.com/buy!").items())
[('$100', 1), ('100', 1), ('100 now', 1), ('at', 1), ('at http', 1), ('buy', 1),
 ('cheap-pills', 1), ('cheap-pills com', 1), ('com', 1), ('com buy', 1), ('get', 1),
 ('get 100', 1), ('http', 1), ('http www', 1), ('now', 1), ('now at', 1),
 ('url:cheap-pills.com', 1), ('url:www.cheap-pills.com', 1), ('www', 1), ('www cheap-pills', 1)]
>>> tok.words("我司可办理正规发票（保真）17%增值税发票点数优惠！")
['我司', '可', '办理', '正规', '发票', '保真', '17', '增值税', '发票', '点数', '优惠']
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

from streamnb.features.mail import registrable_domain
from streamnb.features.options import FeaturizerOptions
from streamnb.features.stopwords import STOP_LISTS

__all__ = ["Tokenizer", "url_hosts"]

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
_HAN_RUN_RE = re.compile(f"([{_HAN}]+)")
_HAN_CHAR_RE = re.compile(f"[{_HAN}]")
_MONEY_RE = re.compile(r"\$\d+")
# What may follow "scheme://": optional user info, then the host name.
_URL_HOST_RE = re.compile(r"(?:[^\s/?#@\"'<>]{0,64}@)?([\w-]+(?:\.[\w-]+)+)", re.A)
_HOST_RE = re.compile(r"[\w-]+(?:\.[\w-]+)+", re.A)
_SCHEMES = ("http", "https", "ftp")
_NOT_BEFORE_WWW = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./@-")
_IP_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DIGIT_RE = re.compile(r"\d")


def url_hosts(text: str) -> list[str]:
    """Host names of the URLs in ``text`` (``http(s)://``, ``ftp://`` and bare ``www.``).

    >>> url_hosts('<a href="HTTP://user@Shop.Example.COM:80/x">see www.foo.org.</a>')
    ['shop.example.com', 'www.foo.org']
    """
    hosts = []
    if "://" in text:
        pieces = text.split("://")
        match = _URL_HOST_RE.match
        for before, after in zip(pieces, pieces[1:], strict=False):
            if before[-5:].lower().endswith(_SCHEMES) and (found := match(after)):
                hosts.append(found.group(1).lower())
    if "WWW." in text:
        text = text.replace("WWW.", "www.")
    if "www." in text:
        pieces = text.split("www.")
        match = _HOST_RE.match
        for before, after in zip(pieces, pieces[1:], strict=False):
            if (not before or before[-1] not in _NOT_BEFORE_WWW) and (found := match(after)):
                hosts.append("www." + found.group().lower())
    return hosts


def url_tokens(hosts: Iterable[str]) -> list[str]:
    """``url:<host>`` and, if different, ``url:<domain>`` for each host (``url:ip`` for IPs)."""
    tokens = []
    for host in hosts:
        if _IP_RE.fullmatch(host):
            tokens += ("url:ip", "url:" + host)
            continue
        tokens.append("url:" + host)
        domain = registrable_domain(host)
        if domain != host:
            tokens.append("url:" + domain)
    return tokens


class Tokenizer:
    """Splits text into tokens according to ``options`` (see the module docstring)."""

    def __init__(self, options: FeaturizerOptions | None = None):
        self.options = options = options or FeaturizerOptions()
        lo, hi = max(options.min_token_len, 1), max(options.max_token_len, 1)
        # Length bounds live in the regex, so no Python loop looks at each word: a run longer
        # than ``hi`` has no word boundary after ``hi`` characters and is skipped whole.
        word = rf"\b[^\W_]\w{{{lo - 1},{hi - 1}}}\b"
        self._joined = bool(options.word_joiners)
        if self._joined:  # joiners only inside: "click-here-" is "click-here"
            inner = re.escape(options.word_joiners)
            word = (rf"[^\W_](?:[\w{inner}]*[^\W_])?" if options.join_digits
                    else rf"[^\W_]\w*(?:[{inner}]+[^\W\d_]\w*)*")
        self._word_re = re.compile(word)
        self._ascii_word_re = re.compile(word, re.ASCII)  # same words, faster on ASCII text
        stop: set[str] = set(options.stop_words)
        for name in options.stop_lists:
            if name not in STOP_LISTS:
                raise ValueError(f"stop_lists: no built-in list {name!r} ({', '.join(STOP_LISTS)})")
            stop |= STOP_LISTS[name]
        if options.lowercase:
            stop = {w.lower() for w in stop}
        self._stop = frozenset(stop)
        self._segment = _segmenter(options.cjk_segmenter, options.cjk_hmm)

    def words(self, text: str) -> list[str]:
        """The words of ``text`` in order: lower-cased, length-bounded, Chinese segmented.

        Stop words, money and number rules are applied by :meth:`count`, not here.
        """
        options = self.options
        if options.lowercase:
            text = text.lower()
        if text.isascii():
            return self._bounded(self._ascii_word_re.findall(text))
        if not _HAN_CHAR_RE.search(text):
            return self._bounded(self._word_re.findall(text))
        words: list[str] = []
        find = self._word_re.findall
        segment = self._segment
        lo, hi = options.min_cjk_token_len, options.max_token_len
        for i, chunk in enumerate(_HAN_RUN_RE.split(text)):
            if i % 2:
                pieces = segment(chunk)
                words += [w for w in pieces if lo <= len(w) <= hi]
                if options.cjk_runs and len(pieces) > 1:
                    words.append(chunk[:hi])
                if options.cjk_bigrams:
                    words += map("".join, zip(chunk, chunk[1:], strict=False))
            elif chunk:
                words += self._bounded(find(chunk))
        return words

    def _bounded(self, words: list[str]) -> list[str]:
        """Words within the length bounds (the plain word regex has them built in)."""
        if not self._joined:
            return words
        lo, hi = self.options.min_token_len, self.options.max_token_len
        return [w for w in words if lo <= len(w) <= hi]

    def count(
        self,
        text: str,
        max_tokens: int | None = None,
        on_cut: Callable[[], None] | None = None,
        urls: bool = True,
    ) -> Counter[str]:
        """Token -> occurrences in ``text`` (words, bigrams, money and URL tokens).

        At most ``max_tokens`` words are counted; ``on_cut`` is called if that cut the text.
        ``urls=False`` leaves URL tokens to the caller (a mail takes them from its HTML).
        """
        options = self.options
        words = self.words(text)
        if max_tokens is not None and len(words) > max_tokens:
            words = words[:max_tokens]
            if on_cut is not None:
                on_cut()
        if options.numbers != "keep":
            words = self._numbers(words)
        if options.bigrams:
            if self._stop:
                stop = self._stop
                words = [w for w in words if w not in stop]
            counts = Counter(words)
            counts.update(map(" ".join, zip(words, words[1:], strict=False)))
        else:
            counts = Counter(words)
            if self._stop:  # the stop list is short, the counts may be long
                for word in [w for w in self._stop if w in counts]:
                    del counts[word]
        if "$" in text and options.numbers != "drop":
            money = _MONEY_RE.findall(text)
            if options.numbers == "shape":
                money = [_DIGIT_RE.sub("0", m) for m in money]
            counts.update(money)
        if urls and options.url_tokens:
            counts.update(url_tokens(url_hosts(text)))
        return counts

    def prefixed(self, prefix: str, text: str) -> list[str]:
        """The words of ``text`` (stop words kept) as ``prefix:word`` tokens."""
        return [prefix + w for w in self.words(text)]

    def _numbers(self, words: list[str]) -> list[str]:
        """Numbers dropped or shaped (``123`` -> ``000``); words with digits in them are kept."""
        if self.options.numbers == "drop":
            return [w for w in words if not w.isdigit()]
        return [_DIGIT_RE.sub("0", w) if w.isdigit() else w for w in words]


def _segmenter(name: str, hmm: bool) -> Callable[[str], list[str]]:
    if name == "chars":
        return list
    if name == "jieba":
        import logging

        import jieba

        jieba.setLogLevel(logging.WARNING)
        return lambda text: jieba.lcut(text, HMM=hmm)
    import rjieba

    return lambda text: rjieba.cut(text, hmm)
