"""Decay in the daemon: model.half_life_messages, the global model as a sum of decaying slices,
and the learn clock a feedback entry keeps for a later correction."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.config import ConfigError, load_settings
from streamnb.daemon import Daemon
from streamnb.daemon.changelog import all_records, apply_records, changed_records
from streamnb.daemon.feedback import FeedbackStore
from streamnb.daemon.partitions import Partitions
from streamnb.evaluation.options import Tables, model_table
from streamnb.models import MultinomialNB, make_model
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, WordPipeline, drain
from tests.daemon.fakes import settings_for as fake_settings


def test_half_life_messages_reaches_the_model():
    settings = load_settings(text="[model]\nhalf_life_messages = 5000\n")
    assert settings.model.half_life_messages == 5000
    assert settings.model.table()["half_life"] == 5000
    assert "half_life" not in load_settings(text="").model.table()  # off by default
    assert model_table({"kind": "bernoulli", "half_life_messages": 700}) == {
        "kind": "bernoulli", "half_life": 700}
    # streamnb evaluate --set model.half_life_messages=N measures what the daemon would run
    tables = Tables({"kind": "multinomial"}, {}).with_overrides(["model.half_life_messages=90"])
    assert tables.model == {"kind": "multinomial", "half_life": 90}
    assert tables.build_pipeline().model.half_life == 90


@pytest.mark.parametrize("text, message", [
    ("[model]\nhalf_life_messages = -3\n",
     "config: model.half_life_messages must be an integer >= 0, got -3"),
    ("[model]\nhalf_life_messages = 1.5\n", "config: model.half_life_messages must be"),
    ('[model]\nkind = "gda"\nhalf_life_messages = 10\n',
     "config: model.half_life_messages applies to the text models"),
    ("[model]\nhalf_life_messages = 10\n[model.options]\nhalf_life = 20\n",
     "config: model.options.half_life and model.half_life_messages both set"),
])
def test_a_bad_half_life_fails_naming_the_key(text, message):
    with pytest.raises(ConfigError) as error:
        load_settings(text=text)
    assert message in str(error.value) and "\n" not in str(error.value)


def sum_of(models, kind, half_life):
    total = make_model(kind, half_life=half_life)
    for model in models:
        total += model
    return total


def assert_same_scores(a, b, probe, tol=1e-9):
    pa, pb = a.predict_log_proba_one(probe), b.predict_log_proba_one(probe)
    assert pa.keys() == pb.keys()
    for label in pa:
        assert pa[label] == pytest.approx(pb[label], abs=tol)


messages = st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 3), min_size=1, max_size=4)
events = st.lists(st.tuples(st.integers(0, 2), messages, st.sampled_from(["ham", "spam"]),
                            st.booleans()), min_size=1, max_size=50)


@settings(max_examples=30, deadline=None)
@given(events=events, half_life=st.integers(1, 3),
       kind=st.sampled_from(["multinomial", "bernoulli"]), tracked=st.booleans())
def test_live_is_the_sum_of_decaying_slices(events, half_life, kind, tracked):
    """Three owned slices at different clocks (half-lives of 1 to 3 messages: epochs change
    within the run), with corrections that unlearn at the learn clock; ``live`` follows each
    step and equals the sum of the slices, and a daemon restored from the changelog records
    (slice by slice, then re-summed) holds the same slices and the same global model."""

    def new_model():
        model = make_model(kind, half_life=half_life)
        if tracked:  # as with model.max_tokens
            model.track_last_seen()
        return model

    parts = Partitions(new_model, lambda key: FeedbackStore(),
                       new_live=lambda: make_model(kind, half_life=half_life))
    keys = [f"mail:{i}" for i in range(3)]
    for key in keys:
        parts.own(key)
    learned = []
    for n, (i, x, label, correct) in enumerate(events):
        key = keys[i]
        if correct and learned:
            key, x, label, at = learned.pop(n % len(learned))
            parts.learn(key, x, label, unlearn=True, learned_at=at)
            other = "ham" if label == "spam" else "spam"
            parts.learn(key, x, other, learned_at=at)
            continue
        at = parts.learn(key, x, label)
        learned.append((key, x, label, at))
    slices = [parts.slices[key].model for key in keys]
    expected = sum_of(slices, kind, half_life)
    assert parts.live.decay_clock == max(model.decay_clock for model in slices)
    if len(expected.classes) == 2:
        assert_same_scores(parts.live, expected, {"a": 1, "c": 1})

    again = Partitions(new_model, lambda key: FeedbackStore(),
                       new_live=lambda: make_model(kind, half_life=half_life))
    for key in keys:
        records = all_records(parts.slices[key].model, parts.slices[key].store)
        again.apply_remote(key, records, follow=False)
    again.resum()
    for key in keys:
        assert again.slices[key].model.to_state() == parts.slices[key].model.to_state()
    if len(expected.classes) == 2:
        assert_same_scores(again.live, parts.live, {"a": 1, "c": 1})


def test_a_remote_slice_followed_record_by_record():
    """A remote slice's commits (changed keys only) keep live equal to the slice, across an
    epoch change (half-life 1: a new epoch every 64 messages)."""
    owner = make_model("multinomial", half_life=1)
    parts = Partitions(lambda: make_model("multinomial", half_life=1), lambda key: FeedbackStore())
    parts.slice("mail:0")
    parts.slice("mail:1")  # two slices: live is their sum, not the slice itself
    owner.mark_changes()
    no_feedback = FeedbackStore()
    no_feedback.mark_changes()
    for i in range(150):
        owner.learn_one({f"w{i % 7}": 1, "common": 1}, "spam" if i % 3 else "ham")
        if i % 10 == 9:
            parts.apply_remote("mail:0", changed_records(owner, no_feedback))
            owner.mark_changes()
    parts.apply_remote("mail:0", changed_records(owner, no_feedback))
    assert parts.slices["mail:0"].model.to_state() == owner.to_state()
    assert_same_scores(parts.live, owner, {"w1": 1, "common": 1}, 1e-12)


def test_a_feedback_entry_keeps_its_learn_clock():
    store = FeedbackStore()
    store.remember("m1", "mail:0", {"a": 1}, "spam", 17)
    store.remember("m2", "mail:0", {"b": 1}, None)
    store.set_label("m2", "ham", 20)
    copy = FeedbackStore()
    apply_records(make_model("multinomial", half_life=5), copy, "mail:0",
                  all_records(make_model("multinomial", half_life=5), store))
    assert copy.get("m1").clock == 17 and copy.get("m2").clock == 20
    plain = FeedbackStore()
    plain.remember("m3", "mail:0", {"a": 1}, "spam")
    (record,) = [value for _, value in all_records(make_model("multinomial"), plain)]
    assert b"clock" not in record  # without decay the records are what they were


def test_the_daemon_relabels_at_the_learn_clock(tmp_path):
    """Through the daemon's record path (fake broker): a correction gives the message its new
    label at the age it had, a late label is learned when it comes; the slice then equals a
    model that learned the final labels at those clocks."""
    def record(obj):
        return orjson.dumps(obj)

    kafka = FakeKafka({"in": 1})
    texts = {"m0": "win cash", "m1": "hello mum", "m2": "win prize", "m3": "lunch mum",
             "m4": "cash now"}
    for msg_id, label in [("m0", "spam"), ("m1", "ham"), ("m2", "spam"), ("m3", None),
                          ("m4", "spam")]:
        body = {"id": msg_id, "text": texts[msg_id], **({"label": label} if label else {})}
        kafka.append("in", record(body), key=msg_id.encode())
    for msg_id, label in [("m0", "ham"), ("m3", "ham")]:  # a correction, then a late label
        kafka.append("in", record({"type": "feedback", "id": msg_id, "label": label}),
                     key=msg_id.encode())
    settings = fake_settings(tmp_path)
    settings = replace(settings, model=replace(settings.model, kind="multinomial",
                                               half_life_messages=2))

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=7,
                      transactional_id="fake")

    daemon = Daemon(settings, WordPipeline(), new_model=lambda: MultinomialNB(half_life=2),
                    metrics=RecordingMetrics(), io_factory=io_factory)
    drain(daemon)
    (part,) = daemon.parts.slices.values()
    assert part.store.get("m0").clock == 1 and part.store.get("m3").clock == 5
    # m0 learned as ham at clock 1; m1, m2, m4 at 2, 3, 4; m3's late label at clock 5
    expected = MultinomialNB(half_life=2)
    for msg_id, label in [("m0", "ham"), ("m1", "ham"), ("m2", "spam"), ("m4", "spam"),
                          ("m3", "ham")]:
        expected.learn_one(dict.fromkeys(texts[msg_id].split(), 1), label)
    assert part.model.decay_clock == expected.decay_clock == 5
    for probe in ({"win": 1}, {"mum": 1, "cash": 1}, {"hello": 1, "now": 1}):
        assert_same_scores(part.model, expected, probe, 1e-12)
