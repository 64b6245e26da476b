"""Digests of the features of a sample of every raw corpus, under several option sets.

A faster path through the featurizer must give the same tokens, limits and defects as the one
it replaces. ``token_digests.json`` holds, for every 20th message of each raw corpus and each
option set below, a digest of what the featurizer gave; ``test_features_same_tokens.py``
compares today's featurizer with it. Regenerate it only for a change that is meant to change
tokens, and say so in the commit:

    python -m tests.features.token_digests     # writes tests/features/data/token_digests.json
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

from streamnb.features import Features, Featurizer, FeaturizerOptions

CORPORA = ("spamassassin", "chinese-spam", "20newsgroups")
SAMPLE_STEP = 20  # every 20th message, so the sample spans each corpus' groups
# max_seconds is wall clock, the one limit that depends on the machine's load: a long mail read
# on a busy machine must not be cut short in one run and read whole in the other.
_NO_CLOCK = {"max_seconds": 120.0}
OPTION_SETS: dict[str, dict] = {name: {**_NO_CLOCK, **options} for name, options in {
    "defaults": {},
    "all_headers": {"header_fields": ["*"]},
    "numbers_shape": {"numbers": "shape"},
    "address_words": {"address_words": True},
    "osb5": {"osb_window": 5},
    "meta_bigrams_stop": {"meta_features": True, "bigrams": True, "stop_lists": ["english"]},
}.items()}
DIGESTS = Path(__file__).parent / "data" / "token_digests.json"


def sample(data_dir: Path, corpus: str) -> Iterator[tuple[str, bytes]]:
    """(member name, raw bytes) of every ``SAMPLE_STEP``-th message of ``corpus``."""
    with tarfile.open(data_dir / corpus / "messages.tar.gz") as archive:
        files = (m for m in archive if m.isfile())
        for i, member in enumerate(files):
            if i % SAMPLE_STEP == 0:
                yield member.name, archive.extractfile(member).read()


def digest(features: Features) -> str:
    """A digest of the token multiset, the limits hit, the defects and the meta-features."""
    numeric = None if features.numeric is None else [f"{x:.10g}" for x in features.numeric]
    key = repr((sorted(features.tokens.items()), features.truncated, features.defects, numeric))
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def digests(data_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """``"<corpus>/<option set>"`` -> (member name, digest) of each sampled message."""
    found: dict[str, list[tuple[str, str]]] = {}
    for corpus in CORPORA:
        messages = list(sample(data_dir, corpus))
        for name, options in OPTION_SETS.items():
            # Recorded while cjk_runs was off by default: every set keeps it off, so the
            # digests still check the paths they were written for.
            featurizer = Featurizer(FeaturizerOptions(**{"cjk_runs": False, **options}))
            found[f"{corpus}/{name}"] = [
                (member, digest(featurizer.from_raw(raw))) for member, raw in messages
            ]
    return found


if __name__ == "__main__":
    from tests.conftest import DATA

    recorded = {key: [d for _, d in pairs] for key, pairs in digests(DATA).items()}
    DIGESTS.write_text(json.dumps(recorded, indent=0, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
