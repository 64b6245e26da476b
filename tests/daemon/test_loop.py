"""The daemon's loop against in-memory Kafka: prequential order, feedback, dead letters,
commits, crashes, rebalances and several daemons. The real-broker versions live in
tests/integration."""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.daemon.changelog import ChangelogError
from streamnb.daemon.errors import FencedError
from streamnb.daemon.loop import CHANGELOG_EXIT_CODE, FENCED_EXIT_CODE
from tests.daemon.fakes import (
    CountModel,
    FakeKafka,
    RecordingMetrics,
    changelog_state,
    drain,
    make_daemon,
    settings_for,
    total_state,
)

WORDS = ["win", "cash", "now", "hello", "mum", "meeting", "free", "prize", "lunch", "call"]


def message(msg_id, text, label=None):
    obj = {"id": msg_id, "text": text}
    if label is not None:
        obj["label"] = label
    return orjson.dumps(obj)


def feedback(msg_id, label):
    return orjson.dumps({"type": "feedback", "id": msg_id, "label": label})


def random_text(rng, label):
    spammy = label == "spam"
    words = [rng.choice(WORDS[:5] if spammy else WORDS[3:]) for _ in range(rng.randint(1, 6))]
    return " ".join(words)


def offline(final_labels, texts):
    model = CountModel()
    for msg_id, label in final_labels.items():
        model.learn_one(dict(__import__("collections").Counter(texts[msg_id].split())), label)
    state = model.to_state()
    state.pop("n_updates")
    return state


def outputs(kafka, topic="out"):
    return [(r.key.decode(), orjson.loads(r.value)) for r in kafka.all(topic)]


def test_every_message_is_predicted_before_it_is_learned(tmp_path):
    kafka = FakeKafka({"in": 1})
    kafka.append("in", message("a", "win cash", "spam"))
    kafka.append("in", message("b", "win cash"))
    kafka.append("in", message("c", "hello mum", "ham"))
    metrics = RecordingMetrics()
    daemon = make_daemon(settings_for(tmp_path), kafka, metrics)
    drain(daemon)
    daemon.checkpoint("test")

    observed = metrics.names("observe_labelled")
    # "a" came first: predicted by the empty model, then learned.
    assert observed[0] == ("spam", None, {})
    # "c" was predicted by a model that had seen only spam.
    assert observed[1][1] == "spam"
    [(key, prediction)] = outputs(kafka)
    assert key == "b"
    assert prediction["label"] == "spam"
    assert prediction["probabilities"] == {"spam": 1.0}
    assert prediction["model_updates"] == 1
    assert (prediction["topic"], prediction["partition"], prediction["offset"]) == ("in", 0, 1)
    assert prediction["latency_seconds"] >= 0
    assert prediction["score"] == 1.0


def test_late_feedback_corrections_and_duplicates_equal_offline_on_final_labels(tmp_path):
    rng = random.Random(4)
    kafka = FakeKafka({"in": 2})
    texts, truth, final = {}, {}, {}
    for i in range(120):
        label = rng.choice(["ham", "spam"])
        texts[f"m{i}"] = random_text(rng, label)
        truth[f"m{i}"] = label
        labelled = i % 3 == 0
        kafka.append("in", message(f"m{i}", texts[f"m{i}"], label if labelled else None),
                     key=f"m{i}".encode())
        if labelled:
            final[f"m{i}"] = label
    # late labels for half the unlabelled ones
    late = [m for m in truth if m not in final][::2]
    for m in late:
        kafka.append("in", feedback(m, truth[m]), key=m.encode())
        final[m] = truth[m]
    # corrections: flip 15 labels, then flip 5 of them back
    flipped = rng.sample(sorted(final), 15)
    for m in flipped:
        final[m] = "ham" if final[m] == "spam" else "spam"
        kafka.append("in", feedback(m, final[m]), key=m.encode())
    for m in flipped[:5]:
        final[m] = "ham" if final[m] == "spam" else "spam"
        kafka.append("in", feedback(m, final[m]), key=m.encode())
    # duplicates of everything
    for m in sorted(final):
        kafka.append("in", feedback(m, final[m]), key=m.encode())

    metrics = RecordingMetrics()
    daemon = make_daemon(settings_for(tmp_path), kafka, metrics)
    drain(daemon)
    assert total_state(daemon) == offline(final, texts)
    outcomes = [c[0] for c in metrics.names("feedback_outcome")]
    assert outcomes.count("learned") == len(late)
    assert outcomes.count("relabelled") == 20
    assert outcomes.count("duplicate") == len(final)
    assert "unknown_id" not in outcomes
    assert len(outputs(kafka)) == len(truth) - sum(1 for i in range(120) if i % 3 == 0)


def test_feedback_for_an_aged_out_id_is_dead_lettered_and_learns_nothing(tmp_path):
    kafka = FakeKafka({"in": 1})
    for i in range(5):
        kafka.append("in", message(f"m{i}", "win cash"))
    kafka.append("in", feedback("m0", "spam"))  # m0 was evicted (max_ids = 3)
    kafka.append("in", feedback("m4", "spam"))
    kafka.append("in", feedback("never", "ham"))
    base = settings_for(tmp_path)
    from dataclasses import replace

    from streamnb.config import FeedbackSettings

    daemon = make_daemon(replace(base, feedback=FeedbackSettings(max_ids=3)), kafka)
    drain(daemon)
    daemon.checkpoint("test")
    dead = kafka.all("dlq")
    reasons = [dict(r.headers)["streamnb.reason"] for r in dead]
    assert reasons == [b"unknown_id", b"unknown_id"]
    assert [orjson.loads(r.value)["id"] for r in dead] == ["m0", "never"]
    assert total_state(daemon)["docs"] == {"spam": 1}


def test_poison_goes_to_the_dead_letter_topic_with_original_bytes_and_the_rest_is_unaffected(
    tmp_path,
):
    kafka = FakeKafka({"in": 1})
    poison = [
        (b"not json", "bad_json"),
        (b'{"id": "p2", "label": "spam"}', "missing_body"),
        (b'{"id": "p3", "text": "CRASH here"}', "parse_error"),
        (message("p4", "win", "eggs"), "unknown_label"),
        (b'{"id": "p5", "text": "a", "tokens": ["a"]}', "ambiguous_body"),
        (b'{"type": "feedback", "id": "x"}', "missing_label"),
        (b"\xff\xfe garbage", "bad_json"),
        (b'{"id": "p8", "features": [1.0, 2.0]}', "wrong_body"),
    ]
    good = [message("g1", "win cash", "spam"), message("g2", "hello mum", "ham")]
    for i, (value, _) in enumerate(poison):
        kafka.append("in", value, key=f"k{i}".encode(), headers=[("origin", b"test")])
        kafka.append("in", good[i % 2])
    daemon = make_daemon(settings_for(tmp_path), kafka)
    drain(daemon)
    daemon.checkpoint("test")
    dead = kafka.all("dlq")
    assert [r.value for r in dead] == [value for value, _ in poison]
    for record, (_, reason), i in zip(dead, poison, range(len(poison)), strict=True):
        headers = dict(record.headers)
        assert headers["streamnb.reason"].decode() == reason
        assert headers["origin"] == b"test"
        assert record.key == f"k{i}".encode()
        assert headers["streamnb.source.topic"] == b"in"
        assert int(headers["streamnb.source.offset"]) == 2 * i
    # the good messages (ids repeat, so each counts once under its label)
    assert total_state(daemon)["docs"] == {"spam": 1, "ham": 1}


def _stream(seed, n=150, partitions=3):
    rng = random.Random(seed)
    kafka = FakeKafka({"in": partitions})
    texts, final = {}, {}
    for i in range(n):
        m = f"m{i}"
        label = rng.choice(["ham", "spam"])
        texts[m] = random_text(rng, label)
        labelled = rng.random() < 0.6
        kafka.append("in", message(m, texts[m], label if labelled else None), key=m.encode())
        if labelled:
            final[m] = label
        if i > 10 and rng.random() < 0.3:  # late label or correction for an earlier id
            old = f"m{rng.randrange(i)}"
            new = rng.choice(["ham", "spam"])
            kafka.append("in", feedback(old, new), key=old.encode())
            final[old] = new
    return kafka, texts, final


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    crash_polls=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    batch=st.integers(1, 20),
)
def test_crash_at_any_moment_then_resume_counts_every_label_once_and_predicts_once(
    tmp_path_factory, seed, crash_polls, batch
):
    kafka, texts, final = _stream(seed)
    config = settings_for()
    rng = random.Random(seed)
    for polls in crash_polls:
        daemon = make_daemon(config, kafka, batch=batch)
        for _ in range(polls):
            records = daemon.io.poll(0)
            if records:
                daemon.process(records)
            if rng.random() < 0.3 and daemon.pending:
                daemon.checkpoint("interval")
        # kill -9: the open transaction (outputs and state since the last commit) is lost
    daemon = make_daemon(config, kafka, batch=batch)
    drain(daemon)
    daemon.checkpoint("shutdown")
    assert total_state(daemon) == offline(final, texts)
    # and the changelog alone holds the same model
    assert changelog_state(kafka) == offline(final, texts)
    # a read_committed reader sees every unlabelled message's prediction exactly once
    unlabelled = [orjson.loads(r.value)["id"] for r in kafka.all("in")
                  if "label" not in orjson.loads(r.value)]
    assert Counter(key for key, _ in outputs(kafka)) == Counter(unlabelled)


def follow(daemon):
    """Apply the remote slices' changelog records until none is left to read."""
    for _ in range(1000):
        daemon.follow_changelog()
        if daemon.io.tail_lag() == 0:
            return
    raise AssertionError("the changelog reader never caught up")


def test_a_partition_moves_to_another_daemon_without_replay_and_both_predict_alike(tmp_path):
    kafka, texts, final = _stream(7, n=120, partitions=3)
    first = make_daemon(settings_for(), kafka, transactional_id="a")
    for _ in range(5):
        first.process(first.io.poll(0))
    first.checkpoint("interval")
    read_before = {tp: first.io.positions[tp] for tp in first.io.assigned}
    # a second daemon joins: the group gives it in:1 and in:2 (eager: revoke, then assign)
    second = make_daemon(settings_for(), kafka, transactional_id="b")
    second.io.pending_assignment = []
    second.io.poll(0)
    first.io.rebalance([("in", 0)])
    first.process(first.io.poll(0))  # revokes (and commits), keeps in:0
    second.io.rebalance([("in", 1), ("in", 2)])
    # the moved partitions resume where the first daemon's commit left them
    second.process(second.io.poll(0))
    for tp in [("in", 1), ("in", 2)]:
        assert kafka.committed[tp] == read_before[tp] > 0
        assert second.io.positions[tp] == read_before[tp] + 7  # one batch further
    for daemon in (first, second):
        drain(daemon)
        daemon.checkpoint("interval")
    for daemon in (first, second):
        follow(daemon)
        assert total_state(daemon) == offline(final, texts)
        assert daemon.live.to_state()["docs"] == offline(final, texts)["docs"]
    unlabelled = [orjson.loads(r.value)["id"] for r in kafka.all("in")
                  if "label" not in orjson.loads(r.value)]
    assert Counter(key for key, _ in outputs(kafka)) == Counter(unlabelled)


def test_a_partition_taken_over_right_after_its_owner_committed_keeps_that_commit(tmp_path):
    """The previous owner commits on revocation, and the broker writes that transaction's
    markers a moment after commit_transaction returns: the new owner, given the partition
    within that moment, must read the slice to that commit (its offsets are the ones the
    partition resumes at), not to the read_committed end it sees first."""
    kafka, texts, final = _stream(7, n=120, partitions=2)
    first = make_daemon(settings_for(), kafka, transactional_id="a")
    for _ in range(3):
        first.process(first.io.poll(0))
    first.checkpoint("interval")
    second = make_daemon(settings_for(), kafka, transactional_id="b")
    second.io.pending_assignment = []
    second.io.poll(0)
    first.process(first.io.poll(0))  # learned, not committed yet
    kafka.marker_lag = 3  # the revocation's commit stays invisible for three end queries
    first.io.rebalance([("in", 0)])
    first.process(first.io.poll(0))  # revokes (commits), keeps in:0
    second.io.rebalance([("in", 1)])
    second.process(second.io.poll(0))  # takes in:1 over, resumes at that commit's offset
    assert second.io.settled == [[("in", 1)]]
    kafka.write_markers()
    kafka.marker_lag = 0
    for daemon in (first, second):
        drain(daemon)
        daemon.checkpoint("interval")
    assert changelog_state(kafka) == offline(final, texts)
    for daemon in (first, second):
        follow(daemon)
        assert total_state(daemon) == offline(final, texts)


def test_a_zombie_with_the_same_transactional_id_is_fenced_and_writes_nothing(tmp_path):
    kafka, _, _ = _stream(2, n=40, partitions=1)
    zombie = make_daemon(settings_for(), kafka, transactional_id="same")
    zombie.process(zombie.io.poll(0))
    make_daemon(settings_for(), kafka, transactional_id="same")  # its replacement
    with pytest.raises(FencedError):
        zombie.checkpoint("interval")
    # and a zombie's loop ends with the fenced exit code at its first commit
    loop = make_daemon(settings_for(), kafka, transactional_id="again")
    make_daemon(settings_for(), kafka, transactional_id="again")
    assert loop.run() == FENCED_EXIT_CODE
    assert kafka.all("out") == [] and kafka.committed == {}
    assert all(not part for part in kafka.topics["streamnb-in-changelog"])


def test_an_undecodable_changelog_record_stops_the_daemon_naming_it(tmp_path):
    kafka, _, _ = _stream(3, n=20, partitions=2)
    daemon = make_daemon(settings_for(), kafka)
    drain(daemon)
    daemon.checkpoint("interval")
    kafka.append("streamnb-in-changelog", b"garbage", key=b"[1,\"token\",\"x\"]", partition=1)
    with pytest.raises(ChangelogError, match=r"changelog streamnb-in-changelog:1 offsets \d+"):
        make_daemon(settings_for(), kafka)


def test_the_global_model_holds_every_partitions_labels_on_every_daemon(tmp_path):
    kafka, texts, final = _stream(11, n=90, partitions=2)
    metrics = RecordingMetrics()
    a = make_daemon(settings_for(), kafka, transactional_id="a", metrics=metrics)
    a.io.pending_assignment = [("in", 0)]
    b = make_daemon(settings_for(), kafka, transactional_id="b")
    b.io.pending_assignment = [("in", 1)]
    for daemon in (a, b):
        drain(daemon)
        daemon.checkpoint("interval")
    follow(a)
    follow(b)
    assert a.live.to_state() == b.live.to_state()
    assert total_state(a) == total_state(b) == offline(final, texts)
    staleness = metrics.names("set_global_model_staleness")
    assert staleness and staleness[-1][1] == 0  # caught up: no changelog record left to read
    kafka.append("in", message("late", "win cash", "spam"), partition=1)
    drain(b)
    b.checkpoint("interval")
    follow(a)
    assert a.live.to_state() == b.live.to_state()


def test_revoked_partition_stays_in_the_global_model_and_comes_back_on_reassignment(tmp_path):
    kafka, texts, final = _stream(1, n=60, partitions=2)
    daemon = make_daemon(settings_for(), kafka)
    drain(daemon)
    both = daemon.live.to_state()
    daemon.io.rebalance([("in", 0)])
    daemon.io.poll(0)
    assert set(daemon.slices) == {"in:0"} and set(daemon.parked) == {"in:1"}
    assert daemon.live.to_state() == both  # in:1 is now a remote slice, still predicting
    assert changelog_state(kafka) == offline(final, texts)
    daemon.io.rebalance([("in", 0), ("in", 1)])
    daemon.io.poll(0)
    assert daemon.live.to_state()["docs"] == both["docs"]
    assert total_state(daemon) == offline(final, texts)


def test_restart_after_clean_shutdown_relearns_nothing(tmp_path):
    kafka, texts, final = _stream(2, n=80)
    config = settings_for()
    daemon = make_daemon(config, kafka)
    drain(daemon)
    daemon.checkpoint("shutdown")
    before = total_state(daemon)
    n_out = len(kafka.all("out"))

    metrics = RecordingMetrics()
    again = make_daemon(config, kafka, metrics)
    drain(again)
    assert metrics.names("learned") == []
    assert total_state(again) == before == offline(final, texts)
    assert len(kafka.all("out")) == n_out


def test_a_rebalance_that_never_completes_ends_the_loop_with_code_3(tmp_path):
    from dataclasses import replace

    from streamnb.config import KafkaSettings

    kafka, _, _ = _stream(5, n=20)
    base = settings_for()
    config = replace(
        base, kafka=replace(base.kafka, stall_seconds=0.2, poll_timeout_ms=10)
    )
    assert isinstance(config.kafka, KafkaSettings)
    daemon = make_daemon(config, kafka)
    drain(daemon)
    # The group takes the partitions away and never gives an assignment back.
    daemon.io.on_revoked(list(daemon.io.assigned), False)
    daemon.io.assigned = []
    assert daemon.run() == 3
    assert daemon.io.closed
    # what was read before the revocation was committed on revocation
    assert kafka.committed[("in", 0)] > 0


def test_lost_partitions_end_the_loop_for_a_restart_without_committing(tmp_path):
    kafka, _, _ = _stream(5, n=30, partitions=1)
    daemon = make_daemon(settings_for(), kafka)
    daemon.process(daemon.io.poll(0))
    daemon.io.on_revoked(list(daemon.io.assigned), True)
    assert daemon.run() == 3
    assert kafka.committed == {} and kafka.all("out") == []


def test_lag_is_reported_for_every_assigned_partition_even_without_new_records(tmp_path):
    # After a rebalance a caught-up partition returns no records; the lag dashboard still
    # needs its series, so lag is reported for the assignment, not for the batch.
    kafka, _, _ = _stream(3, n=40, partitions=2)
    metrics = RecordingMetrics()
    daemon = make_daemon(settings_for(), kafka, metrics=metrics)
    drain(daemon)
    daemon.checkpoint("interval")
    daemon.io.rebalance([("in", 0), ("in", 1)])
    assert daemon.io.poll(0) == []
    drain(daemon)
    metrics.calls.clear()
    daemon.report_lag()
    assert sorted(metrics.names("set_lag")) == [("in", 0, 0), ("in", 1, 0)]
    kafka.append("in", message("late", "win cash", "spam"), partition=1)
    daemon.report_lag()
    assert ("in", 1, 1) in metrics.names("set_lag")


def test_an_undecodable_record_read_while_running_ends_the_loop_with_code_5(tmp_path):
    from dataclasses import replace

    kafka, _, _ = _stream(4, n=30, partitions=2)
    base = settings_for()
    config = replace(base, kafka=replace(base.kafka, poll_timeout_ms=10))
    daemon = make_daemon(config, kafka)
    daemon.io.pending_assignment = [("in", 0)]
    drain(daemon)
    kafka.append("streamnb-in-changelog", b"\xff", key=b'[1,"token","x"]', partition=1)
    daemon.io.rebalance([("in", 0), ("in", 1)])  # in:1's catch-up meets the record
    assert daemon.run() == CHANGELOG_EXIT_CODE
    assert daemon.io.closed
