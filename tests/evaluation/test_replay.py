"""The evaluator's protocol: each message is scored before the model learns it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamnb.codec import Message
from streamnb.evaluation.replay import choose_positive, class_scores, replay
from streamnb.pipeline import Pipeline

from .fakes import CountingNB, WhitespaceFeaturizer, fake_pipeline


def _messages(rows):
    return [Message(id=f"m{i}", label=label, text=text) for i, (label, text) in enumerate(rows)]


# Learning a message before scoring it would get all three right (each is then in the model);
# scored first, the first has nothing to go on and the second has only seen spam.
STREAM = [("spam", "cheap pills"), ("ham", "lunch today"), ("spam", "cheap pills")]


def test_each_message_is_scored_before_it_is_learned():
    result = replay(fake_pipeline(), _messages(STREAM))
    assert result.predicted == [None, "spam", "spam"]
    figures = result.report()
    assert figures["accuracy"] == pytest.approx(1 / 3)
    assert figures["recall"] == {"ham": 0.0, "spam": 0.5}


def test_model_sees_predict_then_learn_for_the_same_input():
    pipeline = fake_pipeline()
    replay(pipeline, _messages(STREAM))
    calls = pipeline.model.calls
    assert [kind for kind, _ in calls] == ["predict", "learn"] * 3
    assert all(calls[i][1] == calls[i + 1][1] for i in range(0, 6, 2))


def test_learn_first_would_change_the_answer():
    # The same stream with learning first: every message is already known when scored.
    model, featurizer = CountingNB(), WhitespaceFeaturizer()
    predicted = []
    for label, text in STREAM:
        x = featurizer.from_text(text).tokens
        model.learn_one(x, label)
        lp = model.predict_log_proba_one(x)
        predicted.append(max(lp, key=lp.get))
    assert predicted == ["spam", "ham", "spam"]
    assert predicted != replay(fake_pipeline(), _messages(STREAM)).predicted


def test_rejected_and_unlabelled_messages_are_skipped_and_counted():
    messages = _messages(STREAM) + [
        Message(id="no-body", label="ham"),
        Message(id="no-label", text="hello"),
        Message(id="numeric", label="ham", features=[1.0, 2.0]),
    ]
    result = replay(fake_pipeline(), messages)
    assert result.n == 3
    assert dict(result.skipped) == {"missing_body": 1, "unlabelled": 1, "wrong_body": 1}


def test_two_class_report_has_the_trec_figures():
    rows = [("ham", "hello friend lunch"), ("spam", "cheap pills now")] * 30
    figures = replay(fake_pipeline(), _messages(rows)).report()
    for key in (
        "n", "accuracy", "one_minus_auc_pct", "lam_pct", "hm_pct", "sm_pct",
        "spam_recall_at_fpr_0.1pct", "recall", "log_loss", "msgs_per_s", "brier", "reliability",
    ):
        assert key in figures, key
    assert figures["positive"] == "spam"
    assert figures["n"] == 60
    assert figures["one_minus_auc_pct"] < 5
    assert sum(row["n"] for row in figures["reliability"]) == 60


def test_multiclass_report_averages_one_against_rest():
    rows = [("a", "x y"), ("b", "p q"), ("c", "u v")] * 10
    figures = replay(fake_pipeline(), _messages(rows)).report()
    assert "lam_pct" not in figures
    assert 0 <= figures["one_minus_auc_pct"] < 20
    assert set(figures["recall"]) == {"a", "b", "c"}


def test_log_odds_keep_order_where_probabilities_saturate():
    # P(spam) rounds to exactly 1.0 for both, yet the log-odds still rank them.
    lp = [{"spam": -1e-300, "ham": -800.0}, {"spam": -1e-300, "ham": -700.0}]
    assert math.exp(lp[0]["spam"]) == math.exp(lp[1]["spam"]) == 1.0
    scores = class_scores(lp, "spam")
    assert scores[0] > scores[1]
    np.testing.assert_allclose(scores, [800.0, 700.0])


def test_class_scores_before_two_classes_are_known():
    assert class_scores([{}, {"ham": 0.0}, {"spam": 0.0}], "spam").tolist() == [0.0, 0.0, 0.0]


def test_class_scores_of_a_label_missing_beside_known_classes():
    lp = [{"ham": math.log(0.5), "other": math.log(0.5)}]
    assert class_scores(lp, "spam").tolist() == [-math.inf]


def test_choose_positive():
    assert choose_positive(["ham", "spam", "ham"]) == "spam"
    assert choose_positive(["0", "1"]) == "1"
    assert choose_positive(["a", "b", "c"]) is None


def test_the_daemon_pipeline_class_is_what_replay_drives():
    # replay only needs Pipeline.prepare and the model's two calls.
    pipeline = Pipeline(WhitespaceFeaturizer(), CountingNB())
    assert replay(pipeline, _messages(STREAM)).n == 3


def test_prequential_order_with_the_daemon_pipeline():
    # The real featurizer and model: the first message has no prediction, the second is
    # scored from the first alone, so it is called spam although it is ham.
    from streamnb.pipeline import build_pipeline

    messages = _messages(STREAM)
    result = replay(build_pipeline({"kind": "multinomial"}, {}), messages)
    assert result.predicted == [None, "spam", "spam"]


def test_shared_featurization_gives_the_same_replay():
    from streamnb.evaluation.replay import featurize_all
    from streamnb.pipeline import build_pipeline

    rows = [("ham", "lunch at noon"), ("spam", "win cash now"), ("ham", "noon meeting")] * 5
    messages = _messages(rows)
    inline = replay(build_pipeline({"kind": "bernoulli"}, {}), messages)
    shared = featurize_all(build_pipeline({"kind": "multinomial"}, {}), messages)
    reused = replay(build_pipeline({"kind": "bernoulli"}, {}), messages, featurized=shared)
    assert reused.predicted == inline.predicted
    assert reused.log_proba == inline.log_proba
