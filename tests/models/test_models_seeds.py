"""The closed-form estimates of the lecture notes, worked by hand on tiny examples."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from streamnb.models import GDA, TEXTBOOK_OPTIONS, BernoulliNB
from streamnb.models import MultinomialNB as _MultinomialNB

# The formulas below are the textbook model's: pin its options whatever the defaults are.
MultinomialNB = partial(_MultinomialNB, **TEXTBOOK_OPTIONS)

# Seed 003's example, segmented: 「代开发票。增值税发票，正规发票。」 is spam; a ham message
# mentions 发票 once. |V| = 6: 代开 发票 增值税 正规 今天 开会.
SPAM = {"代开": 1, "发票": 3, "增值税": 1, "正规": 1}
HAM = {"今天": 1, "开会": 1, "发票": 1}
QUERY = {"发票": 2, "代开": 1}


def trained(model):
    model.learn_one(SPAM, "spam")
    model.learn_one(HAM, "ham")
    return model


def test_multinomial_priors_and_smoothed_theta():
    model = trained(MultinomialNB(alpha=1.0))
    # π_c = n_c / N
    assert model.predict_proba_one({}) == pytest.approx({"spam": 0.5, "ham": 0.5}, abs=1e-15)
    # θ_k|c = (N_kc + α) / (N_c + α|V|): spam has N_c = 6 tokens, ham N_c = 3, |V| = 6
    spam, ham = model.feature_log_prob("spam"), model.feature_log_prob("ham")
    assert math.exp(spam["发票"]) == pytest.approx((3 + 1) / (6 + 6), rel=1e-14)
    assert math.exp(spam["今天"]) == pytest.approx((0 + 1) / (6 + 6), rel=1e-14)
    assert math.exp(ham["发票"]) == pytest.approx((1 + 1) / (3 + 6), rel=1e-14)
    assert math.exp(ham["代开"]) == pytest.approx((0 + 1) / (3 + 6), rel=1e-14)


def test_multinomial_lidstone_and_unsmoothed_limit():
    lidstone = trained(MultinomialNB(alpha=0.5)).feature_log_prob("spam")
    assert math.exp(lidstone["发票"]) == pytest.approx((3 + 0.5) / (6 + 0.5 * 6), rel=1e-14)
    # α → 0 gives the MLE of seed 004: θ_kc = N_kc / N_c
    mle = trained(MultinomialNB(alpha=1e-12)).feature_log_prob("spam")
    assert math.exp(mle["发票"]) == pytest.approx(3 / 6, rel=1e-9)
    assert math.exp(mle["正规"]) == pytest.approx(1 / 6, rel=1e-9)


def test_three_treatments_of_repeated_words():
    # count: every occurrence in training and scoring.
    #   spam: (4/12)^2 (2/12); ham: (2/9)^2 (1/9) -> P(spam) = (1/54) / (1/54 + 4/729) = 27/35
    count = trained(MultinomialNB(repeated_words="count")).predict_proba_one(QUERY)
    assert count["spam"] == pytest.approx(27 / 35, rel=1e-13)
    # mixed: trained on occurrences, each word scored once.
    #   spam: (4/12)(2/12) = 1/18; ham: (2/9)(1/9) = 2/81 -> P(spam) = 81/117 = 9/13
    mixed = trained(MultinomialNB(repeated_words="mixed")).predict_proba_one(QUERY)
    assert mixed["spam"] == pytest.approx(9 / 13, rel=1e-13)
    # binary: once in both. Spam has 4 distinct words, ham 3; |V| = 6.
    #   spam: (2/10)(2/10) = 1/25; ham: (2/9)(1/9) = 2/81 -> P(spam) = 81/131
    binary = trained(MultinomialNB(repeated_words="binary")).predict_proba_one(QUERY)
    assert binary["spam"] == pytest.approx(81 / 131, rel=1e-13)


def test_bernoulli_phi_and_absent_words():
    model = trained(BernoulliNB(alpha=1.0))
    # φ_j|c = (D_jc + 1) / (D_c + 2) with D_c = 1 message per class
    assert math.exp(model.feature_log_prob("spam")["发票"]) == pytest.approx(2 / 3, rel=1e-14)
    assert math.exp(model.feature_log_prob("spam")["今天"]) == pytest.approx(1 / 3, rel=1e-14)
    # Σ_{j∈V} log(1 − φ_j|spam): four spam words at 1/3, two others at 2/3
    assert model.absent_log_prob("spam") == pytest.approx(
        4 * math.log(1 / 3) + 2 * math.log(2 / 3), rel=1e-14)
    # x = {发票, 代开}: spam (2/3)(2/3) · absent 增值税, 正规 (1/3)^2 · 今天, 开会 (2/3)^2 = 16/729
    #                   ham  (2/3)(1/3) · absent 增值税, 正规 (2/3)^2 · 今天, 开会 (1/3)^2 = 8/729
    assert model.predict_proba_one(QUERY)["spam"] == pytest.approx(16 / 24, rel=1e-13)
    # Counts do not matter to the Bernoulli model: only presence.
    assert model.predict_proba_one({"发票": 1, "代开": 1}) == model.predict_proba_one(QUERY)


def test_bernoulli_unsmoothed_limit_and_priors():
    model = BernoulliNB(alpha=1e-12)
    model.learn_one({"a": 1, "b": 1}, "x")
    model.learn_one({"a": 1}, "x")
    model.learn_one({"b": 1}, "y")
    phi = {k: math.exp(v) for k, v in model.feature_log_prob("x").items()}
    assert phi == pytest.approx({"a": 2 / 2, "b": 1 / 2}, rel=1e-9)  # D_jx / D_x
    # x = {b}: class x pays for its absent a: (2/3)(1 − 1)(1/2) = 0; y: (1/3)(1 − 0)(1) = 1/3
    assert model.predict_proba_one({"b": 1})["y"] == pytest.approx(1.0, abs=1e-9)


def test_gda_estimates_of_seed_002():
    # class 0: (1, 2), (3, 2); class 1: (4, 6), (6, 8), (5, 7)
    model = GDA()
    model.learn_many([[1, 2], [3, 2], [4, 6], [6, 8], [5, 7]], ["0", "0", "1", "1", "1"])
    # φ = P(y = 1) = 3/5; μ0 = (2, 2); μ1 = (5, 7)
    assert model.predict_proba_one([2, 2]) != {}
    assert model.means() == {"0": pytest.approx([2, 2]), "1": pytest.approx([5, 7])}
    # Σ = (1/m) Σ_i (x − μ_y)(x − μ_y)ᵀ: deviations (∓1, 0) and (−1, −1), (1, 1), (0, 0)
    #   = ([[2, 0], [0, 0]] + [[2, 2], [2, 2]]) / 5
    assert np.allclose(model.covariance(), [[0.8, 0.4], [0.4, 0.4]], rtol=1e-14, atol=1e-15)
    # x = (3, 4): Σ⁻¹ = [[2.5, −2.5], [−2.5, 5]]; (x − μ0)ᵀΣ⁻¹(x − μ0) = 12.5 for (1, 2),
    # 25 for x − μ1 = (−2, −3). log odds(1 : 0) = log(3/2) − (25 − 12.5)/2.
    log_odds = math.log(3 / 2) - (25 - 12.5) / 2
    assert model.predict_proba_one([3, 4])["1"] == pytest.approx(
        1 / (1 + math.exp(-log_odds)), rel=1e-12)
    assert not model.regularized
    explained = model.explain([3, 4])
    assert explained["mahalanobis"] == pytest.approx({"0": 12.5, "1": 25.0}, rel=1e-12)


def test_gda_per_class_and_diagonal_covariances():
    X = [[1, 2], [3, 2], [2, 5], [4, 6], [6, 8], [5, 9]]
    y = ["0", "0", "0", "1", "1", "1"]
    qda = GDA(covariance="per_class")
    qda.learn_many(X, y)
    # class 0: mean (2, 3); deviations (−1,−1), (1,−1), (0, 2): S = [[2, 0], [0, 6]] / 3
    assert np.allclose(qda.covariance("0"), [[2 / 3, 0], [0, 2]], rtol=1e-14, atol=1e-15)
    x = np.array([3.0, 4.0])
    expected = {}
    for label, mean in (("0", [2, 3]), ("1", [5, 23 / 3])):
        sigma = np.array(qda.covariance(label))
        d = x - mean
        expected[label] = -0.5 * (np.log(np.linalg.det(sigma)) + d @ np.linalg.solve(sigma, d))
    log_odds = expected["1"] - expected["0"]  # equal priors
    assert qda.predict_proba_one(x)["1"] == pytest.approx(1 / (1 + math.exp(-log_odds)),
                                                          rel=1e-12)
    diagonal = GDA(covariance="diagonal")
    diagonal.learn_many(X, y)
    # class 0 variances 2/3 and 2; class 1 means (5, 23/3), variances 2/3 and 14/9
    score = {
        "0": -0.5 * (math.log(2 / 3) + math.log(2) + 1 / (2 / 3) + 1 / 2),
        "1": -0.5 * (math.log(2 / 3) + math.log(14 / 9) + 4 / (2 / 3) + (11 / 3) ** 2 / (14 / 9)),
    }
    log_odds = score["1"] - score["0"]
    assert diagonal.predict_proba_one(x)["1"] == pytest.approx(1 / (1 + math.exp(-log_odds)),
                                                               rel=1e-12)


def test_weight_table_and_explain_follow_the_formulas():
    model = trained(MultinomialNB())
    weights = model.weights("spam", "ham")
    # log(P(发票|S) / P(发票|H)) = log((4/12) / (2/9))
    assert weights["发票"] == pytest.approx(math.log((4 / 12) / (2 / 9)), rel=1e-14)
    assert weights["今天"] == pytest.approx(math.log((1 / 12) / (2 / 9)), rel=1e-14)
    assert len(weights) == model.vocabulary_size == 6
    explained = model.explain(QUERY)
    # each token contributes count × log θ; base is the log prior
    assert explained["tokens"]["发票"]["spam"] == pytest.approx(2 * math.log(4 / 12), rel=1e-14)
    assert explained["base"] == pytest.approx({"spam": math.log(0.5), "ham": math.log(0.5)})
    assert explained["prediction"] == "spam"
    # strongest first: 发票 moves the odds by 2 log(1.5), 代开 by log(1.5)
    assert list(explained["tokens"]) == ["发票", "代开"]


def test_top_k_scores_only_the_strongest_words():
    model = trained(MultinomialNB())
    # |weight| of 发票 = log(1.5) ≈ 0.41; of 代开 = log(1.5) too; of 今天 = log(8/3) ≈ 0.98.
    # With top_k = 1 the message {发票, 今天} is scored on 今天 alone.
    full = model.predict_log_proba_one({"发票": 1, "今天": 1})
    top1 = model.predict_log_proba_one({"发票": 1, "今天": 1}, top_k=1)
    alone = model.predict_log_proba_one({"今天": 1})
    assert top1 == pytest.approx(alone, abs=1e-15)
    assert top1 != pytest.approx(full)
    assert model.explain({"发票": 1, "今天": 1}, top_k=1)["ignored"] == ["发票"]
