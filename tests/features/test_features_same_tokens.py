"""The featurizer gives the tokens it gave before its fast paths, on a sample of every corpus.

``data/token_digests.json`` was written by the featurizer as it was before the per-mail path
was tuned (see :mod:`tests.features.token_digests`); every sampled message must give the same
token multiset, limits, defects and meta-features under every option set there.
"""

from __future__ import annotations

import json

import pytest

from tests.features.token_digests import CORPORA, DIGESTS, OPTION_SETS, digests

pytestmark = pytest.mark.slow


def test_same_features_as_recorded_on_every_corpus_and_option_set(data_dir):
    recorded = json.loads(DIGESTS.read_text())
    assert set(recorded) == {f"{c}/{o}" for c in CORPORA for o in OPTION_SETS}
    now = digests(data_dir)
    assert all(len(recorded[key]) == len(now[key]) > 200 for key in recorded)
    differing = {
        key: [m for (m, d), old in zip(now[key], recorded[key], strict=True) if d != old]
        for key in recorded
    }
    differing = {key: names[:5] for key, names in differing.items() if names}
    assert not differing, f"features changed (option set: first messages): {differing}"
