"""The feature cache returns what featurizing would, and misses when anything relevant changes."""

from __future__ import annotations

import math

import orjson
import pytest

from streamnb.evaluation import featurecache
from streamnb.evaluation.corpora import read_corpus
from streamnb.evaluation.options import Tables
from streamnb.evaluation.replay import Featurizations
from streamnb.pipeline import Prepared


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "sms.txt"
    path.write_text("ham\tlunch at noon\nspam\tWIN cash now\nham\tsee you at noon\n")
    return read_corpus(path)


def test_second_run_reads_the_cache(corpus, tmp_path, monkeypatch):
    tables = Tables()
    pipeline = tables.build_pipeline()
    first = featurecache.cached_featurize(pipeline, corpus, tables.features, tmp_path / "cache")

    def must_not_featurize(*args, **kwargs):
        raise AssertionError("featurized again instead of reading the cache")

    monkeypatch.setattr(featurecache, "featurize_all", must_not_featurize)
    again = featurecache.cached_featurize(pipeline, corpus, tables.features, tmp_path / "cache")
    assert [p.x for p in again.prepared] == [p.x for p in first.prepared]


def test_other_features_order_or_corpus_miss(corpus, tmp_path):
    cache = tmp_path / "cache"
    base = Tables()
    featurecache.cached_featurize(base.build_pipeline(), corpus, base.features, cache)
    bigrams = base.with_overrides(["features.bigrams=true"])
    featurecache.cached_featurize(bigrams.build_pipeline(), corpus, bigrams.features, cache)
    featurecache.cached_featurize(
        base.build_pipeline(), corpus.shuffled(3), base.features, cache
    )
    assert len(list(cache.glob("*.json"))) == 3
    corpus.path.write_text("ham\tsomething else entirely\n")
    changed = read_corpus(corpus.path)
    featurecache.cached_featurize(base.build_pipeline(), changed, base.features, cache)
    assert len(list(cache.glob("*.json"))) == 4


def _entry(cache):
    (entry,) = cache.glob("*.json")
    return entry


def test_numeric_vectors_come_back_bit_for_bit(tmp_path):
    path = tmp_path / "vectors.csv"
    path.write_text("0.5,1e-300,3,1\n-0.25,4,1e300,0\n0.1,0.2,0.30000000000000004,1\n")
    corpus = read_corpus(path)
    tables = Tables(model={"kind": "gda"})
    cache = tmp_path / "cache"
    first = featurecache.cached_featurize(tables.build_pipeline(), corpus, {}, cache)
    again = featurecache.cached_featurize(tables.build_pipeline(), corpus, {}, cache)
    assert again == first
    assert again.prepared[2].x == [0.1, 0.2, 0.30000000000000004]


def test_entries_keep_rejections_truncations_and_non_finite_numbers():
    featurized = Featurizations(
        [Prepared([math.nan, math.inf, -math.inf, -0.0]), "too_large",
         Prepared({"win": 2, "#17": 1}, ("max_tokens",))],
        [0.5, 0.25, 0.125],
    )
    back = featurecache._decode(orjson.loads(orjson.dumps(featurecache._encode(featurized))))
    assert repr(back.prepared[0].x) == "[nan, inf, -inf, -0.0]"
    assert back.prepared[1:] == featurized.prepared[1:]
    assert back.seconds == featurized.seconds


def test_an_unreadable_entry_is_featurized_again_and_never_unpickled(corpus, tmp_path):
    import pickle

    tables = Tables()
    cache = tmp_path / "cache"
    first = featurecache.cached_featurize(tables.build_pipeline(), corpus, tables.features, cache)
    entry = _entry(cache)

    class Boom:
        def __reduce__(self):
            return (pytest.fail, ("a cache entry was unpickled",))

    entry.write_bytes(pickle.dumps(Boom()))  # what a hostile writer of the folder could leave
    again = featurecache.cached_featurize(tables.build_pipeline(), corpus, tables.features, cache)
    assert [p.x for p in again.prepared] == [p.x for p in first.prepared]
    assert featurecache.cached_featurize(  # and the entry was replaced by a good one
        tables.build_pipeline(), corpus, tables.features, cache).prepared == again.prepared
