"""The scoring options of the text models: they change how counts become a score, never the counts.

Each option is checked against its formula on a small hand-made example, and the invariants a
user relies on (same statistics, mergeable, learn/unlearn exact, ranking kept by the temperature)
are property tests over random streams.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.models import TEXTBOOK_OPTIONS, BernoulliNB, MultinomialNB, make_model

# Every option of the multinomial model pinned to the textbook model.
PLAIN = TEXTBOOK_OPTIONS

WORDS = st.sampled_from(["cash", "win", "free", "lunch", "notes", "today", "meet", "pills"])
MESSAGE = st.dictionaries(WORDS, st.integers(1, 4), min_size=1, max_size=6)
STREAM = st.lists(st.tuples(MESSAGE, st.sampled_from(["spam", "ham"])), min_size=2, max_size=25)
SCORING = st.fixed_dictionaries({
    "top_k": st.sampled_from([None, 1, 3]),
    "temperature": st.sampled_from([0.5, 1.0, 3.0]),
    "complement": st.booleans(),
    "tf": st.sampled_from(["raw", "log"]),
    "idf": st.booleans(),
    "length_norm": st.booleans(),
    "min_spread": st.sampled_from([0.0, 0.5]),
    "spread_weight": st.sampled_from([0.0, 0.7, 2.0]),
})


def learned(options, stream):
    model = MultinomialNB(**options)
    for x, y in stream:
        model.learn_one(x, y)
    return model


def log_odds(log_proba):
    return log_proba["spam"] - log_proba["ham"]


TRAIN = [({"cash": 2, "win": 1}, "spam"), ({"cash": 1, "free": 1}, "spam"),
         ({"lunch": 1, "notes": 2}, "ham"), ({"lunch": 1, "cash": 1}, "ham"),
         ({"today": 1}, "ham")]


@settings(max_examples=20, deadline=None)
@given(stream=STREAM, scoring=SCORING, repeated=st.sampled_from(["count", "mixed", "binary"]))
def test_scoring_options_leave_the_statistics_alone(stream, scoring, repeated):
    plain = learned({**PLAIN, "repeated_words": repeated}, stream)
    tuned = learned({"repeated_words": repeated, **scoring}, stream)
    state, tuned_state = plain.to_state(), tuned.to_state()
    for key in ("classes", "n_docs", "totals", "vocabulary", "counts"):
        assert state[key] == tuned_state[key]
    # ... so they merge with a model scored differently, and unlearning restores the counts.
    merged = MultinomialNB(repeated_words=repeated, **scoring)
    merged += plain
    assert merged.to_state()["counts"] == state["counts"]
    for x, y in stream[1:]:
        tuned.unlearn_one(x, y)
    assert tuned.to_state()["counts"] == learned(tuned.options(), stream[:1]).to_state()["counts"]


THREE_CLASS_STREAM = st.lists(st.tuples(MESSAGE, st.sampled_from(["spam", "ham", "work"])),
                              max_size=15)
PROBES = [{}, {"cash": 1}, {"cash": 2, "lunch": 1, "unseen": 3},
          {"cash": 1, "win": 1, "free": 1, "lunch": 1, "notes": 1, "today": 1, "meet": 1}]


@settings(max_examples=40, deadline=None)
@given(scoring=SCORING, combining=st.sampled_from(["nb", "robinson"]),
       a=THREE_CLASS_STREAM, b=THREE_CLASS_STREAM, c=THREE_CLASS_STREAM)
def test_scored_predictions_are_bit_identical_after_merges_and_unlearning(scoring, combining,
                                                                           a, b, c):
    options = {**scoring, "combining": combining}
    one_stream = learned(options, a + b + c)
    expected = [one_stream.predict_log_proba_one(x) for x in PROBES]
    parts = [learned(options, s) for s in (a, b, c)]
    for merged in (parts[0] + parts[1] + parts[2], parts[2] + (parts[1] + parts[0])):
        assert [merged.predict_log_proba_one(x) for x in PROBES] == expected
        if merged.classes:  # explain takes the array path: equal to rounding
            for x, want in zip(PROBES, expected, strict=True):
                assert merged.explain(x)["log_proba"] == pytest.approx(want, rel=1e-12,
                                                                        abs=1e-12)
    # Learning then unlearning a stream (new classes included) leaves the scores unchanged.
    model = learned(options, a)
    before = [model.predict_log_proba_one(x) for x in PROBES]
    for x, y in b:
        model.learn_one(x, y)
    for x, y in reversed(b):
        model.unlearn_one(x, y)
    assert [model.predict_log_proba_one(x) for x in PROBES] == before


@settings(max_examples=20, deadline=None)
@given(stream=STREAM, query=MESSAGE, temperature=st.floats(0.2, 20.0))
def test_temperature_divides_the_log_odds_and_keeps_the_decision(stream, query, temperature):
    cold = learned({**PLAIN, "repeated_words": "binary"}, stream)
    warm = learned({**PLAIN, "repeated_words": "binary", "temperature": temperature}, stream)
    cold_lp, warm_lp = cold.predict_log_proba_one(query), warm.predict_log_proba_one(query)
    if len(cold_lp) == 2:
        assert log_odds(warm_lp) == pytest.approx(log_odds(cold_lp) / temperature, abs=1e-9)
        assert math.fsum(map(math.exp, warm_lp.values())) == pytest.approx(1.0)
    assert warm.predict_one(query) == cold.predict_one(query)


def test_temperature_applies_to_bernoulli_and_explain():
    cold, warm = BernoulliNB(), BernoulliNB(temperature=4.0)
    for x, y in TRAIN:
        cold.learn_one(x, y)
        warm.learn_one(x, y)
    query = {"cash": 1, "lunch": 1, "win": 1}
    assert log_odds(warm.predict_log_proba_one(query)) == pytest.approx(
        log_odds(cold.predict_log_proba_one(query)) / 4.0)
    assert warm.explain(query)["log_proba"] == pytest.approx(warm.predict_log_proba_one(query))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_temperature_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match="temperature"):
        MultinomialNB(temperature=bad)


@pytest.mark.parametrize(("name", "bad"), [("tf", "sqrt"), ("idf", 1), ("length_norm", "yes"),
                                            ("complement", None), ("spread_weight", -0.5),
                                            ("spread_weight", "high")])
def test_bad_scoring_options_are_named(name, bad):
    with pytest.raises(ValueError, match=name):
        MultinomialNB(**{name: bad})


def test_complement_terms_are_minus_log_theta_of_the_other_classes():
    model = MultinomialNB(**{**PLAIN, "complement": True})
    three = TRAIN + [({"meet": 1, "today": 1}, "work")]
    for x, y in three:
        model.learn_one(x, y)
    # |V| = 7. Not-spam counts: lunch 2, notes 2, cash 1, today 2, meet 1 (total 8).
    explained = model.explain({"cash": 1})
    assert explained["tokens"]["cash"]["spam"] == pytest.approx(-math.log((1 + 1) / (8 + 7)))
    # Not-work counts: cash 4, win 1, free 1, lunch 2, notes 2, today 1 (total 11).
    assert explained["tokens"]["cash"]["work"] == pytest.approx(-math.log((4 + 1) / (11 + 7)))
    assert explained["base"]["work"] == pytest.approx(math.log(1 / 6))


@settings(max_examples=15, deadline=None)
@given(stream=STREAM, query=MESSAGE)
def test_complement_equals_plain_nb_with_two_classes(stream, query):
    # With two classes the complement of one class is the other: the odds are the same.
    plain = learned(PLAIN, stream)
    complement = learned({**PLAIN, "complement": True}, stream)
    a, b = plain.predict_log_proba_one(query), complement.predict_log_proba_one(query)
    assert b == pytest.approx(a, abs=1e-9)


def test_complement_matches_scikit_learn_complement_nb():
    from sklearn.naive_bayes import ComplementNB

    three = TRAIN + [({"meet": 1, "today": 1}, "work"), ({"meet": 2, "notes": 1}, "work")]
    vocabulary = sorted({t for x, _ in three for t in x})
    matrix = np.array([[x.get(t, 0) for t in vocabulary] for x, _ in three], dtype=float)
    reference = ComplementNB(alpha=1.0).fit(matrix, [y for _, y in three])
    model = MultinomialNB(**{**PLAIN, "complement": True})
    for x, y in three:
        model.learn_one(x, y)
    query = {"cash": 1, "meet": 2, "notes": 1}
    row = np.array([[query.get(t, 0) for t in vocabulary]], dtype=float)
    theirs = dict(zip(reference.classes_, reference.predict_joint_log_proba(row)[0], strict=True))
    explained = model.explain(query)
    # scikit-learn's joint score leaves the prior out when there is more than one class.
    ours = {c: explained["base"][c] + sum(t[c] for t in explained["tokens"].values())
            - explained["base"][c] for c in theirs}
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_log_tf_idf_and_length_norm_weigh_the_terms():
    model = MultinomialNB(**{**PLAIN, "repeated_words": "mixed"})
    weighted = MultinomialNB(**{**PLAIN, "tf": "log", "idf": True, "length_norm": True})
    for x, y in TRAIN:
        model.learn_one(x, y)
        weighted.learn_one(x, y)
    query = {"cash": 3, "lunch": 1}
    plain_terms = model.explain(query)["tokens"]  # x_k = 1 under "mixed": the bare log θ
    # df from the counts: cash occurs 4 times, lunch twice, in N = 5 messages.
    raw = {"cash": math.log1p(3) * (math.log(6 / 5) + 1), "lunch": math.log1p(1) * (
        math.log(6 / 3) + 1)}
    norm = math.hypot(*raw.values())
    explained = weighted.explain(query)
    for token, weight in raw.items():
        for label in ("spam", "ham"):
            assert explained["tokens"][token][label] == pytest.approx(
                weight / norm * plain_terms[token][label], rel=1e-12)


@settings(max_examples=15, deadline=None)
@given(stream=STREAM, query=MESSAGE, copies=st.integers(2, 5))
def test_length_norm_makes_repeating_a_message_change_nothing(stream, query, copies):
    # Under "binary" a message and the same words repeated score alike anyway; with length_norm
    # and counts, scaling every count by the same factor leaves the score unchanged.
    model = learned({**PLAIN, "length_norm": True}, stream)
    scaled = {t: n * copies for t, n in query.items()}
    assert model.predict_log_proba_one(scaled) == pytest.approx(
        model.predict_log_proba_one(query), abs=1e-9)


def test_make_model_accepts_the_scoring_options():
    model = make_model("multinomial", top_k=20, temperature=2.0, length_norm=True, idf=True)
    assert model.options()["temperature"] == 2.0
    assert type(model).from_state(model.to_state()).options() == model.options()


def test_min_spread_leaves_weak_tokens_out():
    model = MultinomialNB(**{**PLAIN, "repeated_words": "binary", "min_spread": 1.0})
    for x, y in TRAIN:
        model.learn_one(x, y)
    # Boolean counts, |V| = 6, spam 4 tokens, ham 5: lunch moves the odds by
    # log((2+1)/11) - log((0+1)/10) = 1.00 (kept), cash by log(3/10) - log(2/11) = 0.50 (left out).
    explained = model.explain({"cash": 1, "lunch": 1})
    assert list(explained["tokens"]) == ["lunch"]
    assert explained["ignored"] == ["cash"]
    assert model.predict_log_proba_one({"cash": 1, "lunch": 1}) == pytest.approx(
        model.predict_log_proba_one({"lunch": 1}))


def _spreads_of_cash_and_lunch():
    # Boolean counts of TRAIN, |V| = 6, spam 4 tokens (denominator 4 + α|V| = 10), ham 5 (11):
    # cash log(3/10) against log(2/11), lunch log(1/10) against log(3/11).
    return math.log(33 / 20), math.log(30 / 11)


def test_spread_weight_weighs_each_term_by_its_spread():
    model = MultinomialNB(**{**PLAIN, "repeated_words": "binary", "spread_weight": 1.0})
    for x, y in TRAIN:
        model.learn_one(x, y)
    cash, lunch = _spreads_of_cash_and_lunch()
    # each term times its spread: cash pushes to spam by cash * cash, lunch to ham by lunch²
    expected = math.log(2 / 3) + cash * cash - lunch * lunch
    assert log_odds(model.predict_log_proba_one({"cash": 1, "lunch": 1})) == pytest.approx(
        expected, rel=1e-12)
    explained = model.explain({"cash": 1, "lunch": 1})["tokens"]
    assert explained["lunch"]["ham"] == pytest.approx(lunch * math.log(3 / 11), rel=1e-12)


def test_spread_weight_comes_before_length_norm_and_after_idf():
    options = {**PLAIN, "repeated_words": "binary", "spread_weight": 2.0, "idf": True,
               "length_norm": True, "min_spread": 0.6}
    model = MultinomialNB(**options)
    for x, y in TRAIN:
        model.learn_one(x, y)
    cash, lunch = _spreads_of_cash_and_lunch()  # cash (0.50) is below min_spread: left out
    query = {"cash": 1, "lunch": 1, "win": 1}
    # win: log(2/10) against log(1/11), spread log(22/10); idf from df: N = 5, win 1, lunch 2
    win = math.log(22 / 10)
    raw = {"lunch": (math.log(6 / 3) + 1) * lunch ** 2, "win": (math.log(6 / 2) + 1) * win ** 2}
    norm = math.hypot(*raw.values())
    expected = math.log(2 / 3) + (raw["win"] * win - raw["lunch"] * lunch) / norm
    assert log_odds(model.predict_log_proba_one(query)) == pytest.approx(expected, rel=1e-12)
    assert model.explain(query)["ignored"] == ["cash"]
    # the short path (plain Python) and the array path (numpy) agree
    model._short_limit = 0
    assert log_odds(model.predict_log_proba_one(query)) == pytest.approx(expected, rel=1e-12)


def test_spread_weight_zero_is_the_unweighted_score():
    plain = MultinomialNB(**{**PLAIN, "idf": True, "length_norm": True})
    zero = MultinomialNB(**{**PLAIN, "idf": True, "length_norm": True, "spread_weight": 0.0})
    for x, y in TRAIN:
        plain.learn_one(x, y)
        zero.learn_one(x, y)
    query = {"cash": 2, "lunch": 1, "today": 1}
    assert zero.predict_log_proba_one(query) == plain.predict_log_proba_one(query)


def test_robinson_fisher_combining_matches_the_formulas():
    from scipy.stats import chi2

    model = MultinomialNB(**{**PLAIN, "repeated_words": "binary", "combining": "robinson",
                             "robinson_s": 1.0, "robinson_x": 0.5, "min_dev": 0.1})
    for x, y in TRAIN:
        model.learn_one(x, y)
    # Boolean document counts: 2 spam, 3 ham. f(w) = (s x + n p) / (s + n).
    def f(b, g):
        p = (b / 2) / (b / 2 + g / 3)
        return (0.5 + (b + g) * p) / (1 + b + g)
    kept = [f(2, 1), f(0, 2)]  # cash, lunch; notes f(0, 1) = 0.25 is kept too
    kept.append(f(0, 1))
    h = chi2.sf(-2 * sum(map(math.log, kept)), 2 * len(kept))
    s = chi2.sf(-2 * sum(math.log(1 - v) for v in kept), 2 * len(kept))
    proba = model.predict_proba_one({"cash": 1, "lunch": 1, "notes": 1})
    assert proba["spam"] == pytest.approx((1 + h - s) / 2, rel=1e-12)
    assert proba["ham"] == pytest.approx(1 - (1 + h - s) / 2, rel=1e-12)


def test_robinson_ranks_where_floats_would_saturate():
    model = MultinomialNB(combining="robinson")
    for _ in range(30):
        model.learn_one({f"s{j}": 1 for j in range(40)}, "spam")
        model.learn_one({f"h{j}": 1 for j in range(40)}, "ham")
    some = model.predict_log_proba_one({f"s{j}": 1 for j in range(10)})
    more = model.predict_log_proba_one({f"s{j}": 1 for j in range(40)})
    assert math.exp(some["spam"]) == 1.0 == math.exp(more["spam"])  # both round to 1.0
    assert log_odds(more) > log_odds(some) > 0
