"""Benchmarks of the state in Kafka, against the real local broker (``scripts/kafka.sh start``).

    python -m bench.bench_state [--bootstrap 127.0.0.1:9092] [--only commits,apply,failover,
                                  scale,rebalance,peer] [--peer DIR] [--rounds 3]
                                  [--strategies range,cooperative-sticky]

1. ``commits``: one daemon (in this process) over a mail stream (SpamAssassin, the Chinese
   set, 20 Newsgroups: about 31k mails), committing every 100 records. For the commit after
   1k, 10k and 30k mails: changelog records and bytes written, the commit's time, the
   vocabulary, and the size the whole state has then (the slice's ``to_state()`` and its
   feedback store as JSON, what a full checkpoint rewrites). A commit must follow the tokens
   the last 100 mails touched, not the vocabulary.
2. ``apply``: CPU to apply a slice's changelog records to a remote reader (``Partitions``:
   the slice and the global model) against CPU to learn the messages that wrote them (SMS,
   commits of 100).
3. ``failover``: two daemons (subprocesses) on a 2-partition input; partition 0 holds a slice
   of about 500k tokens. kill -9 of its owner, then: time to the first prediction of a probe on
   partition 0 (the survivor takes it after the session timeout) and the changelog records and
   seconds its catch-up took; and a replacement with the killed one's member id, which fences
   it and takes the partition back at once (restoring every slice from the changelog first).
4. ``scale``: SMS (x2, 11k records) on a 2-partition input through 1 daemon and through 2
   daemons (subprocesses), time from the first record produced to the last offset committed.
5. ``rebalance`` (not in the default ``--only``: about a minute a round and configuration):
   the pause a rebalance causes, for each ``kafka.assignment_strategy`` of ``--strategies``,
   without and with static membership (``group_instance_id``). Two daemons on a 4-partition
   input with probes at 40/s; a third joins; then the daemon holding most is killed -9 and a
   replacement with its member name started at once. From each probe's prediction time:
   event -> first prediction by the new owner on the partitions that moved, and the longest
   gap in predictions on the partitions that did not.
6. ``peer``: throughput (SMS, 1 partition) of this daemon (a transaction per commit) and of a
   peer checkout given with ``--peer DIR`` (e.g. the at-least-once daemon:
   ``git worktree add /tmp/peer <commit>``), each round in a fresh process, alternating;
   medians and their ratio.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_daemon import sms_values  # noqa: E402
from streamnb.config import load_settings  # noqa: E402
from streamnb.daemon import build_daemon  # noqa: E402
from streamnb.daemon.changelog import changed_records  # noqa: E402
from streamnb.daemon.feedback import FeedbackStore  # noqa: E402
from streamnb.daemon.kafka_io import (  # noqa: E402
    committed_offsets,
    create_topics,
    end_offsets,
    produce,
    read_all,
)
from streamnb.daemon.partitions import Partitions  # noqa: E402
from streamnb.metrics import Metrics  # noqa: E402
from streamnb.models import make_model  # noqa: E402
from streamnb.pipeline import build_pipeline  # noqa: E402

DATA = Path(os.environ.get("STREAMNB_DATA", REPO.parent / "shared" / "data"))


def config_text(bootstrap: str, prefix: str, member: str = "member", extra: str = "",
                strategy: str = "range", static: bool = True) -> str:
    instance = f"{prefix}-{member}" if static else ""
    return f"""
[kafka]
bootstrap_servers = "{bootstrap}"
input_topics = ["{prefix}-in"]
output_topic = "{prefix}-out"
dead_letter_topic = "{prefix}-dlq"
group_id = "{prefix}-group"
group_instance_id = "{instance}"
assignment_strategy = "{strategy}"
session_timeout_ms = 6000
poll_timeout_ms = 100
[metrics]
port = 0
[logging]
level = "info"
format = "json"
{extra}
"""


def topics(bootstrap: str, prefix: str, partitions: int) -> str:
    create_topics(bootstrap, {f"{prefix}-in": partitions, f"{prefix}-out": 1,
                              f"{prefix}-dlq": 1})
    return f"{prefix}-in"


# ---------------------------------------------------------------------- the mail stream
def mail_values(seed: int = 1) -> list[tuple[bytes, bytes]]:
    """Raw mails of SpamAssassin, the Chinese set and 20 Newsgroups, 80% labelled."""
    rng = random.Random(seed)
    out = []
    for corpus in ("spamassassin", "chinese-spam", "20newsgroups"):
        folder = DATA / corpus
        labels = {}
        for line in (folder / "index").read_text().splitlines():
            label, member = line.split(" ", 1)
            labels[member] = label
        with tarfile.open(folder / "messages.tar.gz") as tar:
            for member in tar.getmembers():
                if not (member.isfile() and member.name in labels):
                    continue
                msg_id = f"{corpus}/{member.name}"
                obj = {"id": msg_id, "raw_b64": __import__("base64").b64encode(
                    tar.extractfile(member).read()).decode()}
                if rng.random() < 0.8:
                    obj["label"] = labels[member.name]
                out.append((msg_id.encode(), orjson.dumps(obj)))
    return out


class _Commits(logging.Handler):
    def __init__(self):
        super().__init__()
        self.events: list[dict] = []

    def emit(self, record):
        if getattr(record, "event", None) == "checkpoint":
            self.events.append({"bytes": record.bytes, "seconds": record.seconds,
                                "changelog_records": record.changelog_records,
                                "records": record.records})


def commits(bootstrap: str) -> None:
    values = mail_values()
    prefix = f"bench-state-{uuid.uuid4().hex[:8]}"
    topic = topics(bootstrap, prefix, 1)
    produce(bootstrap, topic, values)
    settings = load_settings(text=config_text(bootstrap, prefix, extra=(
        "[checkpoint]\nevery_messages = 100\nevery_seconds = 3600.0\n"
        # every mail label allowed (20 Newsgroups has 20 classes)
        "[model]\nlabels = []\n")), environ={})
    handler = _Commits()
    logging.getLogger("streamnb.daemon").addHandler(handler)
    logging.getLogger("streamnb.daemon").setLevel(logging.INFO)
    daemon = build_daemon(settings, metrics=Metrics())
    marks = [1000, 10_000, 30_000]
    done = 0
    rows = []
    try:
        while done < len(values) and marks:
            done += daemon.step(200)
            daemon.follow_changelog()
            if daemon.checkpoint_due():
                daemon.checkpoint("interval")
                if done >= marks[0]:
                    marks.pop(0)
                    event = handler.events[-1]
                    part = next(iter(daemon.parts.slices.values()))
                    full = len(orjson.dumps(part.model.to_state())) + len(orjson.dumps(
                        part.store.to_state()))
                    rows.append((done, event, daemon.live.vocabulary_size, full))
    finally:
        daemon.close()
        logging.getLogger("streamnb.daemon").removeHandler(handler)
    print(f"commits of 100 mails into the changelog ({len(values)} mails in the stream):")
    for done, event, vocab, full in rows:
        print(f"  after {done:6d} mails, the commit of the last {event['records']}: "
              f"{event['changelog_records']:6d} changelog records, "
              f"{event['bytes'] / 1024:8.1f} KiB in {event['seconds'] * 1000:6.1f} ms; "
              f"vocabulary {vocab:7d} tokens; the whole state then {full / 2**20:6.1f} MiB "
              f"(ratio commit/state {event['bytes'] / full:.4f})")


# ---------------------------------------------------------------------- apply vs learn
def apply_vs_learn(rounds: int) -> None:
    values = sms_values()
    pipeline = build_pipeline({"kind": "multinomial"}, {})
    from streamnb.codec import decode

    examples = []
    for _, value, _ in values:
        message = decode(value)
        examples.append((message.id, pipeline.prepare(message).x, message.label))
    learn_times, apply_times = [], []
    n_records = 0
    for _ in range(rounds):
        model, store = make_model("multinomial"), FeedbackStore()
        model.mark_changes()
        store.mark_changes()
        commits_ = []
        started = time.process_time()
        for i, (msg_id, x, label) in enumerate(examples):
            if label is not None:
                model.learn_one(x, label)
            store.remember(msg_id, "in:0", x, label)
            if i % 100 == 99:
                commits_.append(changed_records(model, store))
                model.mark_changes()
                store.mark_changes()
        commits_.append(changed_records(model, store))
        learn_times.append(time.process_time() - started)
        reader = Partitions(lambda: make_model("multinomial"), lambda key: FeedbackStore())
        reader.slice("in:1").model.learn_one({"other": 1}, "ham")  # a second slice: a sum
        started = time.process_time()
        for records in commits_:
            reader.apply_remote("in:0", records)
        apply_times.append(time.process_time() - started)
        n_records = sum(map(len, commits_))
        assert reader.slices["in:0"].model.to_state() == model.to_state()
    n = len(examples)
    learn, apply = statistics.median(learn_times), statistics.median(apply_times)
    print(f"SMS ({n} messages, commits of 100: {n_records} changelog records), median of "
          f"{rounds}: learn + remember + records {learn / n * 1e6:.1f} us/message; "
          f"apply to a remote slice and the global model {apply / n * 1e6:.1f} us/message "
          f"({apply / n_records * 1e6:.1f} us/record); ratio apply/learn {apply / learn:.2f}")


# ---------------------------------------------------------------------- subprocess daemons
class Daemon:
    def __init__(self, bootstrap: str, prefix: str, member: str, workdir: Path,
                 extra: str = "", cwd: Path = REPO, strategy: str = "range",
                 static: bool = True):
        self.log = workdir / f"{member}-{uuid.uuid4().hex[:6]}.log"
        config = workdir / f"{member}.toml"
        config.write_text(config_text(bootstrap, prefix, member, extra, strategy, static))
        self.started = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
                cwd=cwd, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(cwd)})

    def events(self, name: str) -> list[dict]:
        out = []
        for line in self.log.read_bytes().splitlines():
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict) and event.get("event") == name:
                out.append(event)
        return out

    def wait(self, name: str, timeout: float = 120, count: int = 1) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.events(name)
            if len(events) >= count:
                return events
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n"
                                   + self.log.read_text()[-2000:])
            time.sleep(0.02)
        raise RuntimeError(f"no {name} event within {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def wait_committed(bootstrap: str, prefix: str, timeout: float = 600) -> float:
    """Seconds until the group has committed every input partition to its end."""
    topic = f"{prefix}-in"
    ends = end_offsets(bootstrap, topic)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        have = committed_offsets(bootstrap, f"{prefix}-group", topic)
        if all(have.get(tp, 0) >= end for tp, end in ends.items()):
            return time.monotonic() - started
        time.sleep(0.05)
    raise RuntimeError("not committed in time")


def first_prediction(bootstrap: str, prefix: str, msg_id: str, timeout: float = 120) -> None:
    def seen(records):
        return any(r.key == msg_id.encode() for r in records)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if seen(read_all(bootstrap, f"{prefix}-out", until=seen, timeout=2)):
            return
    raise RuntimeError(f"no prediction for {msg_id}")


def failover(bootstrap: str) -> None:
    prefix = f"bench-fo-{uuid.uuid4().hex[:8]}"
    topic = topics(bootstrap, prefix, 2)
    rng = random.Random(3)
    # partition 0: 2,500 labelled messages of 200 new tokens each (500k tokens in its slice)
    big = []
    for i in range(2500):
        text = " ".join(f"t{i}x{j}" for j in range(200))
        big.append((f"big-{i}".encode(), orjson.dumps(
            {"id": f"big-{i}", "text": text, "label": rng.choice(["ham", "spam"])}), 0))
    small = [(f"s-{i}".encode(), orjson.dumps(
        {"id": f"s-{i}", "text": "hello there", "label": "ham"}), 1) for i in range(100)]
    produce(bootstrap, topic, big + small)
    workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
    daemons = []
    try:
        a = Daemon(bootstrap, prefix, "a", workdir)
        daemons.append(a)
        a.wait("assigned")
        wait_committed(bootstrap, prefix)
        b = Daemon(bootstrap, prefix, "b", workdir)
        daemons.append(b)
        restore = b.wait("state_restored")[0]
        wait_for_split = time.monotonic() + 60
        while time.monotonic() < wait_for_split:  # a holds in:0 and b in:1, or the reverse
            held_a = [e for e in a.events("assigned") if e["partitions"]]
            held_b = [e for e in b.events("assigned") if e["partitions"]]
            if held_b and len(held_a) >= 2:
                break
            time.sleep(0.05)
        owner, survivor = (a, b) if f"{topic}:0" in held_a[-1]["partitions"] else (b, a)
        before = len(survivor.events("assigned"))
        owner.proc.kill()
        killed = time.monotonic()
        owner.proc.wait()
        produce(bootstrap, topic, [(b"probe-0", orjson.dumps({"id": "probe-0",
                                                               "text": "t1x1 t2x2"}), 0)])
        first_prediction(bootstrap, prefix, "probe-0")
        to_prediction = time.monotonic() - killed
        moved = survivor.wait("assigned", count=before + 1)[-1]
        print(f"failover, slice of partition 0: {restore['records']} changelog records read "
              f"by a starting daemon in {restore['seconds']:.2f} s")
        print(f"  kill -9 of its owner -> first prediction on partition 0 by the survivor: "
              f"{to_prediction:.2f} s (session timeout 6 s; catch-up of the slice it held "
              f"already: {moved['records']} records, {moved['seconds']:.3f} s)")
        # the same, by a replacement with the dead daemon's member id
        owner2 = survivor
        before = len(owner2.events("assigned"))
        owner2.proc.kill()
        killed = time.monotonic()
        owner2.proc.wait()
        member = "a" if owner2 is a else "b"
        replacement = Daemon(bootstrap, prefix, member, workdir)
        daemons.append(replacement)
        produce(bootstrap, topic, [(b"probe-1", orjson.dumps({"id": "probe-1",
                                                               "text": "t3x3"}), 0)])
        first_prediction(bootstrap, prefix, "probe-1")
        to_prediction = time.monotonic() - killed
        restored = replacement.wait("state_restored")[0]
        print(f"  kill -9 of the last daemon, replacement with its member id (fences it, no "
              f"session wait): first prediction after {to_prediction:.2f} s, of which "
              f"reading every slice from the changelog {restored['seconds']:.2f} s "
              f"({restored['records']} records)")
    finally:
        for daemon in daemons:
            daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------- rebalance pauses
REBALANCE_PARTITIONS = 4
PROBES_PER_SECOND = 40  # 10 a second on each partition: a gap of about 0.1 s is no pause


def _held(daemon: Daemon) -> set[str]:
    """The partitions ``daemon`` holds now, from its assigned/revoked/lost log events."""
    held: set[str] = set()
    for line in daemon.log.read_bytes().splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "assigned":
            held |= set(event["partitions"])
        elif event.get("event") in ("revoked", "lost"):
            held -= set(event["partitions"])
    return held


def _event_time(daemon: Daemon, name: str) -> float:
    """Epoch seconds of ``daemon``'s first ``name`` log event."""
    import datetime as dt
    return dt.datetime.fromisoformat(daemon.wait(name)[0]["time"]).timestamp()


def _settled(live: list[Daemon], timeout: float = 90) -> dict[str, Daemon]:
    """Wait until the live daemons hold every partition, each once, unchanged for 2 s."""
    deadline = time.monotonic() + timeout
    stable_since, last = None, None
    while time.monotonic() < deadline:
        owners = {tp: d for d in live for tp in _held(d)}
        complete = (len(owners) == REBALANCE_PARTITIONS
                    and sum(len(_held(d)) for d in live) == REBALANCE_PARTITIONS)
        shape = {tp: id(d) for tp, d in owners.items()}
        if complete and shape == last:
            if time.monotonic() - stable_since >= 2:
                return owners
        else:
            stable_since, last = time.monotonic(), shape if complete else None
        time.sleep(0.1)
    raise RuntimeError("the group did not settle")


def _pauses(times: dict[str, list[float]], start: float, end: float,
            moved: set[str]) -> tuple[list[float], list[float]]:
    """For the moved partitions: seconds from ``start`` to the end of their longest gap in
    predictions (when the new owner resumed them); for the others: their longest gap; both
    over the predictions made between ``start`` - 1 s and ``end``."""
    to_resume, kept_gaps = [], []
    for tp, stamps in sorted(times.items()):
        window = [t for t in stamps if start - 1 <= t <= end]
        gaps = [(b - a, b) for a, b in zip(window, window[1:], strict=False)] or [(0.0, start)]
        gap, resumed = max(gaps)
        if tp in moved:
            to_resume.append(resumed - start)
        else:
            kept_gaps.append(gap)
    return to_resume, kept_gaps


def rebalance_round(bootstrap: str, strategy: str, static: bool) -> dict[str, list[float]]:
    """Two daemons on a 4-partition input with a steady stream of probes; a third daemon
    joins; then one daemon is killed -9 and a replacement (same member name, so with static
    membership the same ``group_instance_id``) is started at once. Every probe's prediction
    time (its output record's timestamp, read_committed) gives each partition's pause."""
    import threading

    prefix = f"bench-rb-{uuid.uuid4().hex[:8]}"
    topic = topics(bootstrap, prefix, REBALANCE_PARTITIONS)
    workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
    stop = threading.Event()
    sent: list[int] = []

    def probes():
        seq = 0
        while not stop.is_set():
            part = seq % REBALANCE_PARTITIONS
            key = f"p{part}-{seq}".encode()
            yield key, orjson.dumps({"id": key.decode(), "text": "hello probe"}), part
            seq += 1

    def run_probes():
        sent.append(produce(bootstrap, topic, probes(), rate=PROBES_PER_SECOND))

    daemons: list[Daemon] = []
    out: dict[str, list[float]] = {}
    try:
        def start(member: str) -> Daemon:
            daemon = Daemon(bootstrap, prefix, member, workdir, strategy=strategy,
                            static=static)
            daemons.append(daemon)
            return daemon

        a, b = start("a"), start("b")
        producer = threading.Thread(target=run_probes, daemon=True)
        producer.start()
        _settled([a, b])
        time.sleep(2)
        before = {tp: d for d in (a, b) for tp in _held(d)}
        c = start("c")
        joined = _event_time(c, "state_restored")  # it subscribes right after
        after = _settled([a, b, c])
        join_end = time.time()
        moved_join = {tp for tp in after if after[tp] is not before.get(tp)}
        time.sleep(2)
        victim = max((a, b, c), key=lambda d: len(_held(d)))
        moved_kill = _held(victim)
        victim.proc.kill()
        killed = time.time()
        victim.proc.wait()
        member = {a: "a", b: "b", c: "c"}[victim]
        replacement = start(member)
        _settled([d for d in (a, b, c) if d is not victim] + [replacement])
        time.sleep(2)
        kill_end = time.time()
        stop.set()
        producer.join(timeout=30)
        total = sent[0] if sent else 0
        records = read_all(bootstrap, f"{prefix}-out", until=lambda r: len(r) >= total,
                           timeout=60)
        times: dict[str, list[float]] = {f"{topic}:{p}": [] for p in range(REBALANCE_PARTITIONS)}
        for record in records:
            prediction = orjson.loads(record.value)
            times[f"{prediction['topic']}:{prediction['partition']}"].append(
                record.timestamp_ms / 1000)
        for stamps in times.values():
            stamps.sort()
        out["join_moved"], out["join_kept"] = _pauses(times, joined, join_end, moved_join)
        out["kill_moved"], out["kill_kept"] = _pauses(times, killed, kill_end, moved_kill)
        out["duplicates"] = [len(records) - len({r.key for r in records})]
        out["moved_on_join"] = [len(moved_join)]
    finally:
        stop.set()
        for daemon in daemons:
            daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def rebalance(bootstrap: str, rounds: int, strategies: list[str]) -> None:
    configs = [(strategy, static) for strategy in strategies for static in (False, True)]
    results: dict[tuple[str, bool], dict[str, list[float]]] = {c: {} for c in configs}
    for _ in range(rounds):
        for config in configs:  # alternating, so load drifts hit every configuration
            for name, values in rebalance_round(bootstrap, *config).items():
                results[config].setdefault(name, []).extend(values)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}" if values else "-"

    print(f"rebalance pauses, {REBALANCE_PARTITIONS} partitions, {PROBES_PER_SECOND} probes/s, "
          f"session timeout 6 s, medians over {rounds} round(s) (seconds; 'moved': event -> "
          f"first prediction by the new owner, 'kept': longest gap in predictions on the "
          f"partitions that did not move):")
    for (strategy, static), r in results.items():
        print(f"  {strategy:18s} static={'yes' if static else 'no ':3s}  "
              f"join: moved {med(r['join_moved'])} kept {med(r['join_kept'])} "
              f"(max {max(r['join_kept'], default=0):.2f}; {med(r['moved_on_join'])} moved)  "
              f"kill -9 + restart: moved {med(r['kill_moved'])} kept {med(r['kill_kept'])} "
              f"(max {max(r['kill_kept'], default=0):.2f})  "
              f"duplicate predictions {int(sum(r['duplicates']))}")


def scale(bootstrap: str, rounds: int) -> None:
    base = sms_values()
    values = [(k, v) for k, v, _ in base] + [
        (k + b"-2", v.replace(b'"id":"sms-', b'"id":"two-')) for k, v, _ in base]
    results: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for n in (1, 2):
            prefix = f"bench-scale-{uuid.uuid4().hex[:8]}"
            topics(bootstrap, prefix, 2)
            workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
            daemons = [Daemon(bootstrap, prefix, f"m{i}", workdir) for i in range(n)]
            try:
                for daemon in daemons:
                    daemon.wait("state_restored")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not all(
                        any(e["partitions"] for e in d.events("assigned")) for d in daemons):
                    time.sleep(0.05)
                started = time.monotonic()
                produce(bootstrap, f"{prefix}-in", values)
                wait_committed(bootstrap, prefix)
                results[n].append(time.monotonic() - started)
            finally:
                for daemon in daemons:
                    daemon.stop()
                shutil.rmtree(workdir, ignore_errors=True)
    one, two = statistics.median(results[1]), statistics.median(results[2])
    print(f"scale, SMS x2 ({len(values)} records, 2 partitions), produce -> all committed, "
          f"median of {rounds}: 1 daemon {len(values) / one:,.0f} msg/s, 2 daemons "
          f"{len(values) / two:,.0f} msg/s (ratio {one / two:.2f}); {os.cpu_count()} CPUs, "
          f"the broker on the same host  [1: {', '.join(f'{t:.1f}' for t in results[1])} s; "
          f"2: {', '.join(f'{t:.1f}' for t in results[2])} s]")


def peer(bootstrap: str, peer_dir: Path, rounds: int) -> None:
    values = sms_values()
    topic = f"bench-peer-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 1, f"{topic}-out": 1, f"{topic}-dlq": 1})
    produce(bootstrap, topic, ((k, v) for k, v, _ in values))
    times: dict[str, list[float]] = {"this": [], "peer": []}
    for _ in range(rounds):
        for name, cwd in (("this", REPO), ("peer", peer_dir)):
            out = subprocess.run(
                [sys.executable, "-m", "bench.bench_daemon", "--child", "daemon", topic,
                 str(len(values)), "--bootstrap", bootstrap],
                cwd=cwd, env={**os.environ, "PYTHONPATH": str(cwd)}, capture_output=True,
                text=True, timeout=600, check=True)
            times[name].append(float(out.stdout.split()[0]))
    this, other = statistics.median(times["this"]), statistics.median(times["peer"])
    n = len(values)
    print(f"throughput SMS ({n} records, 1 partition, defaults), median of {rounds}: this "
          f"daemon {n / this:,.0f} msg/s, peer {peer_dir} {n / other:,.0f} msg/s, "
          f"ratio this/peer {other / this:.3f}  [this: "
          + ", ".join(f"{n / t:,.0f}" for t in times["this"]) + "; peer: "
          + ", ".join(f"{n / t:,.0f}" for t in times["peer"]) + "]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--only", default="commits,apply,failover,scale")
    parser.add_argument("--peer", type=Path, help="a checkout of another streamnb to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--strategies", default="range,cooperative-sticky",
                        help="kafka.assignment_strategy values the rebalance part compares")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    print(f"streamnb state benchmark, {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}")
    if "apply" in only:
        apply_vs_learn(args.rounds)
    if "commits" in only:
        commits(args.bootstrap)
    if "failover" in only:
        failover(args.bootstrap)
    if "scale" in only:
        scale(args.bootstrap, args.rounds)
    if "rebalance" in only:
        rebalance(args.bootstrap, args.rounds, args.strategies.split(","))
    if args.peer is not None:
        peer(args.bootstrap, args.peer, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
