"""Token counts as numbers from the prepare process: the model step reads a run's numbers
instead of its dicts, and nothing observable changes. The child's numbering starting again,
an expiry renumbering the model's rows and runs that skip messages of their poll included."""

from __future__ import annotations

import base64
import gc
import weakref
from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.config import ModelSettings
from streamnb.daemon import build_daemon, processor
from streamnb.daemon.feedback import FeedbackStore
from streamnb.daemon.prepare import (
    MESSAGE,
    NumberedCounts,
    ProcessPreparer,
    TokenNumbering,
    _without_token_counts,
    with_numbered_counts,
)
from streamnb.models import make_model
from streamnb.models._prequential import TokenNumbers, numbered_step_takes, prequential_numbered
from streamnb.models.multinomial import MultinomialNB
from streamnb.pipeline import build_pipeline
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, drain, settings_for
from tests.daemon.test_batch_step import stream as sms_like_stream
from tests.daemon.test_pipelined_loop import step_until_caught_up
from tests.features.token_digests import sample

pytestmark = pytest.mark.timeout(300)

TOKENS = ["win", "cash", "lunch", "at", "noon", "é", "日本", "x" * 40, "call", "now", "ok",
          "mum", "free", "txt", "home"]

messages = st.lists(st.tuples(
    st.dictionaries(st.sampled_from(TOKENS), st.integers(1, 5), max_size=8),
    st.sampled_from([None, None, "ham", "spam", "eggs"]),
    st.booleans(),  # whether the message is in the run (else another record of the poll)
), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(polls=st.lists(messages, min_size=1, max_size=8), limit=st.integers(0, 20),
       expire_after=st.sets(st.integers(0, 7), max_size=3))
def test_a_numbered_run_is_stepped_as_its_dicts_are(polls, limit, expire_after):
    """The child's numbers through the daemon's copy of the numbering give the state and
    log-probabilities of ``prequential_log_proba_many`` over the dicts, to the bit, poll after
    poll: the numbering starting again (a small limit), an expiry between polls (new row
    list) and runs that leave some of their poll's messages out (not consecutive)."""
    numbered_model, dict_model = (make_model("multinomial", preset="mail") for _ in range(2))
    for model in (numbered_model, dict_model):
        model.track_last_seen()
    assert numbered_step_takes(numbered_model)
    child, daemon_side = TokenNumbering(limit), TokenNumbers()
    for p, poll in enumerate(polls):
        results = [(MESSAGE, f"m{p}.{i}", y, Counter(x), FeedbackStore.encode_x(x), ())
                   for i, (x, y, _) in enumerate(poll)]
        numbered = child.number(results)
        assert numbered is not None
        received = with_numbered_counts(daemon_side, _without_token_counts(results), numbered)
        run = [i for i, (_, _, in_run) in enumerate(poll) if in_run]
        if not run:
            continue
        members = [received[i][3] for i in run]
        assert all(type(m) is NumberedCounts for m in members)
        numbers, counts, lengths = members[0].poll.arrays(members)
        xs, ys = [dict(poll[i][0]) for i in run], [poll[i][1] for i in run]
        got = prequential_numbered(numbered_model, daemon_side, numbers, counts, lengths,
                                   xs, ys)
        want = dict_model.prequential_log_proba_many(xs, ys)
        assert got == want
        assert numbered_model.to_state() == dict_model.to_state()
        if p in expire_after:
            numbered_model.expire(4, keep=2)
            dict_model.expire(4, keep=2)


def test_a_labelled_messages_new_tokens_get_the_rows_the_loop_gives_them():
    """Rows by first labelled occurrence, after the model's; a token only in an unlabelled
    message gets none (the loop does not index it)."""
    xs, ys = [{"a": 1, "b": 2}, {"b": 1, "c": 3}, {"d": 1, "c": 1}], [None, "ham", "spam"]
    child, daemon_side = TokenNumbering(), TokenNumbers()
    results = [(MESSAGE, "", y, x, b"", ()) for x, y in zip(xs, ys, strict=True)]
    _, new_tokens, numbers, counts, _, lengths = child.number(results)
    daemon_side.extend(new_tokens)
    model = make_model("multinomial", preset="mail")
    batch = daemon_side.batch(model, numbers, counts, lengths, ys)
    assert batch.distinct_rows.tolist() == [-1, 0, 1, 2]
    assert batch.new_keys == ["b", "c", "d"]
    assert batch.ids.tolist() == [0, 1, 1, 2, 3, 2]
    assert batch.values.tolist() == [1, 2, 1, 3, 1, 1] and batch.lengths.tolist() == [2, 2, 2]


def test_the_rows_kept_do_not_keep_a_model_alive():
    """A revoked live model is freed although the daemon's rows were last kept for it; the
    next model has its rows looked up anew."""
    child, daemon_side = TokenNumbering(), TokenNumbers()
    _, new_tokens, numbers, counts, _, lengths = child.number(
        [(MESSAGE, "", "ham", {"a": 1, "b": 1}, b"", ())])
    daemon_side.extend(new_tokens)
    model = make_model("multinomial", preset="mail")
    prequential_numbered(model, daemon_side, numbers, counts, lengths, [{"a": 1, "b": 1}],
                         ["ham"])
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None
    fresh = make_model("multinomial", preset="mail")
    assert daemon_side.batch(fresh, numbers, counts, lengths, [None]).distinct_rows.tolist() == [
        -1, -1]


def test_counts_the_step_cannot_read_as_arrays_leave_the_batch_to_its_json():
    """A float, bool or out-of-range count, or a token not a ``str``: no numbers (the batch's
    counts are then rebuilt from their JSON, as the loop's path takes them)."""
    numbering = TokenNumbering()
    for counts in ({"a": 1.5}, {"a": True}, {"a": 0}, {"a": 2 ** 46}, {"a": 2 ** 70}, {3: 1}):
        results = [(MESSAGE, "ok", None, {"b": 1}, b'{"b":1}', ()),
                   (MESSAGE, "odd", None, counts, b"{}", ())]
        assert numbering.number(results) is None
    numbered = numbering.number([(MESSAGE, "ok", None, Counter({"b": 2, "c": 1}), b"", ())])
    restarted, new_tokens, numbers, counts, positions, lengths = numbered
    assert (restarted, positions, lengths.tolist(), counts.tolist()) == (False, [0], [2], [2, 1])
    assert [new_tokens[n] for n in numbers.tolist()] == ["b", "c"]


def mail_and_sms(data_dir) -> list[bytes]:
    """The token digests' sample of SpamAssassin as ``raw_b64`` (two in three labelled) among
    SMS-like messages with feedback, duplicate ids and poison."""
    mails = []
    for i, (member, raw) in enumerate(sample(data_dir, "spamassassin")):
        record = {"id": member, "raw_b64": base64.b64encode(raw).decode()}
        if i % 3:
            record["label"] = "spam" if "spam" in member else "ham"
        mails.append(orjson.dumps(record))
    values = sms_like_stream(seed=3)
    return [value for pair in zip(mails, values, strict=False) for value in pair] + (
        values[len(mails):])


def run_daemon(tmp_path, values, prepare_process: bool, numbering_limit: int = 1 << 18,
               partitions: int = 1, processes: int = 1):
    kafka = FakeKafka({"in": partitions})
    for i, value in enumerate(values):
        kafka.append("in", value, partition=i % partitions)
    model = ModelSettings(kind="multinomial", labels=("ham", "spam"), max_tokens=3000,
                          expiry_floor=1000)
    config = settings_for(tmp_path, model=model)
    metrics = RecordingMetrics()

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, config.kafka, on_assigned, on_revoked, batch=40)

    daemon = build_daemon(config, metrics=metrics, io_factory=io_factory)
    try:
        if prepare_process:
            daemon.preparer.close()
            daemon.preparer = ProcessPreparer(
                build_pipeline, (config.model.table(), dict(config.features)),
                config.limits.max_value_bytes, numbering_limit=numbering_limit,
                processes=processes)
            daemon.pipelined = True
            step_until_caught_up(daemon)
        else:
            drain(daemon)
        daemon.checkpoint("test")
    finally:
        daemon.close()
    return kafka, daemon, metrics


@pytest.mark.parametrize(("numbering_limit", "partitions", "processes"),
                         [(1 << 18, 1, 1), (500, 1, 1), (500, 2, 1), (1 << 18, 1, 2),
                          (500, 2, 3)])
def test_the_daemon_with_numbered_counts_changes_nothing_observable(
        tmp_path, data_dir, monkeypatch, numbering_limit, partitions, processes):
    """Mail and SMS through the prepare process (numbers, the numbering starting again every
    few polls with the small limit, expiries renumbering the rows; with several processes,
    each numbering its own part of every poll) and through the daemon's own featurizing: the
    very same predictions, dead letters, model, stores and offsets."""
    values = mail_and_sms(data_dir)
    ref_kafka, ref, ref_metrics = run_daemon(tmp_path / "ref", values, False,
                                             partitions=partitions)
    stepped, expiries = [], []

    def counted_step(model, numbering, numbers, counts, lengths, xs, ys):
        stepped.append(len(ys))
        return prequential_numbered(model, numbering, numbers, counts, lengths, xs, ys)

    monkeypatch.setattr(processor, "prequential_numbered", counted_step)
    expire = MultinomialNB.expire
    monkeypatch.setattr(MultinomialNB, "expire", lambda model, *args, **kwargs: expiries.append(
        model._vocab) or expire(model, *args, **kwargs))
    kafka, daemon, metrics = run_daemon(tmp_path / "numbered", values, True, numbering_limit,
                                        partitions, processes)
    # most messages were stepped from their numbers, and expiries renumbered the rows
    assert sum(stepped) > len(values) // 2 and any(vocab > 3000 for vocab in expiries)
    predictions = [orjson.loads(r.value) for r in kafka.all("out")]
    expected = [orjson.loads(r.value) for r in ref_kafka.all("out")]
    assert len(predictions) == len(expected) > 200
    for got, want in zip(predictions, expected, strict=True):
        got.pop("latency_seconds"), want.pop("latency_seconds")
        # id, label, probabilities, log-probabilities and score to the bit, offsets
        assert got == want
    assert [(r.value, r.headers) for r in kafka.all("dlq")] == [
        (r.value, r.headers) for r in ref_kafka.all("dlq")]
    assert daemon.live.to_state() == ref.live.to_state()
    for key in ref.slices:
        assert daemon.slices[key].to_state() == ref.slices[key].to_state()
        assert orjson.dumps(daemon._store(key).to_state()) == orjson.dumps(
            ref._store(key).to_state())
    assert daemon.offsets == ref.offsets
    assert metrics.names("observe_labelled") == ref_metrics.names("observe_labelled")
    assert metrics.names("feedback_outcome") == ref_metrics.names("feedback_outcome")
    waits = [seconds for (seconds,) in metrics.names("prepare_waited")]  # one a batch
    assert len(waits) > 10 and min(waits) >= 0 and sum(waits) > 0
    if numbering_limit == 500:  # the numbering started again: it holds a few polls' tokens
        assert all(0 < len(numbering.tokens) < 500 + 40 * 400
                   for numbering in daemon.preparer.numberings)
