"""When the daemon commits: every ``checkpoint.every_messages`` records or
``checkpoint.every_seconds``, the interval stretched after a slow commit so that commits
cannot take most of the loop's time (``streamnb.daemon.commit.COMMIT_SPACING``)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import orjson
import pytest
from kafka.structs import ConsumerGroupMetadata, MemberState

from streamnb.config import CheckpointSettings
from streamnb.daemon.commit import COMMIT_SPACING, MAX_STRETCH
from streamnb.daemon.kafka_io import KafkaIO
from tests.daemon.fakes import FakeKafka, make_daemon, settings_for


@pytest.fixture
def daemon(tmp_path):
    kafka = FakeKafka({"in": 1})
    for i in range(5):
        kafka.append("in", orjson.dumps({"id": f"m{i}", "text": "win cash", "label": "spam"}))
    daemon = make_daemon(settings_for(
        tmp_path, checkpoint=CheckpointSettings(every_messages=1000, every_seconds=1.0)), kafka)
    daemon.process(daemon.io.poll(0))
    assert daemon.pending == 5
    return daemon


def _due_after(daemon, seconds: float) -> bool:
    daemon.last_checkpoint = time.monotonic() - seconds
    return daemon.checkpoint_due()


def test_after_a_fast_commit_the_interval_is_every_seconds(daemon):
    daemon.last_commit_seconds = 0.01
    assert not _due_after(daemon, 0.9)
    assert _due_after(daemon, 1.05)


def test_a_slow_commit_spaces_the_next_one(daemon):
    daemon.last_commit_seconds = 0.5  # the next one comes COMMIT_SPACING x 0.5 s after it
    assert not _due_after(daemon, COMMIT_SPACING * 0.5 - 0.1)
    assert _due_after(daemon, COMMIT_SPACING * 0.5 + 0.05)


def test_the_stretch_is_bounded(daemon):
    daemon.last_commit_seconds = 60.0
    assert not _due_after(daemon, MAX_STRETCH * 1.0 - 0.5)
    assert _due_after(daemon, MAX_STRETCH * 1.0 + 0.05)


def test_every_messages_still_commits_at_once(daemon):
    daemon.last_commit_seconds = 60.0
    daemon.pending = 1000
    assert _due_after(daemon, 0.0)


def test_nothing_pending_is_never_due(daemon):
    daemon.checkpoint("test")
    assert daemon.pending == 0
    assert not _due_after(daemon, 3600.0)


def test_a_commit_records_its_duration(daemon):
    before = time.perf_counter()
    daemon.checkpoint("test")
    assert 0.0 < daemon.last_commit_seconds <= time.perf_counter() - before


@pytest.mark.parametrize("cause", ["every_seconds", "every_messages"])
def test_no_commit_while_a_join_is_in_flight(daemon, cause):
    """A commit made while the JoinGroup is unanswered would carry the generation the broker
    may just have left: the daemon waits for the join (the next poll completes it)."""
    daemon.last_commit_seconds = 0.01
    if cause == "every_messages":
        daemon.pending = 1000
    daemon.io.join_in_flight = True
    assert not _due_after(daemon, 5.0)
    daemon.io.join_in_flight = False
    assert _due_after(daemon, 5.0)


def test_a_long_join_holds_the_commit_until_the_transaction_is_half_its_timeout_old(daemon):
    """The broker aborts a transaction older than kafka.transaction_timeout_ms: a join held
    open for a dead member's session must not hold the commit that long."""
    half = daemon.settings.kafka.transaction_timeout_ms / 2000
    daemon.last_commit_seconds = 0.01
    daemon.io.join_in_flight = True
    daemon.io.transaction_seconds = half - 0.5
    assert not _due_after(daemon, 5.0)
    daemon.io.transaction_seconds = half
    assert _due_after(daemon, 5.0)


@pytest.mark.parametrize(("state", "joining"), [
    ("REBALANCING", True), ("STABLE", False), ("UNJOINED", False)])
def test_kafka_io_reports_a_join_in_flight_from_the_member_state(state, joining):
    membership = ConsumerGroupMetadata("g", 7, "m-1", None, getattr(MemberState, state))
    io = SimpleNamespace(consumer=SimpleNamespace(group_metadata=lambda: membership))
    assert KafkaIO.joining(io) is joining


def _watch_the_join(io):
    """Make ``io``'s next poll complete the join in flight; return (whether a join was in
    flight at each poll, at each commit)."""
    polls, commits = [], []
    poll, commit = io.poll, io.commit

    def poll_completing_the_join(timeout_ms):
        polls.append(io.join_in_flight)
        io.join_in_flight = False  # this poll's JoinGroup answer arrives
        return poll(timeout_ms)

    def commit_noting_the_join(offsets):
        commits.append(io.join_in_flight)
        return commit(offsets)

    io.poll, io.commit = poll_completing_the_join, commit_noting_the_join
    return polls, commits


def test_a_stop_during_a_join_commits_once_the_join_has_completed(daemon):
    """SIGTERM while a JoinGroup is unanswered: the final commit waits for the poll that
    completes the join, where it would carry the generation the broker is leaving (refused
    as a zombie's: exit 4, and the work since the last commit redone by the next owner)."""
    daemon.io.join_in_flight = True
    polls, commits = _watch_the_join(daemon.io)
    daemon.request_stop()
    assert daemon.run() == 0
    assert polls == [True] and commits == [False]
    assert daemon.pending == 0 and daemon.io.kafka.committed == {("in", 0): 5}


def test_a_stop_commits_without_a_poll_when_no_join_is_in_flight(daemon):
    polls, commits = _watch_the_join(daemon.io)
    daemon.request_stop()
    assert daemon.run() == 0
    assert polls == [] and commits == [False]


def test_a_join_that_never_completes_holds_the_stop_s_commit_only_for_the_patience(daemon):
    daemon.io.join_in_flight = True
    daemon.join_patience = lambda: 0.2
    daemon.io.poll = lambda timeout_ms: []  # the join stays in flight
    commits = []
    commit = daemon.io.commit
    daemon.io.commit = lambda offsets: (commits.append(time.monotonic()), commit(offsets))
    daemon.request_stop()
    stopped = time.monotonic()
    assert daemon.run() == 0
    assert len(commits) == 1 and 0.2 <= commits[0] - stopped < 5.0
