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
* ``bigrams`` adds ``"first second"`` for each pair of adjacent words that were kept;
* ``osb_window`` > 1 adds crm114's orthogonal sparse bigrams: each kept word paired with each
  of the next ``osb_window - 1`` kept words, one ``_`` per word between them
  (``"first second"``, ``"first _ third"``, ...; see :func:`osb_pairs`).

>>> tok = Tokenizer(FeaturizerOptions(bigrams=True))
>>> sorted(tok.count("Get $100 NOW, at http://www.Cheap-Pills.com/buy!").items())
[('$100', 1), ('100', 1), ('100 now', 1), ('at', 1), ('at http', 1), ('buy', 1),
 ('cheap-pills', 1), ('cheap-pills com', 1), ('com', 1), ('com buy', 1), ('get', 1),
 ('get 100', 1), ('http', 1), ('http www', 1), ('now', 1), ('now at', 1),
 ('url:cheap-pills.com', 1), ('url:www.cheap-pills.com', 1), ('www', 1), ('www cheap-pills', 1)]
>>> tok.words("我司可办理正规发票（保真）17%增值税发票点数优惠！")
['我司', '可', '办理', '正规', '发票', '我司可办理正规发票', '保真', '17', '增值税', '发票', '点数',
 '优惠', '增值税发票点数优惠']
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache, partial
from itertools import filterfalse

from streamnb.features import native as _native_path
from streamnb.features.mail import SECOND_LEVEL_LABELS, registrable_domain
from streamnb.features.options import FeaturizerOptions
from streamnb.features.stopwords import STOP_LISTS

__all__ = ["Tokenizer", "has_han", "osb_pairs", "url_hosts"]

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
_HAN_RUN_RE = re.compile(f"([{_HAN}]+)")
_HAN_CHAR_RE = re.compile(f"[{_HAN}]")
_MONEY_RE = re.compile(r"\$\d+")
# Non-ASCII characters that are never part of a word and are common in mail (no-break space,
# typographic quotes and dashes, bullets). Replacing them with spaces changes no word, and
# often leaves ASCII text, which the much faster ASCII-only regex can split.
_NON_ASCII_SEPARATORS = "\xa0\u2019\u201c\u201d\u2018\u2022\u2014\u2013\u00b7\u2026\u00a9\u00ae"
# What may follow "scheme://": optional user info, then the host name.
_URL_HOST_RE = re.compile(r"(?:[^\s/?#@\"'<>]{0,64}@)?([\w-]+(?:\.[\w-]+)+)", re.A)
_HOST_RE = re.compile(r"[\w-]+(?:\.[\w-]+)+", re.A)
_SCHEMES = ("http", "https", "ftp")
_NOT_BEFORE_WWW = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./@-")
_IP_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DIGIT_RE = re.compile(r"\d")
# An empty Counter made without Counter.__init__, whose Python (super().__init__, update())
# costs 0.27 µs where this is 0.05: a mail's counts are made once per mail.
_new_counter: Callable[[], Counter[str]] = partial(dict.__new__, Counter)


def has_han(text: str) -> bool:
    """Whether ``text`` holds a Han character (the C extension's ``has_han`` is the same test).

    Lower-casing and the separators :class:`Tokenizer` replaces neither make nor remove one,
    so the raw text answers for the prepared one.
    """
    return _HAN_CHAR_RE.search(text) is not None


def url_hosts(text: str) -> list[str]:
    """Host names of the URLs in ``text`` (``http(s)://``, ``ftp://`` and bare ``www.``).

    >>> url_hosts('<a href="HTTP://user@Shop.Example.COM:80/x">see www.foo.org.</a>')
    ['shop.example.com', 'www.foo.org']
    """
    hosts = []
    # Each URL is looked at between the marker before it and the one after it (str.find, no
    # copies of a long HTML part), as if the text had been split at the markers.
    match = _URL_HOST_RE.match
    start, at = 0, text.find("://")
    while at >= 0:
        after, following = at + 3, text.find("://", at + 3)
        end = len(text) if following < 0 else following
        if text[max(start, at - 5) : at].lower().endswith(_SCHEMES) and (
            found := match(text, after, end)
        ):
            hosts.append(found.group(1).lower())
        start, at = after, following
    if "WWW." in text:
        text = text.replace("WWW.", "www.")
    match = _HOST_RE.match
    start, at = 0, text.find("www.")
    while at >= 0:
        after, following = at + 4, text.find("www.", at + 4)
        end = len(text) if following < 0 else following
        if (at == start or text[at - 1] not in _NOT_BEFORE_WWW) and (
            found := match(text, after, end)
        ):
            hosts.append("www." + found.group().lower())
        start, at = after, following
    return hosts


def url_tokens(hosts: Iterable[str]) -> list[str]:
    """``url:<host>`` and, if different, ``url:<domain>`` for each host (``url:ip`` for IPs)."""
    tokens: list[str] = []
    for host in hosts:
        tokens += _host_tokens(host)
    return tokens


@lru_cache(maxsize=4096)  # a stream links to the same few thousand hosts again and again
def _host_tokens(host: str) -> tuple[str, ...]:
    if _IP_RE.fullmatch(host):
        return ("url:ip", "url:" + host)
    domain = registrable_domain(host)
    return ("url:" + host,) if domain == host else ("url:" + host, "url:" + domain)


def osb_pairs(words: list[str], window: int) -> list[str]:
    """Orthogonal sparse bigrams: each word with each of the next ``window - 1`` words.

    The distance is kept as one ``_`` per word skipped, so the same two words one and two
    words apart are different tokens (crm114's OSB, which also keeps the distance in its hash).

    >>> osb_pairs(["buy", "cheap", "pills", "now"], 3)
    ['buy cheap', 'cheap pills', 'pills now', 'buy _ pills', 'cheap _ now']
    """
    pairs: list[str] = []
    for distance in range(1, window):
        joiner = " " + "_ " * (distance - 1)
        pairs += map(joiner.join, zip(words, words[distance:], strict=False))
    return pairs


class Tokenizer:
    """Splits text into tokens according to ``options`` (see the module docstring).

    ``native`` chooses how words are found: in C (``streamnb.features._tokens``) or by the
    regexes below; ``None`` takes C when :func:`streamnb.features.native.enabled` says so.
    The tokens are the same.
    """

    def __init__(self, options: FeaturizerOptions | None = None, *, native: bool | None = None):
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
        # ASCII text is cut into chunks with str.translate and str.split, both in C: every
        # ASCII character that can be in no word becomes a space. A chunk of letters and digits
        # is one word; the rest (a joiner or "_" in it) goes through the regex, which cannot
        # match across a space, so the words are the same as the regex's over the whole text.
        word_chars = set(string.ascii_letters + string.digits + "_" + options.word_joiners)
        self._ascii_separators = str.maketrans(
            {chr(c): " " for c in range(128) if chr(c) not in word_chars}
        )
        # The bounds the word regex has built in, or that _bounded applies to joined words.
        self._bounds = (options.min_token_len, options.max_token_len) if self._joined else (lo, hi)
        _tokens = _native_path._tokens
        if native is None:
            native = _native_path.enabled()
        elif native and _tokens is None:
            raise RuntimeError("the C extension streamnb.features._tokens is not built")
        _native_path.log_path_once(native)
        #: Whether this tokenizer (and the featurizer around it) runs the C extension.
        self.native: bool = bool(native)
        # The same rule in C: finds the words in one pass and makes one str per distinct word.
        self._native = (
            _tokens.WordCounter(*self._bounds, options.word_joiners, options.join_digits)
            if native
            else None
        )
        #: :func:`url_hosts`, in C when the words are.
        self.url_hosts: Callable[[str], list[str]] = _tokens.url_hosts if native else url_hosts
        # one pass in C; the regex scans a long non-ASCII text several times slower
        self._has_han: Callable[[str], bool] = _tokens.has_han if native else has_han
        stop: set[str] = set(options.stop_words)
        for name in options.stop_lists:
            if name not in STOP_LISTS:
                raise ValueError(f"stop_lists: no built-in list {name!r} ({', '.join(STOP_LISTS)})")
            stop |= STOP_LISTS[name]
        if options.lowercase:
            stop = {w.lower() for w in stop}
        self._stop = frozenset(stop)
        self._segment = _segmenter(options.cjk_segmenter, options.cjk_hmm)
        # count_words' fast path: no pairs, numbers kept, so the counts need no word order
        self._in_any_order = (
            not (options.bigrams or options.osb_window) and options.numbers == "keep"
        )
        # the money regex and its count in one call, where the amounts are kept as they are
        self._count_money: Callable[[str, Counter[str]], None] | None = (
            _tokens.count_money if native and options.numbers == "keep" else None
        )

    def words(self, text: str) -> list[str]:
        """The words of ``text`` in order: lower-cased, length-bounded, Chinese segmented.

        Stop words, money and number rules are applied by :meth:`count`, not here.
        """
        options = self.options
        text = self._prepare(text)
        if self._native is not None:
            find = self._native.words
            if text.isascii() or not self._has_han(text):
                return find(text)
        elif text.isascii():
            return self._bounded(self._ascii_word_re.findall(text))
        elif not self._has_han(text):
            return self._bounded(self._word_re.findall(text))
        else:
            regex_find = self._word_re.findall

            def find(chunk: str) -> list[str]:
                return self._bounded(regex_find(chunk))

        chunks = _HAN_RUN_RE.split(text)  # other text, Han run, other text, Han run, ...
        segmented = iter(self._segment(" ".join(chunks[1::2])))  # one call for all runs
        lo, hi = options.min_cjk_token_len, options.max_token_len
        whole_runs = options.cjk_runs or options.cjk_bigrams
        words: list[str] = []
        for i, chunk in enumerate(chunks):
            if not i % 2:
                if chunk:
                    words += find(chunk)
                continue
            pieces = 0
            for word in segmented:  # this run's words, up to the " " between runs
                if word == " ":
                    break
                pieces += 1
                if lo <= len(word) <= hi:
                    words.append(word)
            if whole_runs:
                if options.cjk_runs and pieces > 1:
                    words.append(chunk[:hi])
                if options.cjk_bigrams:
                    words += map("".join, zip(chunk, chunk[1:], strict=False))
        return words

    def _ascii_bag(self, text: str) -> Counter[str]:
        """Counts of the words of ASCII ``text``, each distinct chunk looked at once.

        The same counts as the word regex gives, in another order when a chunk is not a word.
        """
        lo, hi = self._bounds
        counts = Counter(text.translate(self._ascii_separators).split())
        odd = [c for c in counts if not (lo <= len(c) <= hi and c.isalnum())]
        if odd:
            popped = [(c, counts.pop(c)) for c in odd]
            find = self._ascii_word_re.findall
            for chunk, n in popped:
                if not chunk.isalnum():
                    for word in find(chunk):
                        if lo <= len(word) <= hi:
                            counts[word] += n
        return counts

    def _bounded(self, words: list[str]) -> list[str]:
        """Words within the length bounds (the plain word regex has them built in)."""
        if not self._joined:
            return words
        lo, hi = self._bounds
        return [w for w in words if lo <= len(w) <= hi]

    def _count_text(self, text: str) -> Counter[str]:
        """Counts of the words of ``text`` (no Han runs in it), by C or by the word regex."""
        if self._native is not None:
            counts: Counter[str] = Counter()
            self._native.count(text, counts)
            return counts
        if text.isascii():
            return self._ascii_bag(text)
        return self._counted(self._word_re.findall(text))

    def _counted(self, words: list[str]) -> Counter[str]:
        """``Counter(self._bounded(words))``, with the bounds checked once per distinct word."""
        counts = Counter(words)  # counted in C
        if self._joined:
            lo, hi = self._bounds
            for word in [w for w in counts if not lo <= len(w) <= hi]:
                del counts[word]
        return counts

    def _prepare(self, text: str) -> str:
        if self.options.lowercase:
            text = text.lower()
        if not text.isascii():
            for separator in _NON_ASCII_SEPARATORS:
                if separator in text:
                    text = text.replace(separator, " ")
        return text

    def _bag_of_words(self, text: str, expected: int = 0) -> tuple[Counter[str], int]:
        """Counts of :meth:`words` without putting Chinese and other words back in order, and
        how many words that is (``expected``: how many tokens the counts will hold). An ASCII
        text on the C path is count_words' own first case."""
        if text.isascii():  # nearly all mail: no Han run, no separator to replace
            if self._native is not None:
                counts = _new_counter()
                if expected:
                    _native_path._tokens.reserve(counts, expected)
                return counts, self._native.count(text, counts, None, self.options.lowercase)
            counts = self._ascii_bag(text.lower() if self.options.lowercase else text)
            return counts, counts.total()
        han = self._has_han(text)  # looked for once: the prepared text has the same Han
        if han and (self.options.cjk_runs or self.options.cjk_bigrams):
            # only text with Han runs has run or pair tokens; the rest keeps the fast path
            counts = Counter(self.words(text))
            return counts, counts.total()
        if not han and self._native is not None:  # prepared and counted in one call
            counts = _new_counter()
            n_words = self._native.count_prepared(
                text, counts, _NON_ASCII_SEPARATORS, self.options.lowercase
            )
            if n_words is not None:
                return counts, n_words
        text = self._prepare(text)
        if not han:
            if self._native is not None:  # a character str.lower() makes more than one of
                counts = Counter()
                return counts, self._native.count(text, counts)
            counts = self._count_text(text)
            return counts, counts.total()
        chunks = _HAN_RUN_RE.split(text)
        counts = self._count_text(" ".join(chunks[0::2]))
        chinese = self._segment(" ".join(chunks[1::2]))
        counts.update(chinese)  # a list: counted in C, where a Counter would loop in Python
        counts.pop(" ", None)
        lo, hi = self.options.min_cjk_token_len, self.options.max_token_len
        if lo > 1 or max(map(len, chinese), default=0) > hi:
            for word in {w for w in chinese if not lo <= len(w) <= hi}:
                counts.pop(word, None)
        return counts, counts.total()

    def count(
        self,
        text: str,
        max_tokens: int | None = None,
        on_cut: Callable[[], None] | None = None,
        urls: bool = True,
    ) -> Counter[str]:
        """Token -> occurrences in ``text`` (words, word pairs, money and URL tokens).

        At most ``max_tokens`` words are counted; ``on_cut`` is called if that cut the text.
        ``urls=False`` leaves URL tokens to the caller (a mail takes them from its HTML).
        """
        return self.count_words(text, max_tokens, on_cut, urls)[0]

    def count_words(
        self,
        text: str,
        max_tokens: int | None = None,
        on_cut: Callable[[], None] | None = None,
        urls: bool = True,
        expected: int = 0,
    ) -> tuple[Counter[str], int]:
        """:meth:`count`, and the number of words read (stop words included, pairs not).

        ``expected``: about how many tokens the counts will hold when the caller has counted
        its own into them too (a mail's header tokens), so that the dict is made that large.
        """
        options = self.options
        counts = None
        if self._in_any_order:  # the fast path: order does not matter
            if self._native is not None and text.isascii():
                # nearly all mail: one call into C, lower-cased there, the total comes with it
                counts = _new_counter()
                if expected:
                    _native_path._tokens.reserve(counts, expected)
                n_words = self._native.count(text, counts, None, options.lowercase)
            else:
                counts, n_words = self._bag_of_words(text, expected)
            if max_tokens is not None and n_words > max_tokens:
                counts = None  # cut in order, below
            elif self._stop:  # the stop list is short, the counts may be long
                for word in [w for w in self._stop if w in counts]:
                    del counts[word]
        if counts is None:
            counts, n_words = self._count_in_order(text, max_tokens, on_cut)
        if "$" in text and options.numbers != "drop":
            if self._count_money is not None:  # the amounts as they are, counted in C
                self._count_money(text, counts)
            else:
                money = _MONEY_RE.findall(text)
                if options.numbers == "shape":
                    money = [_DIGIT_RE.sub("0", m) for m in money]
                for amount in money:  # a few: Counter.update's checks cost more than the loop
                    counts[amount] = counts.get(amount, 0) + 1
        if urls and options.url_tokens:
            self.count_url_tokens(text, counts)
        return counts, n_words

    def count_url_tokens(self, text: str, counts: Counter[str]) -> None:
        """``counts.update(url_tokens(url_hosts(text)))``, in one call into C when it can."""
        if self._native is not None:
            _native_path._tokens.count_url_tokens(text, counts, SECOND_LEVEL_LABELS)
        else:
            counts.update(url_tokens(url_hosts(text)))

    def _count_in_order(
        self, text: str, max_tokens: int | None, on_cut: Callable[[], None] | None
    ) -> tuple[Counter[str], int]:
        words = self.words(text)
        if max_tokens is not None and len(words) > max_tokens:
            words = words[:max_tokens]
            if on_cut is not None:
                on_cut()
        n_words = len(words)
        if self.options.numbers != "keep":
            words = self._numbers(words)
        if self._stop:
            words = list(filterfalse(self._stop.__contains__, words))  # C-level loop
        counts = Counter(words)
        if self.options.osb_window:  # its pairs at distance 1 are the bigrams
            counts.update(osb_pairs(words, self.options.osb_window))
        elif self.options.bigrams:
            counts.update(map(" ".join, zip(words, words[1:], strict=False)))
        return counts, n_words

    def prefixed(self, prefix: str, text: str) -> list[str]:
        """The words of ``text`` (stop words kept) as ``prefix:word`` tokens.

        A mail has a score of short header values, nearly all ASCII: those take one regex call
        and one list comprehension here, the rest :meth:`words`' general path.
        """
        if self.options.lowercase:
            text = text.lower()
        if not text.isascii() or self._native is not None:
            return [prefix + w for w in self.words(text)]
        words = self._ascii_word_re.findall(text)
        if self._joined:
            lo, hi = self._bounds
            return [prefix + w for w in words if lo <= len(w) <= hi]
        return [prefix + w for w in words]

    def count_prefixed(self, prefix: str, text: str, counts: Counter[str]) -> None:
        """``counts.update(self.prefixed(prefix, text))``, without the list when it can."""
        if self._native is None:
            counts.update(self.prefixed(prefix, text))
            return
        if text.isascii():  # nearly every header value: lower-cased in C too
            self._native.count(text, counts, prefix, self.options.lowercase)
            return
        text = self._prepare(text)
        if self._has_han(text):  # Chinese: segmented, as words() does
            counts.update([prefix + w for w in self.words(text)])
            return
        self._native.count(text, counts, prefix)

    def count_address_field(self, prefix: str, value: str, counts: Counter[str]) -> bool:
        """Count one value of an address field (From, To, ...) in C, if it can be done there.

        The addresses give ``prefix + address``, ``+ domain`` and ``+ host`` tokens, the rest
        of the value its words (all of it with ``address_words``), as the Featurizer's Python
        path does. Returns False, having counted nothing, for a value that path must read
        (the pure-Python tokenizer, or a value or prefix that is not ASCII).
        """
        if self._native is None or not (value.isascii() and prefix.isascii()):
            return False
        options = self.options
        self._native.count_address_field(
            prefix, value, counts, SECOND_LEVEL_LABELS, options.address_words, options.lowercase
        )
        return True

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

        try:
            import jieba
        except ImportError:
            raise ValueError(
                "cjk_segmenter = 'jieba' needs the jieba package: pip install 'streamnb[jieba]'"
            ) from None

        jieba.setLogLevel(logging.WARNING)
        return lambda text: jieba.lcut(text, HMM=hmm)
    import rjieba

    return lambda text: rjieba.cut(text, hmm)
