"""The filters compared on one stream: streamnb, river, scikit-learn and bogofilter.

Every filter sees the same messages in the same order under TREC's immediate-feedback protocol:
score the message, then learn it with its gold label. Each returns, per message, the predicted
label and a spamminess score (higher = more spam), and the evaluation's scoring turns those into
the same figures for all of them.

The Python peers get their tokens from streamnb's featurizer (they have no mail parser of their
own), so their rows compare the models on identical input; bogofilter parses the raw mail itself.
Scores are log-odds from each library's joint log-likelihoods where it has them, so saturated
probabilities do not tie.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from streamnb.codec import Message

SPAM = "spam"

# scikit-learn's partial_fit needs a fixed input width: tokens are hashed into this many buckets.
# Laplace smoothing spreads mass over every bucket, so a width far above the real vocabulary
# (2**20, HashingVectorizer's default) drowns the few words a young model has seen; 2**16 is
# near the vocabulary of these streams and keeps partial_fit (O(width) per call) bearable.
SKLEARN_BUCKETS = 2**16


@dataclass
class PeerRun:
    """What a filter did on the stream (possibly cut short by the time budget)."""

    labels: list[str] = field(default_factory=list)
    predicted: list[str | None] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    seconds: float = 0.0  # everything: featurizing/parsing, scoring, learning
    seconds_model: float | None = None  # scoring + learning only, where it can be separated
    finished: bool = True
    notes: dict = field(default_factory=dict)


def _log_odds(joint: dict, positive: str = SPAM) -> float:
    """The ranking score, by the same rule as streamnb's own (``class_scores``)."""
    from streamnb.evaluation.replay import class_scores

    return float(class_scores([joint], positive)[0])


def _argmax(joint: dict) -> str | None:
    return max(sorted(joint), key=joint.__getitem__) if joint else None


def _touch_featurizer(featurizer) -> None:
    # Imports and lazy set-up (HTML parser, Chinese dictionary) happen before memory is measured.
    featurizer.from_raw("Subject: 你好\n\n<html><b>hi</b> 发票 http://example.com</html>".encode())
    featurizer.from_text("warm up")


class StreamnbFilter:
    """streamnb's pipeline, built from ``config.toml`` (or the built-in defaults)."""

    name = "streamnb"

    def __init__(self, tables=None):
        from streamnb.evaluation.options import Tables

        self.tables = tables or Tables.load(None)

    def warm_up(self) -> None:
        from streamnb.evaluation import replay  # noqa: F401

        self.pipeline = self.tables.build_pipeline()
        _touch_featurizer(self.pipeline.featurizer)

    def run(self, messages: list[Message], budget: float) -> PeerRun:
        from streamnb.evaluation.replay import class_scores, replay

        result = replay(self.pipeline, messages)
        return PeerRun(
            labels=result.labels,
            predicted=result.predicted,
            scores=class_scores(result.log_proba, SPAM).tolist(),
            seconds=result.seconds,
            seconds_model=result.seconds_model,
            notes={"options": self.tables.describe(), "skipped": dict(result.skipped)},
        )


class _TokenPeer:
    """A Python model fed streamnb's token counts."""

    name = "?"

    def warm_up(self) -> None:
        from streamnb.pipeline import build_pipeline

        self.featurizer = build_pipeline({"kind": "multinomial"}, {}).featurizer
        _touch_featurizer(self.featurizer)

    def run(self, messages: list[Message], budget: float) -> PeerRun:
        featurizer = self.featurizer
        out = PeerRun()
        model_seconds = 0.0
        started = time.perf_counter()
        for message in messages:
            if message.raw is not None:
                x = featurizer.from_raw(message.raw).tokens
            else:
                x = featurizer.from_text(message.text).tokens
            before = time.perf_counter()
            predicted, score = self.score(x)
            self.learn(x, message.label)
            model_seconds += time.perf_counter() - before
            out.labels.append(message.label)
            out.predicted.append(predicted)
            out.scores.append(score)
            if time.perf_counter() - started > budget:
                out.finished = len(out.labels) == len(messages)
                break
        out.seconds = time.perf_counter() - started
        out.seconds_model = model_seconds
        return out


class RiverFilter(_TokenPeer):
    def __init__(self, kind: str):
        from river import naive_bayes

        self.name = f"river-{kind}"
        cls = {"multinomial": naive_bayes.MultinomialNB, "bernoulli": naive_bayes.BernoulliNB}
        self.model = cls[kind](alpha=1.0)

    def score(self, x):
        joint = self.model.joint_log_likelihood(x) if self.model.class_counts else {}
        return _argmax(joint), _log_odds(joint)

    def learn(self, x, y):
        self.model.learn_one(x, y)


class SklearnFilter(_TokenPeer):
    """``partial_fit`` one message at a time on hashed token counts (fixed width)."""

    def __init__(self, kind: str, classes: list[str]):
        from sklearn import naive_bayes
        from sklearn.feature_extraction import FeatureHasher

        self.name = f"sklearn-{kind}"
        cls = {"multinomial": naive_bayes.MultinomialNB, "bernoulli": naive_bayes.BernoulliNB}
        self.model = cls[kind](alpha=1.0)
        self.hasher = FeatureHasher(
            n_features=SKLEARN_BUCKETS, input_type="dict", alternate_sign=False
        )
        self.classes = sorted(classes)
        self.fitted = False

    def score(self, x):
        if not self.fitted:
            return None, 0.0
        row = self.hasher.transform([x])
        joint_row = self.model.predict_joint_log_proba(row)[0]
        # Classes not seen yet keep zero counts but a -inf prior; leave them out.
        joint = {
            c: float(v)
            for c, v, n in zip(self.model.classes_, joint_row, self.model.class_count_, strict=True)
            if n > 0
        }
        return _argmax(joint), _log_odds(joint)

    def learn(self, x, y):
        self.model.partial_fit(self.hasher.transform([x]), [y], classes=self.classes)
        self.fitted = True


class BogofilterFilter:
    """bogofilter 1.2.x, one process per step: ``-TT`` to score, then ``-s`` / ``-n`` to learn.

    Its own defaults (``-C``: no config file), a fresh word list in a temporary folder, and its
    own decision (spam when the score reaches its ``spam_cutoff``, 0.99; "unsure" counts as not
    spam, as the message is delivered).
    """

    name = "bogofilter"
    SPAM_CUTOFF = 0.99

    def warm_up(self) -> None:
        pass

    def run(self, messages: list[Message], budget: float) -> PeerRun:
        binary = shutil.which("bogofilter")
        if binary is None:
            raise RuntimeError("bogofilter is not installed (apt-get install bogofilter)")
        out = PeerRun(seconds_model=None)
        folder = tempfile.mkdtemp(prefix="bogofilter-")
        try:
            base = [binary, "-C", "-d", folder]
            wordlist = os.path.join(folder, "wordlist.db")
            started = time.perf_counter()
            for message in messages:
                # A text message becomes the body of a mail with no headers.
                data = message.raw if message.raw is not None else b"\n" + message.text.encode()
                if os.path.exists(wordlist):
                    scored = subprocess.run(
                        [*base, "-TT"], input=data, capture_output=True, check=False
                    )
                    # Exit status: 0 spam, 1 ham, 2 unsure, 3 error.
                    if scored.returncode == 3:
                        raise RuntimeError(f"bogofilter failed: {scored.stderr.decode()[:200]}")
                    score = float(scored.stdout.split()[-1])
                else:  # nothing registered yet: bogofilter refuses to score; call it unsure
                    score = 0.5
                learn = "-s" if message.label == SPAM else "-n"
                subprocess.run([*base, learn], input=data, capture_output=True, check=True)
                out.labels.append(message.label)
                out.predicted.append(SPAM if score >= self.SPAM_CUTOFF else "ham")
                out.scores.append(score)
                if time.perf_counter() - started > budget:
                    out.finished = len(out.labels) == len(messages)
                    break
            out.seconds = time.perf_counter() - started
            out.notes["wordlist_bytes"] = sum(
                os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
            )
            version = subprocess.run([binary, "-V"], capture_output=True, text=True)
            out.notes["version"] = version.stdout.splitlines()[0] if version.stdout else "?"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return out


# Filters whose cost per message grows with the vocabulary: only these are cut off by the time
# budget; every other filter runs the whole stream.
BUDGETED = ("river-bernoulli",)

PEERS = (
    "streamnb",
    "river-multinomial",
    "river-bernoulli",
    "sklearn-multinomial",
    "sklearn-bernoulli",
    "bogofilter",
)


def make_filter(name: str, classes: list[str], tables=None):
    """The filter called ``name``; ``tables`` are streamnb's options (default: ./config.toml)."""
    if name == "streamnb":
        return StreamnbFilter(tables)
    if name.startswith("river-"):
        return RiverFilter(name.split("-", 1)[1])
    if name.startswith("sklearn-"):
        return SklearnFilter(name.split("-", 1)[1], classes)
    if name == "bogofilter":
        return BogofilterFilter()
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
