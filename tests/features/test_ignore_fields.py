"""features.ignore_fields: filters' verdict headers are read as if absent."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamnb.config import ConfigError, load_settings
from streamnb.evaluation.corpora import read_corpus
from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.features.featurizer import ignored_fields_pattern, without_fields

VERDICTS = [b"X-Streamnb: spam; score=12.000 log-odds=6.000\r\n",
            b"X-Spam: Yes\r\n",
            b"x-spam : No\r\nX-STREAMNB: ham;\r\n\tscore=-3.0\r\n"]


@pytest.fixture(scope="module")
def mails(data_dir):
    return [m.raw for m in read_corpus(data_dir / "spamassassin", shuffle=2, limit=200).messages]


@pytest.mark.parametrize("verdict", VERDICTS)
def test_real_mail_with_a_verdict_header_gives_the_tokens_it_gives_without(mails, verdict):
    featurizer = Featurizer(FeaturizerOptions())
    for raw in mails:
        assert featurizer.from_raw(verdict + raw).tokens == featurizer.from_raw(raw).tokens
        # ... wherever it stands among the fields (here after the first whole field), and in
        # the layout tokens too
        cut = re.search(rb"\n(?=[^ \t])", raw).end()
        middle = raw[:cut] + verdict + raw[cut:]
        assert featurizer.from_raw(middle).tokens == featurizer.from_raw(raw).tokens


def test_without_the_option_the_header_is_read(mails):
    reading = Featurizer(FeaturizerOptions(ignore_fields=(), header_fields=("*",)))
    raw = mails[0]
    tokens = reading.from_raw(VERDICTS[1] + raw).tokens
    assert tokens != reading.from_raw(raw).tokens
    assert any(token.startswith("x-spam:") for token in tokens)


@given(st.binary(max_size=300), st.sampled_from(VERDICTS))
def test_only_the_named_top_level_fields_go(body, verdict):
    pattern = ignored_fields_pattern(["x-streamnb", "x-spam"])
    raw = b"Subject: hi\r\n" + verdict + b"X-Spam-Level: **\r\n\r\n" + body
    stripped = without_fields(raw, pattern)
    assert stripped == b"Subject: hi\r\nX-Spam-Level: **\r\n\r\n" + body
    assert without_fields(stripped, pattern) == stripped


def test_the_verdict_header_must_be_ignored():
    with pytest.raises(ConfigError, match="http.verdict_header 'X-Filter' must be one of "
                                          "features.ignore_fields"):
        load_settings(text="[http]\nverdict_header = 'X-Filter'\n", environ={})
    settings = load_settings(text="[http]\nverdict_header = 'X-Filter'\n[features]\n"
                                  "ignore_fields = ['x-filter', 'x-spam']\n", environ={})
    assert settings.http.verdict_header == "X-Filter"
    assert load_settings(text="[http]\nverdict_header = ''\n", environ={}).http.verdict_header == ""


@given(st.lists(st.sampled_from([b"X-Spam", b"x-spam ", b"X-SPAM\t", b"x-sp", b" x-spam",
                                 b"Subject", b"X-Streamnb", b"X-Spam-Level", b"", b":"]),
                max_size=8),
       st.lists(st.sampled_from([b": v", b":", b"v", b"", b" \t:"]), min_size=8, max_size=8))
def test_the_c_look_for_a_field_is_the_reference(names, rests):
    from streamnb.features import native
    from streamnb.features.featurizer import has_field

    if not native.enabled():
        pytest.skip("the C extension is not built")
    block = b"\n".join(name + rest for name, rest in zip(names, rests, strict=False))
    wanted = (b"x-spam", b"x-streamnb")
    assert native._tokens.has_field(block, wanted) == has_field(block, wanted)
