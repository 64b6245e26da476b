"""The pipelined loop (each batch prepared while the one before is processed) against the
in-memory Kafka: the same models, store, offsets and outputs as the unpipelined loop, also
when a rebalance lands between the poll of a batch and its processing, and on a stop."""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.daemon import Daemon
from streamnb.daemon.prepare import InProcessPreparer, ProcessPreparer
from tests.daemon.fakes import (
    CountModel,
    FakeIO,
    RecordingMetrics,
    WordPipeline,
    changelog_state,
    drain,
    make_daemon,
    settings_for,
    total_state,
)
from tests.daemon.test_loop import _stream, offline

pytestmark = pytest.mark.timeout(300)

POISON = [b"not json", b'{"id": "p", "label": "spam"}', b'{"id": "c", "text": "CRASH"}', None,
          b'{"id": "u", "text": "win", "label": "eggs"}']


def stream_with_poison(seed: int, partitions: int):
    kafka, texts, final = _stream(seed, n=90, partitions=partitions)
    rng = random.Random(seed)
    for value in POISON:
        kafka.append("in", value, partition=rng.randrange(partitions))
    return kafka, texts, final


def pipelined_daemon(config, kafka, batch=7, child=False, metrics=None) -> Daemon:
    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, config.kafka, on_assigned, on_revoked, batch=batch)

    max_bytes = config.limits.max_value_bytes
    preparer = (ProcessPreparer(WordPipeline, (), max_bytes) if child
                else InProcessPreparer(WordPipeline(), max_bytes))
    return Daemon(config, WordPipeline(), new_model=CountModel,
                  metrics=metrics or RecordingMetrics(),
                  io_factory=io_factory, preparer=preparer, pipelined=True)


def step_until_caught_up(daemon: Daemon, rebalance_at=(), max_steps=10_000) -> None:
    """The body of Daemon.run over the fake: step, commit when due; the fake's group
    rebalances (same assignment) at the steps in ``rebalance_at``, right after the step."""
    for step in range(max_steps):
        daemon.step(0)
        daemon.report_assignments()
        if daemon.checkpoint_due():
            daemon.checkpoint("interval")
        if step in rebalance_at:
            daemon.io.rebalance(list(daemon.io.assigned))
        if (daemon.io.caught_up() and not daemon.in_flight
                and daemon.io.pending_assignment is None):
            return
    raise AssertionError("the pipelined loop never caught up")


OBSERVED = ("observe_labelled", "feedback_outcome", "dead_lettered", "unlearned", "relabelled")
TALLIED = ("consumed", "learned", "prediction_emitted")


def observable(kafka, daemon, metrics, config):
    """Everything the two loops must agree on (latencies aside, which are measurements)."""
    tallies: Counter = Counter()
    for name, *args in metrics.calls:
        if name in TALLIED:
            *what, n = args
            tallies[(name, *what)] += n
    predictions = [(r.key, {k: v for k, v in orjson.loads(r.value).items()
                            if k != "latency_seconds"}) for r in kafka.all("out")]
    return {
        "model": total_state(daemon),
        "changelog": changelog_state(kafka),
        "committed": dict(kafka.committed),
        "offsets": dict(daemon.offsets),
        "stores": {key: orjson.dumps(part.store.to_state())
                   for key, part in sorted(daemon.parts.slices.items())},
        "predictions": predictions,
        "dead letters": [(r.key, r.value, r.headers) for r in kafka.all("dlq")],
        "observed": [call for call in metrics.calls if call[0] in OBSERVED],
        "tallies": tallies,
    }


def reference(tmp_path, seed, partitions, batch):
    kafka, texts, final = stream_with_poison(seed, partitions)
    config = settings_for(tmp_path / "reference")
    metrics = RecordingMetrics()
    daemon = make_daemon(config, kafka, metrics, batch=batch)
    drain(daemon)
    daemon.checkpoint("test")
    assert total_state(daemon) == offline(final, texts)
    return observable(kafka, daemon, metrics, config)


def pipelined(tmp_path, seed, partitions, batch, rebalance_at=(), child=False, mutant=False):
    kafka, _, _ = stream_with_poison(seed, partitions)
    config = settings_for(tmp_path / "pipelined")
    metrics = RecordingMetrics()
    daemon = pipelined_daemon(config, kafka, batch=batch, child=child, metrics=metrics)
    if mutant:  # the loop without its rebalance guard: every batch in flight is processed
        def unguarded(in_flight, prepared):
            daemon.process(in_flight.records, prepared)
            return len(in_flight.records)

        daemon._process_in_flight = unguarded
    try:
        step_until_caught_up(daemon, rebalance_at)
        daemon.checkpoint("test")
    finally:
        daemon.close()
    return observable(kafka, daemon, metrics, config)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), partitions=st.integers(1, 3), batch=st.integers(1, 20),
       rebalance_at=st.sets(st.integers(0, 60), max_size=4))
def test_the_pipelined_loop_ends_where_the_unpipelined_one_does(
    tmp_path_factory, seed, partitions, batch, rebalance_at
):
    tmp_path = tmp_path_factory.mktemp("pipelined")
    expected = reference(tmp_path, seed, partitions, batch)
    assert pipelined(tmp_path, seed, partitions, batch, rebalance_at) == expected


def with_a_batch_in_flight(tmp_path):
    """(kafka, config, metrics, daemon): a pipelined daemon over two partitions, four steps in,
    with a batch polled and not yet processed."""
    kafka, _, _ = stream_with_poison(7, 2)
    config = settings_for(tmp_path / "pipelined")
    metrics = RecordingMetrics()
    daemon = pipelined_daemon(config, kafka, metrics=metrics)
    for _ in range(4):
        daemon.step(0)
    assert daemon.in_flight and daemon.pending
    return kafka, config, metrics, daemon


def test_a_rebalance_between_the_poll_of_a_batch_and_its_processing_drops_it(tmp_path):
    expected = reference(tmp_path, 7, 2, 7)
    kafka, config, metrics, daemon = with_a_batch_in_flight(tmp_path)
    before = dict(daemon.offsets)
    daemon.io.rebalance(list(daemon.io.assigned))
    assert daemon.step(0) == 0  # the poll ran the rebalance: the batch in flight is dropped
    daemon.report_assignments()  # the partitions resume at their committed offsets
    assert daemon.offsets == before
    # the revocation commit covers exactly the processed records
    assert {f"{t}:{p}": offset for (t, p), offset in kafka.committed.items()} == before
    step_until_caught_up(daemon)
    daemon.checkpoint("test")
    assert observable(kafka, daemon, metrics, config) == expected


def test_a_dropped_batch_is_read_again_even_if_the_rebalance_kept_its_partitions(tmp_path):
    # A rebalance that leaves the partitions assigned and does not seek them: the guard's own
    # seek back to the next unprocessed offsets is what makes the dropped records come again.
    expected = reference(tmp_path, 7, 2, 7)
    kafka, config, metrics, daemon = with_a_batch_in_flight(tmp_path)
    daemon.generation += 1  # what on_assigned/on_revoked do, with no seek and no revocation
    assert daemon.step(0) == 0
    step_until_caught_up(daemon)
    daemon.checkpoint("test")
    assert observable(kafka, daemon, metrics, config) == expected


def test_without_the_generation_guard_the_same_rebalances_are_seen_twice(tmp_path):
    # The check on the check: the loop with the guard removed processes a batch that the
    # assignment's seek will deliver again, and the outputs and metrics show it.
    expected = reference(tmp_path, 7, 2, 7)
    assert pipelined(tmp_path / "guarded", 7, 2, 7, rebalance_at={3, 9}) == expected
    assert pipelined(tmp_path / "mutant", 7, 2, 7, rebalance_at={3, 9}, mutant=True) != expected


def test_the_child_preparer_in_the_loop_gives_the_same_result(tmp_path):
    expected = reference(tmp_path, 11, 1, 20)
    assert pipelined(tmp_path, 11, 1, 20, rebalance_at={2, 5}, child=True) == expected


@pytest.mark.parametrize("child", [False, True])
def test_a_stop_with_a_batch_in_flight_processes_it_then_checkpoints(tmp_path, child):
    expected = reference(tmp_path, 3, 1, 7)
    kafka, _, _ = stream_with_poison(3, 1)
    config = settings_for(tmp_path / "pipelined")
    metrics = RecordingMetrics()
    daemon = pipelined_daemon(config, kafka, child=child, metrics=metrics)
    poll = daemon.io.poll
    polls = 0

    def poll_then_stop(timeout_ms):
        nonlocal polls
        polls += 1
        records = poll(timeout_ms)
        if polls == 5:
            daemon.request_stop()  # SIGTERM arrives while a batch is in flight
        return records

    daemon.io.poll = poll_then_stop
    assert daemon.run() == 0
    assert daemon.io.closed and not daemon.in_flight
    assert daemon.offsets == {"in:0": 5 * 7}  # every polled record was processed
    assert kafka.committed == {("in", 0): 35}  # committed by the shutdown

    again = pipelined_daemon(config, kafka, metrics=metrics)
    step_until_caught_up(again)
    again.checkpoint("test")
    assert observable(kafka, again, metrics, config) == expected


def test_a_dead_preparer_fails_the_loop_without_a_checkpoint(tmp_path):
    import os
    import signal

    from streamnb.daemon.prepare import PreparerError

    kafka, _, _ = stream_with_poison(5, 1)
    config = settings_for(tmp_path)
    daemon = pipelined_daemon(config, kafka, child=True)
    daemon.step(0)
    daemon.step(0)
    os.kill(daemon.preparer.pid, signal.SIGKILL)
    with pytest.raises(PreparerError, match="prepare process"):
        daemon.run()
    assert daemon.failed and daemon.io.closed
    # Results the child sent before it died may have been processed and committed;
    # nothing is committed from the failure on.
    committed = dict(kafka.committed)
    with pytest.raises(RuntimeError, match="refusing to commit"):
        daemon.checkpoint("after the failure")
    assert kafka.committed == committed
