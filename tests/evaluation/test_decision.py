"""``streamnb evaluate`` and ``crossval`` report the label the daemon would emit: with
``class_offsets`` the model's decision, the probabilities (and so the ranking figures) those
of the model without it."""

from __future__ import annotations

import random

import pytest

from streamnb.codec import Message
from streamnb.evaluation.corpora import Corpus
from streamnb.evaluation.crossval import fold_accuracies, kfold_indices
from streamnb.evaluation.evaluate import evaluate_corpus
from streamnb.evaluation.options import Tables
from streamnb.models import MultinomialNB

SPAM = ["win", "cash", "prize", "now", "free", "call", "txt", "claim"]
HAM = ["lunch", "at", "noon", "mum", "home", "later", "ok", "call", "now"]


def sms_like(n=300, seed=3):
    rng = random.Random(seed)
    messages = []
    for i in range(n):
        label = "spam" if rng.random() < 0.3 else "ham"
        words = SPAM if label == "spam" else HAM
        text = " ".join(rng.choice(words + HAM[:3]) for _ in range(rng.randint(1, 6)))
        messages.append(Message(id=f"m{i}", label=label, text=text))
    return Corpus(path="sms-like", format="tsv-text", messages=messages)


def decided(log_proba, offsets):
    if not log_proba:
        return None
    return min(log_proba, key=lambda c: (-(log_proba[c] + offsets.get(c, 0.0)), c))


def test_evaluate_labels_with_the_offsets_and_ranks_with_the_posterior():
    base = Tables(model={"kind": "multinomial"}, features={})
    variants = [("base", base),
                ("strict", base.with_overrides(["model.class_offsets.spam=-2.5"]))]
    plain, strict = evaluate_corpus(sms_like(), variants)
    assert strict.model.class_offsets == {"spam": -2.5}
    assert strict.result.log_proba == plain.result.log_proba
    assert strict.result.predicted == [decided(lp, {"spam": -2.5})
                                       for lp in strict.result.log_proba]
    assert plain.result.predicted == [decided(lp, {}) for lp in plain.result.log_proba]
    moved = sum(a != b for a, b in zip(plain.result.predicted, strict.result.predicted,
                                       strict=True))
    assert moved > 0  # the offset moved some labels from spam to ham, and only that way
    assert all(b == "ham" for a, b in zip(plain.result.predicted, strict.result.predicted,
                                          strict=True) if a != b)
    for key in ("one_minus_auc_pct", "spam_recall_at_fpr_0.1pct", "log_loss", "brier"):
        assert strict.figures[key] == plain.figures[key]
    assert strict.figures["hm_pct"] <= plain.figures["hm_pct"]
    assert strict.figures["sm_pct"] > plain.figures["sm_pct"]


def test_evaluate_without_offsets_labels_as_before():
    base = Tables(model={"kind": "multinomial"}, features={})
    zero = base.with_overrides(["model.class_offsets.spam=0"])
    plain, same = evaluate_corpus(sms_like(), [("base", base), ("zero", zero)])
    assert same.result.predicted == plain.result.predicted
    assert same.figures["hm_pct"] == plain.figures["hm_pct"]
    assert same.model.to_state() == plain.model.to_state()


def test_a_bad_offset_in_a_variant_names_the_option():
    base = Tables(model={"kind": "multinomial"}, features={})
    with pytest.raises(ValueError, match="class_offsets"):
        evaluate_corpus(sms_like(20), [("bad", base.with_overrides(
            ["model.class_offsets.spam=high"]))])


def test_crossval_scores_the_decided_label():
    inputs = [{"spam": 1}, {"ham": 1}] * 6
    labels = ["s", "h"] * 6
    folds = kfold_indices(labels, 3, seed=0)
    assert fold_accuracies(MultinomialNB(), inputs, labels, folds) == [1.0, 1.0, 1.0]
    # an offset no evidence here can overcome: every message is labelled h
    biased = MultinomialNB(class_offsets={"h": 50.0})
    assert fold_accuracies(biased, inputs, labels, folds) == [0.5, 0.5, 0.5]
    assert fold_accuracies(biased, inputs, labels, folds, vocabulary=2) == [0.5, 0.5, 0.5]


def test_streamnb_explain_shows_the_offset_that_moved_the_label(tmp_path, capsys):
    from streamnb.cli import main as cli_main
    from streamnb.explain import write_model_file

    model = MultinomialNB(class_offsets={"spam": -1.0})
    model.learn_one({"cheap": 2, "pills": 1}, "spam")
    model.learn_one({"meeting": 1, "notes": 1}, "ham")
    saved = tmp_path / "model.json"
    write_model_file(saved, model, {})
    message = tmp_path / "sms.txt"
    message.write_text("cheap")  # P(spam) = 0.72, below 1 / (1 + e^-1) = 0.731
    assert cli_main(["explain", "--model", str(saved), "--text", str(message)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prediction: ham (P = 0.28), against spam (P = 0.72)")
    assert "+1.0000  (the offset of class_offsets: log-odds + offset = +0.0555 >= 0, so ham)" in out
