"""Incremental (cooperative-sticky) rebalances as the daemon sees them through kafka-python's
listener: a revocation that leaves partitions in place ends the daemon's rebalance, one that
leaves none does not (the daemon must be given partitions, or exit for its supervisor)."""

from __future__ import annotations

import orjson
import pytest

from streamnb.daemon.kafka_io import TopicPartition, _Listener
from tests.daemon.fakes import FakeKafka, make_daemon, settings_for


class _Consumer:
    def __init__(self, kept):
        self.kept = kept

    def assignment(self):
        return set(self.kept)


class _IO:
    """What the listener uses of KafkaIO, recording the daemon callbacks it makes."""

    def __init__(self, incremental: bool, kept):
        self.incremental = incremental
        self.consumer = _Consumer(kept)
        self.calls: list = []
        self.on_revoked = lambda tps, lost: self.calls.append(("revoked", tps, lost))
        self.on_assigned = lambda tps: self.calls.append(("assigned", tps))


@pytest.mark.parametrize(
    ("incremental", "kept", "calls"),
    [
        # cooperative, partitions kept: the join is over for this member
        (True, [TopicPartition("in", 0)], [("revoked", [("in", 1)], False), ("assigned", [])]),
        # cooperative, nothing kept: the stall timer runs until partitions come
        (True, [], [("revoked", [("in", 1)], False)]),
        # eager: the revocation starts the rebalance; the assignment ends it
        (False, [TopicPartition("in", 0)], [("revoked", [("in", 1)], False)]),
    ],
)
def test_an_incremental_revocation_that_keeps_partitions_ends_the_rebalance(
    incremental, kept, calls
):
    io = _IO(incremental, kept)
    _Listener(io).on_partitions_revoked({TopicPartition("in", 1)})
    assert io.calls == calls


def test_the_daemon_keeps_processing_what_it_kept_after_an_incremental_revocation(tmp_path):
    kafka = FakeKafka({"in": 2})
    daemon = make_daemon(settings_for(tmp_path), kafka)
    daemon.on_assigned([("in", 0), ("in", 1)])
    kafka.append("in", orjson.dumps({"id": "a", "text": "win cash", "label": "spam"}),
                 partition=0)
    daemon.process(daemon.io.poll(0))
    # as the listener calls it for a cooperative revocation of in:1 that keeps in:0
    daemon.on_revoked([("in", 1)])
    daemon.on_assigned([])
    assert daemon.rebalancing_since is None and not daemon._rebalance_stalled()
    assert set(daemon.slices) == {"in:0"} and daemon.offsets == {"in:0": 1}
    assert daemon.live.n_updates == 1  # the kept slice was neither dropped nor read again


@pytest.mark.parametrize(
    ("generation_at_revocation", "joined", "stalled"),
    [
        (4, None, True),  # still joining past stall_seconds: exit for the supervisor
        (4, 4, True),  # the generation it gave partitions up in: the rejoin never finished
        (4, 5, False),  # a later generation that added nothing (no listener is called)
        (None, 1, False),  # a standby daemon: its first join gave it no partition
    ],
)
def test_a_member_that_joined_a_later_generation_without_partitions_is_not_stalled(
    tmp_path, generation_at_revocation, joined, stalled
):
    kafka = FakeKafka({"in": 2})
    daemon = make_daemon(settings_for(tmp_path), kafka)
    if generation_at_revocation is not None:
        daemon.on_assigned([("in", 0), ("in", 1)])
        daemon.io.generation_joined = generation_at_revocation
        daemon.on_revoked([("in", 0), ("in", 1)])  # a cooperative revocation keeping none
    daemon.io.generation_joined = joined
    daemon.rebalancing_since -= daemon.settings.kafka.stall_seconds + 1
    assert daemon._rebalance_stalled() is stalled
    assert (daemon.rebalancing_since is None) is not stalled
