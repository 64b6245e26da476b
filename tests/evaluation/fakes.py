"""Small stand-ins for the featurizer and a model, so the evaluator's logic is tested on its own."""

from __future__ import annotations

import math
from collections import Counter

from streamnb.evaluation.replay import Featurized
from streamnb.pipeline import Pipeline


class WhitespaceFeaturizer:
    """Token counts of whitespace-separated words."""

    def from_text(self, text: str) -> Featurized:
        return Featurized(dict(Counter(text.split())))

    def from_tokens(self, tokens: list[str]) -> Featurized:
        return Featurized(dict(Counter(tokens)))

    def from_raw(self, raw: bytes) -> Featurized:
        return self.from_text(raw.decode("utf-8", "replace"))


class CountingNB:
    """A plain Laplace-smoothed multinomial NB, written for tests (not the shipped model)."""

    numeric_input = False

    def __init__(self):
        self.docs: Counter = Counter()
        self.words: dict[str, Counter] = {}
        self.vocabulary: set = set()
        self.calls: list[tuple[str, object]] = []

    def predict_log_proba_one(self, x):
        self.calls.append(("predict", dict(x)))
        if not self.docs:
            return {}
        total = sum(self.docs.values())
        v = len(self.vocabulary | set(x)) or 1
        joint = {}
        for c, n in self.docs.items():
            counts = self.words[c]
            size = sum(counts.values())
            joint[c] = math.log(n / total) + sum(
                k * math.log((counts[w] + 1) / (size + v)) for w, k in x.items()
            )
        top = max(joint.values())
        norm = top + math.log(sum(math.exp(j - top) for j in joint.values()))
        return {c: j - norm for c, j in joint.items()}

    def learn_one(self, x, y):
        self.calls.append(("learn", dict(x)))
        self.docs[y] += 1
        self.words.setdefault(y, Counter()).update(x)
        self.vocabulary.update(x)


def fake_pipeline() -> Pipeline:
    return Pipeline(WhitespaceFeaturizer(), CountingNB())
