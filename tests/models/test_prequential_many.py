"""``prequential_log_proba_many`` is the prequential loop: the vectorised step of MultinomialNB
returns the loop's log-probabilities (``predict_log_proba_one``'s, to rounding) and leaves the
loop's state (exactly), with bookkeeping that keeps every later call behaving as on the model
the loop trained; ``prequential_many`` gives their probabilities."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.models import TEXTBOOK_OPTIONS, ModelInputError, _prequential, make_model
from streamnb.models._text import SHORT_MESSAGE_TOKENS
from streamnb.models.presets import MAIL
from tests.models.test_models_short_path import replay

# Few words, so tokens repeat within a batch; a long message draws from many more.
WORDS = ["win", "cash", "now", "lunch", "at", "noon", "发票", "naïve"]
LONG_WORDS = [f"w{i}" for i in range(2 * SHORT_MESSAGE_TOKENS)]


def _message(kind: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    if kind == 0:
        return {}
    if kind == 1:
        return {rng.choice(WORDS): rng.randint(1, 3)}
    if kind == 9:  # longer than the short path takes: the loop scores it
        return {w: rng.randint(1, 2) for w in rng.sample(LONG_WORDS, SHORT_MESSAGE_TOKENS + 5)}
    return {w: rng.randint(1, 3) for w in rng.sample(WORDS, rng.randint(2, len(WORDS)))}


messages = st.builds(_message, st.integers(0, 9), st.integers(0, 2**16))
# "eggs" is rare, so it often first appears in the middle of a batch.
labels = st.sampled_from([None, None, "ham", "spam", "ham", "spam", "eggs"])
stream = st.lists(st.tuples(messages, labels), max_size=40)
# (message, label, unlearn?) learned before the batch: a prior state, some of it taken back.
prior = st.lists(st.tuples(messages, st.sampled_from(["ham", "spam", "eggs"]), st.booleans()),
                 max_size=15)
# Each set is on top of the "mail" preset (binary counts, idf, length_norm, min_spread 0.5),
# the daemon's default; TEXTBOOK_OPTIONS (the class defaults) is added at the end.
OPTIONS = [{**MAIL, **options} for options in [
    {},  # the mail preset itself
    {"repeated_words": "count"},
    {"repeated_words": "mixed", "tf": "log", "temperature": 2.5},
    {"repeated_words": "count", "idf": False, "length_norm": False, "min_spread": 0.0},
    {"tf": "log", "idf": True, "length_norm": False, "min_spread": 0.3, "alpha": 1.0},
    {"min_spread": 0.0, "alpha": 0.5},
    {"min_spread": 2.0},
    {"spread_weight": 0.0},  # the mail preset before spread_weight
    {"spread_weight": 2.0, "min_spread": 0.0},  # every token weighed by its spread
    {"spread_weight": 1.0, "repeated_words": "count", "idf": False, "length_norm": False},
    # the loop's options: the base-class step
    {"complement": True},
    {"combining": "robinson"},
    {"top_k": 3},
    {"n_buckets": 64},
]] + [TEXTBOOK_OPTIONS]
options = st.sampled_from(OPTIONS)


@pytest.fixture(scope="module", params=["c", "numpy"], autouse=True)
def step_kind(request):
    """Every test runs with each implementation of the batch step: the C one
    (``streamnb.models._step``, built by the set-up) and the numpy one beside it."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "numpy":
            patch.setenv(_prequential.PURE_PYTHON_ENV, "1")
        else:
            patch.delenv(_prequential.PURE_PYTHON_ENV, raising=False)
            assert _prequential._native is not None, "the C step is not built (make setup)"
        assert _prequential.native() == (request.param == "c")
        yield request.param


def loop(model, xs, ys):
    """The reference: each message's ``predict_log_proba_one``, then its learning."""
    log_probas = []
    for x, y in zip(xs, ys, strict=True):
        log_probas.append(model.predict_log_proba_one(x))
        if y is not None:
            model.learn_one(x, y)
    return log_probas


def assert_same_log_probas(expected: list[dict], got: list[dict], tolerance: float = 1e-9):
    """The same classes in the same order, each log-probability finite where the reference's
    is and equal to it to rounding: within ``tolerance`` times the message's largest
    log-probability magnitude, at least 1. (Each is a difference of log joint scores, which
    the paths round differently; a class whose probability underflows to 0.0 sits hundreds or
    thousands below the best, and its log-probability carries that magnitude's rounding.)"""
    assert len(expected) == len(got)
    for e, g in zip(expected, got, strict=True):
        assert list(e) == list(g)  # the same classes, in the same order
        scale = max(1.0, *map(abs, e.values())) if e else 1.0
        for label in e:
            assert math.isfinite(g[label]) == math.isfinite(e[label])
            assert abs(e[label] - g[label]) <= tolerance * scale


def pair(opts, events):
    looped, batched = make_model("multinomial", **opts), make_model("multinomial", **opts)
    replay(looped, events)
    replay(batched, events)
    return looped, batched


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options, prior, stream, st.lists(st.integers(0, 40), max_size=3), stream)
def test_batches_give_the_loops_probabilities_state_and_later_behaviour(
        opts, events, batch, cuts, after):
    looped, batched = pair(opts, events)
    xs = [x for x, _ in batch]
    ys = [y for _, y in batch]
    expected = loop(looped, xs, ys)
    got = []
    bounds = sorted({0, len(batch), *(c for c in cuts if c < len(batch))})
    for start, stop in zip(bounds, bounds[1:], strict=False):
        got += batched.prequential_log_proba_many(xs[start:stop], ys[start:stop])
    assert_same_log_probas(expected, got)
    assert batched.to_state() == looped.to_state()
    assert batched.n_updates == looped.n_updates
    assert batched.vocabulary_size == looped.vocabulary_size
    assert batched.state_nbytes() == looped.state_nbytes()
    assert batched.classes == looped.classes

    # The stream goes on one message at a time: predictions, learning and unlearning agree.
    for x, y in after:
        assert_same_log_probas([looped.predict_log_proba_one(x)],
                               [batched.predict_log_proba_one(x)])
        if y is not None:
            looped.learn_one(x, y)
            batched.learn_one(x, y)
    for x, y in batch[:5]:
        if y is not None:
            looped.unlearn_one(x, y)
            batched.unlearn_one(x, y)
    assert batched.to_state() == looped.to_state()
    for x in xs[:5] + [x for x, _ in after[:5]]:
        assert_same_log_probas([looped.predict_log_proba_one(x)],
                               [batched.predict_log_proba_one(x)])

    # Merging: into another model, and another model into it.
    other = make_model("multinomial", **opts)
    replay(other, [(x, y, False) for x, y in batch if y is not None][:6])
    assert (batched + other).to_state() == (looped + other).to_state()
    merged_b, merged_l = other.copy(), other.copy()
    merged_b += batched
    merged_l += looped
    assert merged_b.to_state() == merged_l.to_state()
    for x in xs[:5]:
        assert_same_log_probas([merged_l.predict_log_proba_one(x)],
                               [merged_b.predict_log_proba_one(x)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options, prior, stream, stream)
def test_a_second_batch_after_a_loaded_or_array_path_state(opts, events, first, second):
    """A state rebuilt by from_state, or changed by the array path (stale row lists), then
    batches: the same as the loop."""
    looped, batched = pair(opts, events)
    # (a loaded model orders its class columns by label: so must the reference)
    looped, batched = (type(m).from_state(m.to_state()) for m in (looped, batched))
    for model in (looped, batched):
        model.learn_one({"win": 1.0, "cash": 2.0, "lunch": 0}, "spam")  # floats: array path
    for batch in (first, second):
        xs = [x for x, _ in batch]
        ys = [y for _, y in batch]
        assert_same_log_probas(loop(looped, xs, ys), batched.prequential_log_proba_many(xs, ys))
        assert batched.to_state() == looped.to_state()


@pytest.mark.parametrize("kind", ["multinomial", "bernoulli"])
@pytest.mark.parametrize("bad, error", [
    ({"cash": -1}, "token counts must be finite numbers >= 0"),
    ({"cash": math.nan}, "token counts must be finite numbers >= 0"),
    ({"cash": "x"}, "token counts must be numbers"),
    ({7: 1}, "tokens must be str"),
    (["cash"], "text models take a mapping token -> count, got list"),
])
def test_a_bad_input_raises_the_loops_error_and_changes_nothing(kind, bad, error):
    model = make_model(kind)
    model.learn_many([{"cash": 2, "win": 1}, {"lunch": 1}], ["spam", "ham"])
    before = model.to_state()
    with pytest.raises(ModelInputError) as expected:
        make_model(kind).learn_one(bad, "spam")
    assert str(expected.value) == error
    xs = [{"win": 1, "new": 1}, {"lunch": 2}, bad, {"cash": 1}]
    with pytest.raises(ModelInputError, match=f"^{error}$"):
        model.prequential_log_proba_many(xs, ["spam", "eggs", "spam", None])
    assert model.to_state() == before
    assert model.classes == ["ham", "spam"]
    same = model.copy()
    assert_same_log_probas(loop(same, xs[:2], ["spam", None]),
                       model.prequential_log_proba_many(xs[:2], ["spam", None]))
    assert model.to_state() == same.to_state()


class Word(str):
    """A str subclass as a token (numpy.str_ is one)."""


@pytest.mark.parametrize("odd", [
    {"m1": True, "m2": 1}, {"m1": 2.0}, {"m1": 0, "m3": 1}, {"m1": 2**46}, {"m1": 2**70},
    {Word("m1"): 1, "new": 2}, {Word("brand-new"): 1}, {3: 1, "m1": 1},
], ids=["bool", "float", "zero", "2**46", "2**70", "str subclass", "new str subclass",
        "int token"])
def test_a_message_the_batch_reader_does_not_take_is_stepped_by_the_loop_in_its_place(
        odd, step_kind):
    """Counts that are not ints in [1, 2**46) or tokens that are not (exactly) str, in the
    middle of a batch of mails: that message takes the loop, in its place; the others, the
    batch step; the probabilities and the state are the loop's."""
    rng = random.Random(11)
    xs = [_mail(rng.randint(3, 90), rng.randrange(2**16)) for _ in range(9)]
    xs.insert(5, odd)
    ys = ["spam", "ham", None, "ham", "spam", "eggs", "spam", None, "ham", "spam"]
    looped, batched = make_model("multinomial", **MAIL), make_model("multinomial", **MAIL)
    stepped = []
    original = batched._prequential_loop
    batched._prequential_loop = lambda a, b: stepped.append(a) or original(a, b)
    try:
        expected = loop(looped, xs, ys)
    except ModelInputError as error:  # the loop refuses it: so must the step, learning nothing
        with pytest.raises(ModelInputError, match=f"^{error}$"):
            batched.prequential_log_proba_many(xs, ys)
        assert batched.vocabulary_size == 0
        return
    assert_same_log_probas(expected, batched.prequential_log_proba_many(xs, ys), tolerance=1e-12)
    # (the numpy step's reader takes a str subclass token equal to a str one it read before)
    earlier = {k for x in xs[:5] for k in x}
    numpy_takes_it = step_kind == "numpy" and all(
        (type(k) is str or k in earlier) and type(v) is int and 0 < v < 2**46
        for k, v in odd.items())
    assert stepped == ([] if numpy_takes_it else [[odd]])
    assert batched.to_state() == looped.to_state()


def test_a_bad_label_raises_before_anything_is_learned():
    model = make_model("multinomial")
    with pytest.raises(ModelInputError, match="labels must be str"):
        model.prequential_many([{"a": 1}, {"b": 1}], ["spam", 3])
    assert model.n_updates == 0 and model.vocabulary_size == 0
    with pytest.raises(ModelInputError, match="2 inputs but 1 labels"):
        model.prequential_many([{"a": 1}, {"b": 1}], ["spam"])


def test_gda_gets_the_loop_and_checks_lengths_first():
    model, looped = make_model("gda"), make_model("gda")
    xs = [[0.0, 1.0], [1.0, 0.5], [0.2, 0.9], [1.1, 0.4], [0.5, 0.5]]
    ys = ["ham", "spam", "ham", "spam", None]
    assert_same_log_probas(loop(looped, xs, ys), model.prequential_log_proba_many(xs, ys))
    before = model.to_state()
    with pytest.raises(ModelInputError, match="expected 2 features, got 3"):
        model.prequential_log_proba_many([[0.0, 1.0], [0.0, 1.0, 2.0]], ["ham", None])
    assert model.to_state() == before
    fresh = make_model("gda")
    with pytest.raises(ModelInputError, match="expected 3 features, got 2"):
        fresh.prequential_log_proba_many([[0.0, 1.0, 2.0], [0.0, 1.0]], ["ham", None])
    assert fresh.n_updates == 0


@pytest.mark.parametrize("preset", ["mail", "textbook"])
def test_an_sms_stream_in_batches_of_500_is_the_loop(sms, preset):
    xs, ys = sms
    rng = random.Random(3)
    ys = [y if rng.random() < 0.8 else None for y in ys[:3000]]
    xs = xs[:3000]
    looped = make_model("multinomial", preset=preset)
    batched = make_model("multinomial", preset=preset)
    expected = loop(looped, xs, ys)
    got = []
    for start in range(0, len(xs), 500):
        got += batched.prequential_log_proba_many(xs[start:start + 500], ys[start:start + 500])
    assert_same_log_probas(expected, got)
    assert batched.to_state() == looped.to_state()


def test_many_classes_each_message_gets_the_classes_learned_before_it():
    """More classes than bits in a machine word (a newsgroup-per-class stream, say)."""
    rng = random.Random(3)
    words = [f"w{i}" for i in range(300)]
    classes = [f"c{i:02d}" for i in range(80)]
    xs = [{w: rng.randint(1, 3) for w in rng.sample(words, rng.randint(0, 12))}
          for _ in range(600)]
    ys = [None if rng.random() < 0.2 else rng.choice(classes) for _ in xs]
    batched, looped = make_model("multinomial"), make_model("multinomial")
    got = batched.prequential_log_proba_many(xs, ys)
    assert_same_log_probas(loop(looped, xs, ys), got)
    assert batched.to_state() == looped.to_state()


# -- long messages: the vectorised step takes them too ------------------------------------------

# Few enough words that long messages share most of their tokens; a message has from a few
# tokens to twice the short path's limit, so batches mix both of the loop's paths.
MAIL_WORDS = [f"m{i}" for i in range(3 * SHORT_MESSAGE_TOKENS)] + ["发票", "naïve"]


def _mail(n: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    return {w: rng.choice((1, 1, 1, 2, 5)) for w in rng.sample(MAIL_WORDS, n)}


mails = st.builds(_mail, st.integers(SHORT_MESSAGE_TOKENS - 8, 2 * SHORT_MESSAGE_TOKENS)
                  | st.integers(0, 5), st.integers(0, 2**16))
mail_stream = st.lists(st.tuples(mails, labels), max_size=30)
mail_prior = st.lists(st.tuples(mails, st.sampled_from(["ham", "spam", "eggs"]), st.booleans()),
                      max_size=12)
VECTORISED_OPTIONS = [o for o in OPTIONS
                      if not {"complement", "combining", "top_k", "n_buckets"} & set(o)]


def no_loop(model, monkeypatch):
    """Make ``model`` fail if its prequential step falls back to the per-message loop."""
    def loop_called(xs, ys):
        raise AssertionError(f"the loop stepped {len(xs)} messages")
    monkeypatch.setattr(model, "_prequential_loop", loop_called)


@settings(max_examples=120, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(VECTORISED_OPTIONS), mail_prior, mail_stream,
       st.lists(st.integers(0, 30), max_size=3), mail_stream)
def test_long_messages_are_stepped_together_as_the_loop_steps_them(
        monkeypatch, opts, events, batch, cuts, after):
    """Messages either side of the short path's limit, after a prior state (with unlearning),
    classes first seen mid-batch, batches split anywhere: the vectorised step alone (never the
    loop) gives the loop's probabilities and state, and the model goes on like the loop's."""
    looped, batched = pair(opts, events)
    xs = [x for x, _ in batch]
    ys = [y for _, y in batch]
    expected = loop(looped, xs, ys)
    got = []
    bounds = sorted({0, len(batch), *(c for c in cuts if c < len(batch))})
    with monkeypatch.context() as patch:
        no_loop(batched, patch)
        for start, stop in zip(bounds, bounds[1:], strict=False):
            got += batched.prequential_log_proba_many(xs[start:stop], ys[start:stop])
    assert_same_log_probas(expected, got, tolerance=1e-12)
    assert batched.to_state() == looped.to_state()
    assert batched.vocabulary_size == looped.vocabulary_size
    assert batched.state_nbytes() == looped.state_nbytes()
    assert batched.classes == looped.classes

    for x, y in after:  # one at a time, both paths
        assert_same_log_probas([looped.predict_log_proba_one(x)],
                               [batched.predict_log_proba_one(x)], tolerance=1e-12)
        if y is not None:
            looped.learn_one(x, y)
            batched.learn_one(x, y)
    for x, y in batch[:6]:
        if y is not None:
            looped.unlearn_one(x, y)
            batched.unlearn_one(x, y)
    assert batched.to_state() == looped.to_state()
    assert batched.vocabulary_size == looped.vocabulary_size
    for x in xs[:6]:
        assert_same_log_probas([looped.predict_log_proba_one(x)],
                               [batched.predict_log_proba_one(x)], tolerance=1e-12)
    other = make_model("multinomial", **opts)
    replay(other, [(x, y, False) for x, y in batch if y is not None][:6])
    assert (batched + other).to_state() == (looped + other).to_state()
    merged_b, merged_l = other.copy(), other.copy()
    merged_b += batched
    merged_l += looped
    assert merged_b.to_state() == merged_l.to_state()
    # and a second batch, on the state the first one left
    assert_same_log_probas(loop(looped, xs, ys), batched.prequential_log_proba_many(xs, ys),
                           tolerance=1e-12)
    assert batched.to_state() == looped.to_state()


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(VECTORISED_OPTIONS), mail_prior, mail_stream, mail_stream,
       st.integers(1, 60))
def test_the_daemons_bookkeeping_last_seen_stamps_changed_keys_and_expiry_are_the_loops(
        monkeypatch, opts, events, batch, second, max_tokens):
    """A model as the daemon runs it (last-seen stamps for token expiry, change tracking for
    the changelog): after a batch step, the stamps and the clock (in the state), the keys
    written and their values, and what expiry then removes are the loop's; and so after a
    second batch on the expired model."""
    looped, batched = pair(opts, events)
    for model in (looped, batched):
        model.track_last_seen()
    for step in (batch, second):
        for model in (looped, batched):
            model.mark_changes()
        xs = [x for x, _ in step]
        ys = [y for _, y in step]
        expected = loop(looped, xs, ys)
        with monkeypatch.context() as patch:
            no_loop(batched, patch)
            assert_same_log_probas(expected, batched.prequential_log_proba_many(xs, ys),
                                   tolerance=1e-12)
        assert batched.to_state() == looped.to_state()
        keys = sorted(looped.changed_keys())
        assert sorted(batched.changed_keys()) == keys
        assert batched.stat_values(keys) == looped.stat_values(keys)
        assert batched.expire(max_tokens) == looped.expire(max_tokens)
        assert batched.to_state() == looped.to_state()
        assert sorted(batched.changed_keys()) == sorted(looped.changed_keys())
    for x, _ in second[:5]:
        assert_same_log_probas([looped.predict_log_proba_one(x)],
                               [batched.predict_log_proba_one(x)], tolerance=1e-12)


# -- saturation: a class whose probability underflows keeps its key and its log-probability --

def _loud(n: int, seed: int) -> dict[str, int]:
    """A mail of ``n`` words of MAIL_WORDS, each up to a million times: scored on occurrences,
    the classes' scores lie thousands apart and the others' probabilities underflow to 0.0."""
    rng = random.Random(seed)
    return {w: rng.randint(1, 10**6) for w in rng.sample(MAIL_WORDS, n)}


loud_mails = st.builds(_loud, st.integers(1, 2 * SHORT_MESSAGE_TOKENS), st.integers(0, 2**16))
saturating_stream = st.lists(st.tuples(mails | loud_mails, labels), max_size=30)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options, mail_prior, saturating_stream)
def test_a_prediction_lists_every_known_class_with_a_finite_log_probability_and_its_exp(
        opts, events, batch):
    """Whatever path steps them (the C step, the numpy step, the loop) and however sure the
    model is: each message's log-probabilities name exactly the classes learned before it,
    each finite and the loop's to rounding; ``prequential_many`` gives exactly their exps
    (0.0 where one underflows, never a missing class), which add up to 1."""
    looped, batched = pair(opts, events)
    twin = batched.copy()
    xs = [x for x, _ in batch]
    ys = [y for _, y in batch]
    known, expected = [], []
    for x, y in batch:
        known.append(looped.classes)
        expected.append(looped.predict_log_proba_one(x))
        if y is not None:
            looped.learn_one(x, y)
    log_probas = batched.prequential_log_proba_many(xs, ys)
    probas = twin.prequential_many(xs, ys)
    assert_same_log_probas(expected, log_probas)
    for classes, log_proba, proba in zip(known, log_probas, probas, strict=True):
        assert sorted(log_proba) == sorted(proba) == classes
        assert all(math.isfinite(lp) for lp in log_proba.values())
        assert proba == {c: math.exp(lp) for c, lp in log_proba.items()}
        if proba:
            assert math.isclose(math.fsum(proba.values()), 1.0, rel_tol=1e-12)
    assert twin.to_state() == batched.to_state() == looped.to_state()


@pytest.mark.parametrize("length", [3, 2 * SHORT_MESSAGE_TOKENS],
                         ids=["short path", "array path"])
def test_a_class_whose_probability_underflows_keeps_its_key_and_exact_log_probability(
        monkeypatch, step_kind, length):
    """A long run of spam words, each many times, against the textbook model: P(ham) is
    0.0 in float64, yet every path names ham, with the finite log-probability
    ``predict_log_proba_one`` gives (to rounding), and the log-odds are the loop's."""
    spam_words, ham_words = MAIL_WORDS[:length], MAIL_WORDS[-length:]
    history = [({w: 1 for w in random.Random(i).sample(words, max(1, length // 2))}, label,
                False) for i in range(20) for words, label in ((spam_words, "spam"),
                                                               (ham_words, "ham"))]
    looped, batched = pair(TEXTBOOK, history)
    twin = batched.copy()
    probe = {w: 10**5 for w in spam_words}
    xs, ys = [probe, probe], [None, "spam"]
    expected = loop(looped, xs, ys)
    assert math.isfinite(expected[0]["ham"]) and expected[0]["ham"] < -745  # exp: 0.0
    with monkeypatch.context() as patch:
        no_loop(batched, patch)
        no_loop(twin, patch)
        got = batched.prequential_log_proba_many(xs, ys)
        probas = twin.prequential_many(xs, ys)
    assert_same_log_probas(expected, got, tolerance=1e-12)
    for log_proba, proba in zip(got, probas, strict=True):
        assert proba == {"ham": 0.0, "spam": 1.0}
        assert math.isfinite(log_proba["ham"]) and log_proba["spam"] == 0.0
    for e, g in zip(expected, got, strict=True):
        assert math.isclose(g["spam"] - g["ham"], e["spam"] - e["ham"], rel_tol=1e-12)


def test_a_long_message_the_step_cannot_take_is_looped_between_vectorised_runs(monkeypatch):
    """A float count in one long mail: that mail alone takes the loop, in its place."""
    rng = random.Random(5)
    xs = [_mail(rng.randint(60, 120), rng.randrange(2**16)) for _ in range(12)]
    xs[5] = {**xs[5], "m0": 2.0}
    ys = ["spam", "ham", None, "ham", "spam", "spam", None, "eggs", "ham", None, "spam", "ham"]
    looped, batched = make_model("multinomial"), make_model("multinomial")
    stepped = []
    original = batched._prequential_loop
    monkeypatch.setattr(batched, "_prequential_loop",
                        lambda a, b: stepped.append(len(a)) or original(a, b))
    assert_same_log_probas(loop(looped, xs, ys), batched.prequential_log_proba_many(xs, ys),
                           tolerance=1e-12)
    assert stepped == [1]
    assert batched.to_state() == looped.to_state()


# The tuned options for mail, spelled out (the constructor's defaults may change).
MAIL_OPTIONS = {"alpha": 0.2, "repeated_words": "binary", "tf": "raw", "idf": True,
                "length_norm": True, "min_spread": 0.5, "temperature": 1.0, "combining": "nb",
                "top_k": None, "complement": False}
TEXTBOOK = {"alpha": 1.0, "repeated_words": "count", "tf": "raw", "idf": False,
            "length_norm": False, "min_spread": 0.0, "temperature": 1.0, "combining": "nb",
            "top_k": None, "complement": False}


@pytest.mark.parametrize("opts", [MAIL_OPTIONS, TEXTBOOK], ids=["tuned mail", "textbook"])
def test_spamassassin_in_polls_of_500_is_the_loop(spamassassin, monkeypatch, opts):
    """Real mail (2,016 SpamAssassin messages, nearly all longer than the short path's limit),
    20% unlabelled: the vectorised step alone gives the loop's state bit for bit and its
    log-probabilities to 1e-11 (the textbook model's scores of a long mail are thousands,
    rounded differently by the paths: 2.3e-12 of the largest log-probability at worst)."""
    xs, ys = spamassassin
    assert sum(len(x) > SHORT_MESSAGE_TOKENS for x in xs) > 0.95 * len(xs)
    rng = random.Random(4)
    ys = [y if rng.random() < 0.8 else None for y in ys]
    looped, batched = make_model("multinomial", **opts), make_model("multinomial", **opts)
    expected = loop(looped, xs, ys)
    no_loop(batched, monkeypatch)
    got = []
    for start in range(0, len(xs), 500):
        got += batched.prequential_log_proba_many(xs[start:start + 500], ys[start:start + 500])
    assert_same_log_probas(expected, got, tolerance=1e-11)
    assert batched.to_state() == looped.to_state()
    assert [max(p, key=p.get) if p else None for p in got] == [
        max(p, key=p.get) if p else None for p in expected]


@pytest.mark.parametrize("corpus", ["spamassassin", "chinese-spam", "20newsgroups", "webkb",
                                    "sms-spam-collection"])
def test_every_shared_text_corpus_as_the_daemon_featurizes_it_is_the_loop(
        data_dir, monkeypatch, corpus):
    """Each shared text corpus (a seeded sample of 1,200, 20% unlabelled), featurized as the
    daemon does, in polls of 400: the vectorised step alone gives the loop's state bit for bit
    and its log-probabilities to 1e-11, with the tuned mail options and the textbook ones."""
    from streamnb.evaluation.corpora import read_corpus
    from streamnb.pipeline import build_pipeline

    messages = read_corpus(data_dir / corpus, shuffle=7, limit=1200).messages
    pipeline = build_pipeline({"kind": "multinomial"}, {})
    xs = [pipeline.prepare(m).x for m in messages]
    rng = random.Random(2)
    ys = [m.label if rng.random() < 0.8 else None for m in messages]
    for opts in (MAIL_OPTIONS, TEXTBOOK):
        looped, batched = make_model("multinomial", **opts), make_model("multinomial", **opts)
        expected = loop(looped, xs, ys)
        got = []
        with monkeypatch.context() as patch:
            no_loop(batched, patch)
            for start in range(0, len(xs), 400):
                got += batched.prequential_log_proba_many(xs[start:start + 400],
                                                          ys[start:start + 400])
        # 1e-11: the textbook model's scores of a long mail are thousands, and a 20 Newsgroups
        # message has ~170 distinct tokens over 20 classes; the vectorised sums round
        # differently from the loop's, by up to 2.3e-12 of the largest log-probability
        # (SpamAssassin, textbook) and 4e-12 in probability (20 Newsgroups).
        assert_same_log_probas(expected, got, tolerance=1e-11)
        assert batched.to_state() == looped.to_state()


def _array_path_spreads(model, x: dict) -> dict[str, float]:
    """Per in-vocabulary token of ``x``: its spread as the array path computes it
    (``_token_scores`` over the active classes, max - min)."""
    keys, values = model._encode(x)
    rows, _, known = model._rows_in_vocabulary(keys, values)
    terms = model._token_scores(rows, model._active_columns())
    kept = keys if known is None else [k for k, ok in zip(keys, known.tolist(), strict=True)
                                       if ok]
    return dict(zip(kept, (terms.max(axis=1) - terms.min(axis=1)).tolist(), strict=True))


def _short_path_spreads(model, x: dict) -> dict[str, float]:
    """The same as the short path computes it (libm logs, two classes)."""
    alpha, columns = model.alpha, model._active_columns().tolist()
    smoothing = alpha * model._vocab
    ld0, ld1 = (math.log(model._totals[c] + smoothing) for c in columns)
    spreads = {}
    for key in x:
        row = model._index.get(key)
        if row is not None and model._nnz[row]:
            lc0, lc1 = (math.log(model._counts[row, c] + alpha) for c in columns)
            spreads[key] = abs((lc0 - ld0) - (lc1 - ld1))
    return spreads


# A count whose log numpy and libm round differently on this machine (found by search), and
# the direction the spreads then differ in: the loop's path on the wrong side of the threshold.
@pytest.mark.parametrize("count, length, spreads_of", [
    (18212, 2 * SHORT_MESSAGE_TOKENS, _array_path_spreads),
    (21527, 2, _short_path_spreads),
], ids=["long: the array path's spread", "short: the short path's spread"])
def test_a_spread_exactly_at_min_spread_keeps_the_token_as_the_loop_does(
        monkeypatch, step_kind, count, length, spreads_of):
    """min_spread set to a token's very spread, as the loop's path for that message computes
    it: the loop keeps the token (spread >= min_spread), and so must the vectorised step, even
    where the other path's logs put the spread an ulp below the threshold."""
    history = [({"t": count, "a": 1, "b": 2}, "ham", False), ({"t": 1, "c": 1, "d": 3}, "spam",
                                                               False)]
    options = {"alpha": 0.2, "repeated_words": "mixed", "idf": False, "length_norm": True}
    reference = make_model("multinomial", min_spread=0.0, **options)
    replay(reference, history)
    probe = {"t": 1, **{f"filler{i}": 1 for i in range(length - 1)}}
    loop_spread = spreads_of(reference, probe)["t"]
    other_spread = (_short_path_spreads if spreads_of is _array_path_spreads
                    else _array_path_spreads)(reference, probe)["t"]
    if not other_spread < loop_spread:
        pytest.skip("numpy's and libm's logs round this count alike here")
    looped = make_model("multinomial", min_spread=loop_spread, **options)
    batched = make_model("multinomial", min_spread=loop_spread, **options)
    replay(looped, history)
    replay(batched, history)
    xs, ys = [probe, {"t": 2, "e": 1}], [None, "spam"]
    expected = loop(looped, xs, ys)
    assert expected[0]["ham"] > math.log(0.75)  # "t" was kept: without it the classes tie
    with monkeypatch.context() as patch:
        if step_kind == "numpy":  # recomputes the spread with the loop's expression
            no_loop(batched, patch)
            assert_same_log_probas(expected, batched.prequential_log_proba_many(xs, ys),
                                   tolerance=1e-12)
        else:  # hands the message to the loop, and steps the rest itself
            stepped = []
            original = batched._prequential_loop
            patch.setattr(batched, "_prequential_loop",
                          lambda a, b: stepped.append(a) or original(a, b))
            assert_same_log_probas(expected, batched.prequential_log_proba_many(xs, ys),
                                   tolerance=1e-12)
            # both hold "t", whose spread is the threshold when each is scored
            assert stepped == [[xs[0]], [xs[1]]]
    assert batched.to_state() == looped.to_state()


def test_a_batch_of_more_new_tokens_than_the_token_table_has_room_for(step_kind):
    """40,000 tokens first seen in one batch, then again in the next (the C step's look-up
    table is built again, larger, on the way): the loop's probabilities and state."""
    xs = [{f"t{i}-{k}": 1 for k in range(1000)} | {"shared": 1, f"t{i - 1}-0": 2}
          for i in range(40)]
    ys = [["ham", "spam", None][i % 3] for i in range(40)]
    looped, batched = make_model("multinomial", **MAIL), make_model("multinomial", **MAIL)
    for _ in range(2):
        assert_same_log_probas(loop(looped, xs, ys), batched.prequential_log_proba_many(xs, ys),
                           tolerance=1e-12)
        assert batched.to_state() == looped.to_state()


def test_a_model_moved_to_another_process_steps_as_the_loop_there(tmp_path, step_kind):
    """A model pickled after batch steps and loaded by a process whose str hashes differ
    (another PYTHONHASHSEED): its batch steps there are still the loop's."""
    import os
    import pickle
    import subprocess
    import sys

    rng = random.Random(3)
    xs = [_mail(rng.randint(60, 120), rng.randrange(2**16)) for _ in range(60)]
    ys = [rng.choice(["ham", "spam", None]) for _ in xs]
    model = make_model("multinomial", **MAIL)
    for start in range(0, 30, 10):  # the C step's table holds the rows of the first two
        model.prequential_log_proba_many(xs[start:start + 10], ys[start:start + 10])
    (tmp_path / "model.pickle").write_bytes(pickle.dumps((model, xs[30:], ys[30:])))
    script = (
        "import pickle, sys\n"
        "from tests.models.test_prequential_many import assert_same_log_probas, loop\n"
        "model, xs, ys = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "looped = model.copy()\n"
        "expected = loop(looped, xs, ys)\n"
        "got = model.prequential_log_proba_many(xs[:15], ys[:15])\n"
        "got += model.prequential_log_proba_many(xs[15:], ys[15:])\n"
        "assert_same_log_probas(expected, got, tolerance=1e-12)\n"
        "assert model.to_state() == looped.to_state()\n"
        "print('same')\n")
    seed = "12345" if os.environ.get("PYTHONHASHSEED") != "12345" else "54321"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    if step_kind == "numpy":
        env[_prequential.PURE_PYTHON_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "model.pickle")],
                         capture_output=True, text=True, env=env, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.strip() == "same"


def _plainly_noted(model):
    """``model`` noting the rows it writes as the change tracking did before its mask: every
    row into the set, as it comes."""
    def note_rows(rows):
        model._changed_rows.update(rows.tolist() if hasattr(rows, "tolist") else rows)
        model._totals_changed = True
    model._note_rows = note_rows
    return model


# Mails of 40-200 distinct tokens out of 1,500: a batch writes hundreds of rows (more than
# the mask's threshold), and many of them again in the next batch.
tracked_mail = st.builds(
    lambda seed, n: {f"t{i}": 1 + i % 2 for i in random.Random(seed).sample(range(1500), n)},
    st.integers(0, 2**16), st.integers(40, 200))
tracked_ops = st.lists(st.one_of(
    st.tuples(st.just("batch"), st.lists(st.tuples(tracked_mail, labels), max_size=12)),
    st.tuples(st.just("one"), st.tuples(tracked_mail, st.sampled_from(["ham", "spam"]))),
    st.tuples(st.just("expire"), st.integers(100, 1400)),
    st.tuples(st.just("commit"), st.none())), max_size=12)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([{**MAIL}, TEXTBOOK_OPTIONS]), tracked_ops)
def test_the_changed_tokens_and_their_order_are_those_of_noting_every_row(opts, ops):
    """The rows a batch step wrote go into the changed set only if not noted since the last
    commit (a mask over the rows): the set is that of noting every row, so a commit lists
    the same tokens in the same order (the changelog's pages follow it), through batch
    steps, single learns, expiry's renumbering, the arrays' growth and commits."""
    masked = make_model("multinomial", **opts)
    plain = _plainly_noted(make_model("multinomial", **opts))
    for model in (masked, plain):
        model.track_last_seen()
        model.mark_changes()
    for op, arg in ops:
        for model in (masked, plain):
            if op == "batch":
                model.prequential_log_proba_many([x for x, _ in arg], [y for _, y in arg])
            elif op == "one":
                model.learn_one(*arg)
            elif op == "expire":
                model.expire(arg, old_values=False)
        assert masked.changed_tokens() == plain.changed_tokens()
        assert masked.changed_token_count() == plain.changed_token_count()
        assert list(masked._changed_rows) == list(plain._changed_rows)
        if op == "commit":
            masked.mark_changes()
            plain.mark_changes()
    assert masked.to_state() == plain.to_state()


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([{**MAIL}, TEXTBOOK_OPTIONS]), tracked_ops, tracked_ops)
def test_the_rows_the_c_step_adds_are_in_the_index_whenever_it_is_read(step_kind, opts,
                                                                        ops, more):
    """The C step leaves the tokens it adds out of the index dict until the dict is next
    read: whatever reads it then (a learn, a prediction, expiry, a copy in another process)
    finds every token at its row, and the model goes on as one that indexed them at once."""
    import pickle

    deferred = make_model("multinomial", **opts)
    at_once = make_model("multinomial", **opts)
    at_once._add_rows = lambda keys, index_now=True: type(at_once)._add_rows(at_once, keys)
    for op, arg in ops:
        before = len(deferred._keys)
        for model in (deferred, at_once):
            if op == "batch":
                model.prequential_log_proba_many([x for x, _ in arg], [y for _, y in arg])
            elif op == "one":
                model.learn_one(*arg)
            elif op == "expire":
                model.track_last_seen()
                model.expire(arg, old_values=False)
        assert deferred._keys == at_once._keys
        if op == "batch" and step_kind == "c" and len(deferred._keys) > before:
            assert deferred._indexed <= before  # the step did leave them out
        assert at_once._indexed == len(at_once._keys)
    # a commit's reads (changelog pages: token_table, token_values) leave the dict as it is
    probe = [f"t{i}" for i in range(0, 1600, 7)] + ["never seen"]
    indexed = deferred._indexed
    labels, table, stamps = deferred.token_table(probe)
    assert (labels, table.tolist()) == (lambda t: (t[0], t[1].tolist()))(
        at_once.token_table(probe))
    assert deferred.token_values(probe) == at_once.token_values(probe)
    assert deferred._indexed == indexed
    copied = pickle.loads(pickle.dumps(deferred))
    for model in (deferred, copied):
        assert model._index == {key: row for row, key in enumerate(model._keys)}
        assert model._index == at_once._index
        assert model.to_state() == at_once.to_state()
    for op, arg in more:
        if op == "batch":
            xs, ys = [x for x, _ in arg], [y for _, y in arg]
            assert_same_log_probas(at_once.prequential_log_proba_many(xs, ys),
                               copied.prequential_log_proba_many(xs, ys), tolerance=0)
        elif op == "one":
            assert_same_log_probas([at_once.predict_log_proba_one(arg[0])],
                               [copied.predict_log_proba_one(arg[0])], tolerance=0)
            at_once.learn_one(*arg)
            copied.learn_one(*arg)
        assert copied.to_state() == at_once.to_state()


def _exact_by_numpy(model, rows, added) -> bool:
    """``_state_is_exact`` with every check a numpy call (the reference)."""
    n_docs, totals, limit = model._n_docs, model._totals, _prequential._EXACT_LIMIT
    if added >= limit:
        return False
    if n_docs.size and not (
            np.array_equal(n_docs, np.rint(n_docs)) and np.array_equal(totals, np.rint(totals))
            and n_docs.max() < limit and totals.max() < limit
            and not np.any((n_docs == 0) & (totals != 0))):
        return False
    counts = model._counts[rows]
    return not rows.size or bool(np.array_equal(counts, np.rint(counts))
                                 and counts.max() < limit)


figures = st.sampled_from([0.0, -0.0, 1.0, 3.0, 0.5, -2.0, 2.0**45 - 1, 2.0**45, 2.0**46,
                           math.inf, -math.inf, math.nan])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(figures, figures), max_size=3), st.lists(figures, max_size=4),
       st.sampled_from([0.0, 5.0, 2.0**45]))
def test_the_states_exactness_is_judged_as_numpy_judges_it(classes, counts, added):
    model = make_model("multinomial")
    model._n_docs = np.array([docs for docs, _ in classes], dtype=np.float64)
    model._totals = np.array([total for _, total in classes], dtype=np.float64)
    model._counts = np.array([[count] * max(len(classes), 1) for count in counts] or
                             np.zeros((0, 1)), dtype=np.float64)
    rows = np.arange(len(counts))
    assert _prequential._state_is_exact(model, rows, added) == _exact_by_numpy(
        model, rows, added)
