"""Several daemons in one group on the real broker: one model, exactly-once outputs, failover
and scaling without replay, fencing, and the changelog checks at start."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streamnb.codec import Message
from streamnb.daemon.changelog import changelog_topic
from streamnb.daemon.kafka_io import (
    committed_offsets,
    create_topics,
    end_offsets,
    produce,
    read_all,
)
from streamnb.pipeline import build_pipeline
from tests.integration.harness import (
    DaemonProcess,
    changelog_model,
    committed,
    feedback,
    once_each,
    sms,
    started_partitions,
    value,
    wait_caught_up,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(400)]

PARTITIONS = 6


def offline_model(final: dict[str, str], texts: dict[str, str]):
    pipeline = build_pipeline({"kind": "multinomial"}, {})
    model = pipeline.model
    for msg_id in sorted(final):
        model.learn_one(pipeline.prepare(Message(id=msg_id, text=texts[msg_id])).x, final[msg_id])
    return model, pipeline


def labelled_stream(rows, seed: int):
    """(key, value) records: labelled and unlabelled messages, late labels and corrections,
    and the final label of each id."""
    rng = random.Random(seed)
    stream, final, texts = [], {}, {}
    for msg_id, label, text in rows:
        texts[msg_id] = text
        if rng.random() < 0.7:
            stream.append((msg_id.encode(), value(msg_id, text, label)))
            final[msg_id] = label
        else:
            stream.append((msg_id.encode(), value(msg_id, text)))
        if rng.random() < 0.15 and len(texts) > 10:  # a late label, or a correction
            old = rng.choice(list(texts)[:-5])
            new = rng.choice(["ham", "spam"])
            stream.append((old.encode(), feedback(old, new)))
            final[old] = new
    return stream, final, texts


class Group:
    """The daemons of one group, each with its own config (member id, transactional id)."""

    def __init__(self, tmp_path: Path, bootstrap: str, prefix: str,
                 assignment_strategy: str = "range", partitions: int = PARTITIONS):
        self.tmp_path, self.bootstrap, self.prefix = tmp_path, bootstrap, prefix
        self.assignment_strategy, self.partitions = assignment_strategy, partitions
        self.live: dict[str, DaemonProcess] = {}
        self.all: list[DaemonProcess] = []
        self.started = 0

    def start(self, member: str | None = None) -> DaemonProcess:
        self.started += 1
        member = member or f"m{self.started}"
        directory = self.tmp_path / f"d{self.started}-{member}"
        directory.mkdir()
        config = write_config(directory, self.bootstrap, self.prefix, member=member,
                              every_seconds=0.3, every_messages=200,
                              assignment_strategy=self.assignment_strategy)
        daemon = DaemonProcess(config, directory / "daemon.log")
        daemon.member = member
        self.live[member] = daemon
        self.all.append(daemon)
        return daemon

    def kill(self, member: str) -> None:
        self.live.pop(member).kill()

    def holdings(self, daemon: DaemonProcess) -> set[str]:
        """The partitions a daemon holds now, replayed from its assigned/revoked log lines."""
        held: set[str] = set()
        for event in daemon.events():
            if event.get("event") == "assigned":
                held |= set(event["partitions"])
            elif event.get("event") in ("revoked", "lost"):
                held -= set(event["partitions"])
        return held

    def wait_all_hold_partitions(self, timeout: float = 90.0) -> None:
        def every_daemon_holds():
            for daemon in self.live.values():
                daemon._check_alive()
            held = [self.holdings(d) for d in self.live.values()]
            return all(held) and len(set().union(*held)) == self.partitions and sum(
                map(len, held)) == self.partitions

        wait_for(every_daemon_holds, timeout,
                 f"each of {sorted(self.live)} to hold partitions, all {self.partitions} held "
                 "once",
                 every=0.2)


def progress(bootstrap: str, prefix: str) -> int:
    return sum(committed(bootstrap, prefix).values())


@pytest.mark.parametrize("assignment_strategy", ["range", "cooperative-sticky"])
def test_many_daemons_one_model_exactly_once_with_kills_and_scaling(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir, assignment_strategy
):
    rows = sms(data_dir)[:3600]
    stream, final, texts = labelled_stream(rows, seed=5)
    unlabelled = [k.decode() for k, v in stream if b'"label"' not in v and b'"feedback"' not in v]
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": PARTITIONS,
                                    f"{topic_prefix}-out": 2, f"{topic_prefix}-dlq": 1})
    topic = f"{topic_prefix}-in"
    thirds = [stream[: len(stream) // 3], stream[len(stream) // 3: 2 * len(stream) // 3],
              stream[2 * len(stream) // 3:]]
    group = Group(tmp_path, kafka_bootstrap, topic_prefix, assignment_strategy)
    rng = random.Random()

    # 1 daemon: it learns the first third; every partition is committed before any kill.
    produce(kafka_bootstrap, topic, thirds[0])
    group.start()
    wait_for(lambda: len(committed(kafka_bootstrap, topic_prefix)) == PARTITIONS, 90,
             "a commit of every partition", every=0.2)

    # The rest arrives while the group changes: at a pace that keeps every daemon busy.
    rest = thirds[1] + thirds[2]
    producer = threading.Thread(
        target=produce, args=(kafka_bootstrap, topic, rest), kwargs={"rate": 150.0})
    producer.start()

    # 1 -> 3: two daemons start together while the first is busy.
    group.start()
    group.start()
    group.wait_all_hold_partitions()

    # kill -9 a random daemon at random moments of the rest; replace it (by a daemon with the
    # same member id: it fences the dead one's transaction at once, or by a new member: the
    # group waits for the dead one's session to expire).
    done = len(thirds[0])
    targets = sorted(done + rng.uniform(0.1, 0.8) * len(rest) for _ in range(3))
    for i, target in enumerate(targets):
        wait_for(lambda t=target: progress(kafka_bootstrap, topic_prefix) >= t, 120,
                 f"the commits to pass {target:.0f}", every=0.1)
        victim = rng.choice(sorted(group.live))
        group.kill(victim)
        group.start(victim if i % 2 == 0 else None)
        group.wait_all_hold_partitions()
    producer.join()
    # the kills landed while records were still arriving and being processed
    assert progress(kafka_bootstrap, topic_prefix) >= targets[-1]

    # 3 -> 2: one daemon stops (SIGTERM: it commits, then leaves).
    leaving = rng.choice(sorted(group.live))
    code, _ = group.live.pop(leaving).terminate(timeout=30)
    assert code == 0
    group.wait_all_hold_partitions()
    wait_caught_up(kafka_bootstrap, topic_prefix, list(group.live.values()), timeout=180)

    # The changelog holds exactly the offline model of every final label, each once.
    want, pipeline = offline_model(final, texts)
    got = changelog_model(kafka_bootstrap, topic_prefix)
    assert got.n_updates == want.n_updates == len(final)
    assert got.to_state() == want.to_state()

    # Every daemon predicts with that same global model: probes on every partition are scored
    # with all labels (once each daemon has read its peers' last commits).
    def probes_scored_by_the_full_model(round_=[0]):  # noqa: B006 - a counter across calls
        round_[0] += 1
        probes = {f"probe-{round_[0]}-{p}": (rows[p][2], p) for p in range(PARTITIONS)}
        produce(kafka_bootstrap, topic,
                [(m.encode(), value(m, text), p) for m, (text, p) in probes.items()])
        out = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                       until=lambda r: probes.keys() <= {x.key.decode() for x in r},
                       timeout=30)
        scored = {r.key.decode(): orjson.loads(r.value) for r in out
                  if r.key.decode() in probes}
        for m, prediction in scored.items():
            if prediction["model_updates"] != len(final):
                return False
            assert prediction["model"] == "global"
            assert prediction["model_partitions"] == PARTITIONS
            x = pipeline.prepare(Message(id=m, text=probes[m][0])).x
            expected = want.predict_proba_one(x)
            for label, p in prediction["probabilities"].items():
                assert abs(p - expected[label]) < 1e-9, (m, prediction, expected)
        return len(scored) == PARTITIONS

    wait_for(probes_scored_by_the_full_model, 90, "probes scored by the whole model", every=1)

    # A read_committed reader sees each unlabelled id's prediction exactly once.
    out = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                   until=lambda r: len(r) >= len(unlabelled), timeout=60)
    predictions = [r for r in out if not r.key.startswith(b"probe-")]
    assert not (why := once_each(kafka_bootstrap, topic_prefix, predictions, unlabelled,
                                 group.all)), why

    # No daemon read an input partition from its start after its first assignment: only the
    # first daemon started partitions (it held them all, and every one was committed before
    # anyone else joined or was killed). The first may start one twice: a join that settles in
    # two rebalances before its first commit starts it again, correctly, at start_offset.
    assert set(started_partitions(group.all[:1])) == {f"{topic}:{p}" for p in range(PARTITIONS)}
    assert started_partitions(group.all[1:]) == []
    for daemon in group.live.values():
        daemon.terminate(timeout=30)


def test_a_daemon_joining_a_cooperative_group_takes_only_its_share_and_nothing_twice(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    """kafka.assignment_strategy = "cooperative-sticky": a third daemon joins two busy ones;
    only the partitions it takes are revoked (the others are never given up, so they are
    processed through the rebalance), and still every label is learned once and every
    unlabelled id predicted once."""
    partitions = 4
    rows = sms(data_dir)[:1800]
    stream, final, texts = labelled_stream(rows, seed=11)
    unlabelled = [k.decode() for k, v in stream if b'"label"' not in v and b'"feedback"' not in v]
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": partitions,
                                    f"{topic_prefix}-out": 1, f"{topic_prefix}-dlq": 1})
    topic = f"{topic_prefix}-in"
    group = Group(tmp_path, kafka_bootstrap, topic_prefix,
                  assignment_strategy="cooperative-sticky", partitions=partitions)
    produce(kafka_bootstrap, topic, stream[:300])
    first, second = group.start(), group.start()
    group.wait_all_hold_partitions()
    wait_for(lambda: len(committed(kafka_bootstrap, topic_prefix)) == partitions, 90,
             "a commit of every partition", every=0.2)
    before = {daemon.member: group.holdings(daemon) for daemon in (first, second)}
    seen = {daemon.member: len(daemon.events()) for daemon in (first, second)}

    producer = threading.Thread(
        target=produce, args=(kafka_bootstrap, topic, stream[300:]), kwargs={"rate": 150.0})
    producer.start()
    wait_for(lambda: progress(kafka_bootstrap, topic_prefix) >= 450, 60, "records in flight",
             every=0.1)
    third = group.start()
    group.wait_all_hold_partitions()
    producer.join()
    wait_caught_up(kafka_bootstrap, topic_prefix, list(group.live.values()), timeout=120)

    taken = group.holdings(third)
    assert len(taken) == 1  # sticky: 2 + 2 -> 2 + 1 + 1
    for daemon in (first, second):
        revoked = {tp for e in daemon.events()[seen[daemon.member]:]
                   if e.get("event") in ("revoked", "lost") for tp in e["partitions"]}
        # what it gave up is what the newcomer took; what it kept it never gave up
        assert revoked == before[daemon.member] & taken
        assert group.holdings(daemon) == before[daemon.member] - taken
    assert started_partitions([third]) == []

    want, _ = offline_model(final, texts)
    got = changelog_model(kafka_bootstrap, topic_prefix)
    assert got.n_updates == want.n_updates == len(final)
    assert got.to_state() == want.to_state()
    out = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                   until=lambda r: len(r) >= len(unlabelled), timeout=60)
    assert not (why := once_each(kafka_bootstrap, topic_prefix, out, unlabelled,
                                 group.all)), why
    for daemon in group.live.values():
        daemon.terminate(timeout=30)


@pytest.mark.parametrize("assignment_strategy", ["range", "cooperative-sticky"])
def test_a_standby_daemon_without_partitions_stays_up_and_takes_over(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir, assignment_strategy
):
    """One partition, two daemons: the second gets nothing and must wait as a standby, not
    exit as stalled after ``stall_seconds`` (with cooperative-sticky no listener tells it its
    join is over), then take the partition over when the first stops."""
    stall_seconds = 5.0
    rows = sms(data_dir)[:400]
    stream, final, texts = labelled_stream(rows, seed=5)
    unlabelled = [k.decode() for k, v in stream if b'"label"' not in v and b'"feedback"' not in v]
    create_topics(kafka_bootstrap, {f"{topic_prefix}-{s}": 1 for s in ("in", "out", "dlq")})
    topic = f"{topic_prefix}-in"
    produce(kafka_bootstrap, topic, stream[:200])

    def daemon(member: str) -> DaemonProcess:
        directory = tmp_path / member
        directory.mkdir()
        config = write_config(directory, kafka_bootstrap, topic_prefix, member=member,
                              every_seconds=0.3, assignment_strategy=assignment_strategy,
                              stall_seconds=stall_seconds)
        return DaemonProcess(config, directory / "daemon.log", max_restarts=0)

    first = daemon("first")
    first.wait_assigned(timeout=60)
    standby = daemon("standby")
    wait_caught_up(kafka_bootstrap, topic_prefix, first, timeout=60)
    time.sleep(3 * stall_seconds)
    standby._check_alive()
    assert not [e for e in standby.events() if e.get("event") == "stalled"]
    assert started_partitions([standby]) == []

    code, _ = first.terminate(timeout=30)
    assert code == 0
    standby.wait_assigned(timeout=60)
    produce(kafka_bootstrap, topic, stream[200:])
    wait_caught_up(kafka_bootstrap, topic_prefix, standby, timeout=90)
    assert standby.terminate(timeout=30)[0] == 0
    want, _ = offline_model(final, texts)
    assert changelog_model(kafka_bootstrap, topic_prefix).to_state() == want.to_state()
    out = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                   until=lambda r: len(r) >= len(unlabelled), timeout=60)
    assert Counter(r.key.decode() for r in out) == Counter(unlabelled)


def test_a_zombie_with_the_same_transactional_id_is_fenced_and_writes_nothing(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    rows = sms(data_dir)[:1500]
    stream, final, texts = labelled_stream(rows, seed=9)
    unlabelled = [k.decode() for k, v in stream if b'"label"' not in v and b'"feedback"' not in v]
    create_topics(kafka_bootstrap, {f"{topic_prefix}-{s}": n for s, n in
                                    (("in", 2), ("out", 1), ("dlq", 1))})
    topic = f"{topic_prefix}-in"
    produce(kafka_bootstrap, topic, stream[: len(stream) // 2])
    group = Group(tmp_path, kafka_bootstrap, topic_prefix)
    zombie = group.start("same")
    wait_for(lambda: progress(kafka_bootstrap, topic_prefix) > 0, 60, "a first commit")
    os.kill(zombie.proc.pid, signal.SIGSTOP)  # frozen mid-work: a zombie
    try:
        group.live.pop("same")
        replacement = group.start("same")  # same member id, same transactional id
        produce(kafka_bootstrap, topic, stream[len(stream) // 2:])
        wait_caught_up(kafka_bootstrap, topic_prefix, replacement, timeout=120)
    finally:
        os.kill(zombie.proc.pid, signal.SIGCONT)
    assert zombie.proc.wait(timeout=60) == 4  # fenced
    assert any(e.get("event") == "exiting" and e.get("code") == 4 for e in zombie.events())
    wait_caught_up(kafka_bootstrap, topic_prefix, replacement, timeout=60)
    replacement.terminate()
    want, _ = offline_model(final, texts)
    assert changelog_model(kafka_bootstrap, topic_prefix).to_state() == want.to_state()
    out = read_all(kafka_bootstrap, f"{topic_prefix}-out",
                   until=lambda r: len(r) >= len(unlabelled), timeout=60)
    assert Counter(r.key.decode() for r in out) == Counter(unlabelled)


def test_a_partition_taken_over_during_its_previous_owners_commit_keeps_that_commit(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    """The previous owner of a partition has sent its last commit (the slice's changelog
    records and the input offset) and is still committing when a daemon takes the partition
    over: a zombie finishing its commit, or the broker writing the markers of a commit just
    decided (commit_transaction returns before they are written). The daemon resumes at that
    commit's offset, so it must hold that commit's state: it waits for the transaction, then
    reads the changelog to its end."""
    from streamnb.config import KafkaSettings
    from streamnb.daemon.changelog import all_records
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.daemon.kafka_io import KafkaIO, ensure_changelogs, open_admin
    from streamnb.daemon.watchdog import Watchdog

    rows = sms(data_dir)[:200]
    before, after = rows[:120], rows[120:]
    topic, group = f"{topic_prefix}-in", f"{topic_prefix}-group"
    create_topics(kafka_bootstrap, {topic: 1, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    changelog = changelog_topic(group, topic)
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, input_topics=(topic,),
                             group_id=group)
    ensure_changelogs(settings, {topic: changelog})
    produce(kafka_bootstrap, topic,
            [(m.encode(), value(m, text, label), 0) for m, label, text in before])

    # The previous owner: its slice of the first 120 labels and their offset, in a
    # transaction whose commit waits until released.
    pipeline = build_pipeline({"kind": "multinomial"}, {})
    for m, label, text in before:
        pipeline.model.learn_one(pipeline.prepare(Message(id=m, text=text)).x, label)
    owner = KafkaIO(settings, lambda tps: None, lambda tps, lost: None, {topic: changelog},
                    f"{topic_prefix}-previous-owner", Watchdog(120.0))
    release = threading.Event()
    commit_now = owner.producer.commit_transaction

    def commit_when_released():
        release.wait(60)
        commit_now()

    owner.producer.commit_transaction = commit_when_released
    for key, record in all_records(pipeline.model, FeedbackStore()):
        owner.send(changelog, key, record, partition=0)
    committer = threading.Thread(target=owner.commit, args=({(topic, 0): len(before)},))
    committer.start()
    try:
        wait_for(lambda: committed_offsets_pending(kafka_bootstrap, group, topic), 30,
                 "the previous owner's offsets in its open transaction")
        daemon = Group(tmp_path, kafka_bootstrap, topic_prefix, partitions=1).start()
        admin = open_admin(settings, 10.0)
        stable_at: list[float] = []

        def at_its_partition():
            """Taken over (it did not wait for the commit), or 0.5 s after the group became
            stable (it is waiting in its takeover, up to SETTLE_SECONDS): then the previous
            owner commits."""
            if any(e.get("event") == "assigned" for e in daemon.events()):
                return True
            if not stable_at and admin.describe_groups([group])[group]["group_state"] == \
                    "Stable":
                stable_at.append(time.monotonic())
            return bool(stable_at) and time.monotonic() - stable_at[0] > 0.5

        try:
            wait_for(at_its_partition, 60, "the daemon at its partition", every=0.05)
        finally:
            admin.close()
    finally:
        release.set()
        committer.join(timeout=60)
        owner.close()
    produce(kafka_bootstrap, topic,
            [(m.encode(), value(m, text, label), 0) for m, label, text in after])
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon, timeout=120)
    assert not started_partitions([daemon])  # it resumed at the previous owner's offset
    want, _ = offline_model({m: label for m, label, _ in rows}, {m: t for m, _, t in rows})
    got = changelog_model(kafka_bootstrap, topic_prefix)
    assert got.n_updates == want.n_updates == len(rows)
    assert got.to_state() == want.to_state()
    daemon.terminate(timeout=30)


def committed_offsets_pending(bootstrap: str, group: str, topic: str) -> bool:
    """Whether a transaction holds offsets of ``group`` not committed yet (a read_committed
    offset fetch waits for them: it is still waiting after a second)."""
    result: list = []
    probe = threading.Thread(target=lambda: result.append(
        committed_offsets(bootstrap, group, topic)), daemon=True)
    probe.start()
    probe.join(timeout=1.0)
    return probe.is_alive()


def run_once(tmp_path, kafka_bootstrap, topic_prefix, timeout=60):
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix)
    daemon = DaemonProcess(config, tmp_path / "daemon.log", max_restarts=0)
    code = daemon.proc.wait(timeout=timeout)
    return code, daemon.log_path.read_text()


@pytest.mark.parametrize("problem", ["partitions", "policy"])
def test_a_changelog_topic_that_cannot_hold_the_state_is_refused_naming_it(
    tmp_path, kafka_bootstrap, topic_prefix, problem
):
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 3})
    name = changelog_topic(f"{topic_prefix}-group", f"{topic_prefix}-in")
    if problem == "partitions":
        create_topics(kafka_bootstrap, {name: 2})
    else:
        create_topics(kafka_bootstrap, {name: 3})  # the broker default: cleanup.policy=delete
    code, log = run_once(tmp_path, kafka_bootstrap, topic_prefix)
    assert code == 2
    expected = "has 2 partition(s) but input topic" if problem == "partitions" else \
        "has cleanup.policy=delete"
    assert f"changelog topic {name} {expected}" in log


def test_an_undecodable_changelog_record_stops_the_daemon_naming_it(
    tmp_path, kafka_bootstrap, topic_prefix
):
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 2, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    config = write_config(tmp_path, kafka_bootstrap, topic_prefix)
    daemon = DaemonProcess(config, tmp_path / "first.log")
    daemon.wait_assigned()
    produce(kafka_bootstrap, f"{topic_prefix}-in",
            [(b"a", value("a", "win cash now", "spam"), 1)])
    wait_caught_up(kafka_bootstrap, topic_prefix, daemon)
    assert daemon.terminate()[0] == 0
    name = changelog_topic(f"{topic_prefix}-group", f"{topic_prefix}-in")
    produce(kafka_bootstrap, name, [(b'[1,"token","x"]', b"\x00 not json", 1)])
    bad = end_offsets(kafka_bootstrap, name)[(name, 1)] - 1
    code, log = run_once(tmp_path, kafka_bootstrap, topic_prefix)
    assert code == 5
    assert f"changelog {name}:1 offsets" in log and str(bad) in log
    assert "undecodable changelog record" in log


def test_daemons_started_together_all_end_up_holding_partitions_under_load(
    tmp_path, kafka_bootstrap, topic_prefix
):
    """Three daemons started at the same moment, on a machine kept busy, three times over:
    each ends up holding partitions (a daemon whose rejoin stalls exits 3 and its supervisor
    restarts it; none sits in the group without an assignment)."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for round_ in range(3):
            prefix = f"{topic_prefix}r{round_}"
            create_topics(kafka_bootstrap, {f"{prefix}-in": PARTITIONS, f"{prefix}-out": 1,
                                            f"{prefix}-dlq": 1})
            directory = tmp_path / f"round-{round_}"
            directory.mkdir()
            group = Group(directory, kafka_bootstrap, prefix)
            for _ in range(3):
                group.start()
            group.wait_all_hold_partitions(timeout=120)
            for daemon in group.live.values():
                daemon.terminate(timeout=30)
    finally:
        burner.kill()
        burner.wait()
