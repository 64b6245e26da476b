"""Mail and text featurization: raw RFC 822 bytes, plain text or tokens -> token counts.

>>> from streamnb.features import Featurizer, FeaturizerOptions
>>> f = Featurizer(FeaturizerOptions())
>>> dict(f.from_raw(b"Subject: Cheap pills\\n\\nBuy cheap pills").tokens)
{'buy': 1, 'cheap': 1, 'pills': 1, 'subject:cheap': 1, 'subject:pills': 1, \
'order:^>subject>$': 1, 'shape:subject:a a': 1, 'mime:text/plain': 1}

* :mod:`~streamnb.features.mail` reads MIME (transfer encodings, charsets, HTML);
* :mod:`~streamnb.features.tokenize` splits text (Unicode words, Chinese, URLs, bigrams);
* :mod:`~streamnb.features.meta` computes numeric meta-features for Gaussian models;
* :mod:`~streamnb.features.native` says whether the C extension (``_tokens``: words, URL
  hosts, header values) runs, or the pure-Python code it is tested against;
* :func:`stable_bucket` maps a token to a hash bucket, the same in every process.
"""

from streamnb.features.charsets import decode_text
from streamnb.features.errors import FeaturizationError
from streamnb.features.featurizer import Features, Featurizer
from streamnb.features.mail import Attachment, ParsedMail, TextPart, read_mail
from streamnb.features.meta import META_FEATURE_NAMES
from streamnb.features.options import FeaturizerOptions
from streamnb.features.tokenize import Tokenizer
from streamnb.hashing import stable_bucket, stable_hash

__all__ = [
    "META_FEATURE_NAMES",
    "Attachment",
    "FeaturizationError",
    "Featurizer",
    "FeaturizerOptions",
    "Features",
    "ParsedMail",
    "TextPart",
    "Tokenizer",
    "decode_text",
    "read_mail",
    "stable_bucket",
    "stable_hash",
]
