"""The feature cache returns what featurizing would, and misses when anything relevant changes."""

from __future__ import annotations

import pytest

from streamnb.evaluation import featurecache
from streamnb.evaluation.corpora import read_corpus
from streamnb.evaluation.options import Tables


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
    assert len(list(cache.glob("*.pickle"))) == 3
    corpus.path.write_text("ham\tsomething else entirely\n")
    changed = read_corpus(corpus.path)
    featurecache.cached_featurize(base.build_pipeline(), changed, base.features, cache)
    assert len(list(cache.glob("*.pickle"))) == 4
