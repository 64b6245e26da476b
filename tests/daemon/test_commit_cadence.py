"""When the daemon commits: every ``checkpoint.every_messages`` records or
``checkpoint.every_seconds``, the interval stretched after a slow commit so that commits
cannot take most of the loop's time (``streamnb.daemon.commit.COMMIT_SPACING``)."""

from __future__ import annotations

import time

import orjson
import pytest

from streamnb.config import CheckpointSettings
from streamnb.daemon.commit import COMMIT_SPACING, MAX_STRETCH
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
