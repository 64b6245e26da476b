"""Daemon benchmarks against the real local broker (``scripts/kafka.sh start``).

    python -m bench.bench_daemon [--rounds 3] [--streams sms,sms-10x,spamassassin] [--skip-latency]

1. Throughput: the daemon loop (poll, decode, featurize, predict, learn, emit, commit) over
   the SMS stream, the SMS stream ten times over (``sms-10x``: 55,740 records, the copies
   under new ids, a loop of several commits at steady state; on the 5,574 records of one
   copy the daemon's fixed cost a run, its final commit and the first polls' warm-up, is
   about a fifth of its time) and the SpamAssassin stream, each next to a bare kafka-python
   consumer reading the same topic
   (the ceiling: ``bench.bare_consumer``, in a process that imports kafka-python only; both
   check record CRCs with the same implementation, printed first),
   measured alternately in the same run, each round in a fresh process, timed from the
   moment the first poll returned records to the last record (the daemon's processing of
   that first batch and its final commit included); medians and the ratio are printed,
   and, where the broker runs on this machine (``scripts/kafka.sh``'s, or ``--broker-pid``),
   the broker's CPU a record while each of the two ran.
2. Latency at a steady 1,000 msg/s: the SMS and the SpamAssassin records
   (``--latency-streams``) are produced at that rate to a running daemon (a
   ``python -m streamnb run`` subprocess); latency = prediction record timestamp - input
   record timestamp (both CreateTime, same host clock), p50 and p99 over unlabelled messages;
   and produce->readable: when a ``read_committed`` reader (in a thread of the benchmark)
   received the prediction - the input's CreateTime, which includes the wait for the
   transaction's commit (``checkpoint.every_seconds``).
3. Memory: peak RSS (``VmHWM``) of a daemon subprocess after it has consumed the whole
   SpamAssassin stream.
4. ``--model-step``: CPU time of the model's prequential step (predict, then learn the
   labelled) per record of SMS and of SpamAssassin mail, featurized as the daemon does: one
   message at a time against the numpy path and the batch step (``prequential_many`` over
   polls of 500), alternating, in-process; MultinomialNB with the tuned mail options.
   ``--fake-loop``: CPU and wall time per SMS record of the daemon loop over the test suite's
   in-memory Kafka: record by record, runs scored with the batch step, and runs with decoding
   and featurizing in the prepare process (its CPU reported apart). Both need no broker:
   ``--streams '' --skip-latency --model-step --fake-loop``.
5. ``--breakdown``: where the daemon loop's time goes on the SMS stream, per stage, in
   microseconds per record (wall time of each call, in-process, one round).
6. ``--prepare-process``: a third contender in the throughput rounds, the daemon with
   ``pipeline.prepare_process = true`` (decoding and featurizing in a child process);
   ``--baseline DIR`` another, the daemon of another checkout (the code before a change, say);
   with both, the baseline runs with the prepare process too, and both print the CPU their
   daemon's own process spent a message (the children's apart). ``--prepare-processes K``
   gives the contender ``pipeline.prepare_processes = K`` (the baseline keeps its default).
7. ``--floor``: the CPU per record of each stage any daemon built on these parts must run
   (the bare consumer's own, decode and featurize, the model step, the feedback store,
   kafka-python's producer for the predictions, and the changelog records of the state's
   commits, made and produced), each timed on its own, and the best ratio two cores could
   give with that work spread perfectly over them; then that ratio with the broker's CPU
   while the daemon ran added (it shares the cores), where the broker's CPU was read.

Streams: 80% of messages labelled, 20% unlabelled (so predictions are produced; ``--labelled``
sets the share, e.g. 0.5 for half of them labelled), in corpus order; SMS as ``text``,
SpamAssassin as ``raw_b64`` (the original bytes). The daemon runs MultinomialNB with the
tuned mail options (``MAIL_OPTIONS``, named in full in its config).
"""

from __future__ import annotations

import argparse
import base64
import faulthandler
import functools
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamnb.config import load_settings  # noqa: E402
from streamnb.daemon import build_daemon  # noqa: E402
from streamnb.daemon.kafka_io import (  # noqa: E402
    committed_offsets,  # noqa: E402
    create_topics,
    produce,
    read_all,
)
from streamnb.metrics import Metrics  # noqa: E402
from streamnb.models import TEXTBOOK_OPTIONS, MultinomialNB  # noqa: E402
from streamnb.models._text import SHORT_MESSAGE_TOKENS  # noqa: E402
from streamnb.models.presets import MAIL  # noqa: E402

DATA = Path(os.environ.get("STREAMNB_DATA", REPO.parent / "shared" / "data"))


# ---------------------------------------------------------------------- streams
#: The share of each stream's messages that carry their label (``--labelled``, by default
#: ``DEFAULT_LABELLED``); the others are unlabelled, and the daemon publishes a prediction for
#: each.
DEFAULT_LABELLED = 0.8
LABELLED = DEFAULT_LABELLED


def sms_values(seed: int = 1, copies: int = 1) -> list[tuple[bytes, bytes, str]]:
    """The SMS stream; with ``copies`` > 1 it is followed by further copies of itself under
    new ids (``sms-<i>-<copy>``), long enough for a loop of several commits and the
    collector's full collections (the first copy is the stream of ``copies=1``)."""
    rng = random.Random(seed)
    out = []
    lines = (DATA / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8").splitlines()
    for copy in range(copies):
        for i, line in enumerate(lines):
            label, text = line.split("\t", 1)
            msg_id = f"sms-{i}" if copy == 0 else f"sms-{i}-{copy}"
            obj = {"id": msg_id, "text": text}
            if rng.random() < LABELLED:
                obj["label"] = label
            out.append((msg_id.encode(), orjson.dumps(obj), label))
    return out


def spamassassin_values(seed: int = 1) -> list[tuple[bytes, bytes, str]]:
    rng = random.Random(seed)
    folder = DATA / "spamassassin"
    labels = {}
    for line in (folder / "index").read_text().splitlines():
        label, member = line.split(" ", 1)
        labels[member] = label
    blobs = {}
    with tarfile.open(folder / "messages.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name in labels:
                blobs[member.name] = tar.extractfile(member).read()
    out = []
    for member, label in labels.items():
        obj = {"id": member, "raw_b64": base64.b64encode(blobs[member]).decode()}
        if rng.random() < LABELLED:
            obj["label"] = label
        out.append((member.encode(), orjson.dumps(obj), label))
    return out


#: How many times over ``sms-10x`` runs the SMS stream.
SMS_STEADY_COPIES = 10
STREAMS = {"sms": sms_values,
           "sms-10x": functools.partial(sms_values, copies=SMS_STEADY_COPIES),
           "spamassassin": spamassassin_values}


# ---------------------------------------------------------------------- throughput
#: The tuned options for mail: the "mail" preset on top of the textbook options in full, so
#: that every figure keeps meaning the same model whatever the constructor's defaults are.
MAIL_OPTIONS = {**TEXTBOOK_OPTIONS, **MAIL}


def _toml_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else orjson.dumps(value).decode()


#: A ``[kafka]`` line the daemon's config gets (a contender of ``--kafka-setting``).
KAFKA_SETTING_ENV = "STREAMNB_BENCH_KAFKA_SETTING"
#: The prepare contender's ``pipeline.prepare_processes`` (``--prepare-processes``).
PREPARE_PROCESSES_ENV = "STREAMNB_BENCH_PREPARE_PROCESSES"


def setting_lines(line: str) -> str:
    """A ``--kafka-setting`` as the TOML lines the ``[kafka]`` table ends with: ``key = value``
    as it is, ``[table] key = value`` as a table of its own (the config's next table follows).

    >>> setting_lines("max_poll_records = 2000")
    'max_poll_records = 2000'
    >>> setting_lines("[checkpoint] every_messages = 1000")
    '[checkpoint]\\nevery_messages = 1000'
    """
    if line.startswith("["):
        table, _, rest = line.partition("]")
        return f"{table}]\n{rest.strip()}"
    return line


def settings_text(bootstrap: str, topic: str, workdir: Path, group: str) -> str:
    # TOML has no null: an option set to None is left out, which is its default (top_k).
    options = "\n".join(f"{key} = {_toml_value(value)}" for key, value in MAIL_OPTIONS.items()
                         if value is not None)
    return f"""
[model]
kind = "multinomial"
labels = ["ham", "spam"]
[model.options]
{options}
[kafka]
bootstrap_servers = "{bootstrap}"
input_topics = ["{topic}"]
output_topic = "{topic}-out"
dead_letter_topic = "{topic}-dlq"
group_id = "{group}"
group_instance_id = "{group}-member"
{setting_lines(os.environ.get(KAFKA_SETTING_ENV, ""))}
[metrics]
port = 0
[logging]
level = "warning"
"""


def daemon_loop(bootstrap: str, topic: str, n: int, prepare_process: bool = False,
                after_build=None, probe=None, report: dict | None = None) -> float:
    """Seconds for the daemon loop to process ``n`` records, from the moment its first poll
    returned records (their processing included, as the bare consumer's clock starts when its
    first poll has returned), to the end of the final commit. ``after_build()`` runs once the
    daemon is built, before the clock starts (what ``streamnb run`` does there);
    ``probe("start")`` and ``probe("end")`` when the clock starts and stops; ``report`` gets
    ``prepare_wait``, the seconds the daemon waited for its prepare processes."""
    workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
    try:
        text = settings_text(bootstrap, topic, workdir, f"bench-{uuid.uuid4().hex[:8]}")
        if prepare_process:
            processes = int(os.environ.get(PREPARE_PROCESSES_ENV, "1"))
            text += f"\n[pipeline]\nprepare_process = true\nprepare_processes = {processes}\n"
        settings = load_settings(text=text, environ={})
        daemon = build_daemon(settings, metrics=Metrics())
        if after_build is not None:
            after_build()
        started = None
        poll = daemon.io.poll

        def poll_and_start_the_clock(timeout_ms):
            nonlocal started
            records = poll(timeout_ms)
            if records and started is None:
                started = time.perf_counter()
                if probe is not None:
                    probe("start")
            return records

        # Not after the first step: that would leave the first batch's processing (a ninth of
        # the SMS stream in polls of 500) out of the time.
        daemon.io.poll = poll_and_start_the_clock
        done = 0
        try:
            while done < n:
                done += daemon.step(200)  # the loop body of Daemon.run
                daemon.follow_changelog()
                if daemon.checkpoint_due():
                    daemon.checkpoint("interval")
            daemon.drain()
            daemon.checkpoint("end")
            seconds = time.perf_counter() - started
            if probe is not None:
                probe("end")
            if report is not None:
                report["prepare_wait"] = daemon.preparer.waited_seconds
            return seconds
        finally:
            daemon.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def round_ratios(times: list[tuple[float, float]], peer: list[tuple[float, float]]
                 ) -> list[float]:
    """One contender's wall time over its peer's, round by round."""
    return [t / p for (t, _), (p, _) in zip(times, peer, strict=True)]


def round_ratio(times: list[tuple[float, float]], peer: list[tuple[float, float]]) -> float:
    """The median of :func:`round_ratios`: steadier than the ratio of the two medians where
    the machine drifts from round to round (each round's pair ran seconds apart, under the
    same neighbours)."""
    return statistics.median(round_ratios(times, peer))


def _thread_times() -> dict[int, tuple[int, int]]:
    """Nanoseconds each thread of this process has run on a CPU and waited for one (runnable,
    another process on it), from Linux's per-thread schedstat."""
    times = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            run, wait, _ = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
        times[int(tid)] = (int(run), int(wait))
    return times


def wall_split(bootstrap: str, topic: str, n: int, after_build=None, loop=daemon_loop) -> None:
    """Where one daemon loop's wall time goes, per record, with no timers in the loop: the
    main thread's wall time as its time on a CPU, its time runnable but waiting for one (other
    processes on the cores), and the rest, blocked (waiting for the GIL, a lock, or the
    network: a fetch, the commit's round trips); the cyclic collector's share; and the CPU
    of the daemon's other threads (kafka-python's IO threads), which hold the GIL for most of
    theirs. Linux only (``/proc/<pid>/task/<tid>/schedstat``). ``loop``: the daemon's, or
    another with its arguments (``bench.skeleton_loop``)."""
    import gc
    import threading

    main_tid = threading.get_native_id()
    collections_: dict[int, list[float]] = {}
    gc_started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            spent = collections_.setdefault(info["generation"], [0, 0.0])
            spent[0] += 1
            spent[1] += time.perf_counter() - gc_started[0]

    moments: dict[str, tuple] = {}

    def probe(moment: str) -> None:
        if moment == "start":
            gc.callbacks.append(on_gc)
        else:
            gc.callbacks.remove(on_gc)
        names = {t.native_id: t.name for t in threading.enumerate()}
        moments[moment] = (time.perf_counter_ns(), _thread_times(), names)

    import streamnb.daemon.commit as commit_module

    committing = [0, 0, 0, 0]  # wall, run, wait ns; commits
    checkpoint = commit_module.Committer.checkpoint

    def timed_checkpoint(self, why):  # one call a commit: no timer in the per-record path
        wall0, (run0, wait0) = time.perf_counter_ns(), _thread_times()[main_tid]
        try:
            return checkpoint(self, why)
        finally:
            run1, wait1 = _thread_times()[main_tid]
            committing[0] += time.perf_counter_ns() - wall0
            committing[1] += run1 - run0
            committing[2] += wait1 - wait0
            committing[3] += 1

    commit_module.Committer.checkpoint = timed_checkpoint
    try:
        wall = loop(bootstrap, topic, n, after_build=after_build, probe=probe)
    finally:
        commit_module.Committer.checkpoint = checkpoint
    (t0, start, _), (t1, end, names) = moments["start"], moments["end"]
    us = 1e3 * n  # ns per record -> us

    run = (end[main_tid][0] - start[main_tid][0]) / us
    queued = (end[main_tid][1] - start[main_tid][1]) / us
    total = (t1 - t0) / us
    gc_us = sum(s for _, s in collections_.values()) * 1e6 / n
    print(f"where one daemon loop's wall time goes, {n} records, {wall:.2f} s (a fresh "
          f"process, no timers in the loop), per record, load {os.getloadavg()[0]:.1f}:")
    print(f"  main thread: wall {total:.1f} us = on a CPU {run:.1f} + waiting for a CPU "
          f"{queued:.1f} + blocked (GIL, locks, network) {total - run - queued:.1f}")
    c_wall, c_run, c_wait = (x / us for x in committing[:3])
    print(f"  of which in the {committing[3]} commit(s): wall {c_wall:.1f} us = on a CPU "
          f"{c_run:.1f} + waiting for a CPU {c_wait:.1f} + blocked {c_wall - c_run - c_wait:.1f}")
    print(f"  the cyclic collector (in the main thread's time): {gc_us:.1f} us; collections "
          + ", ".join(f"generation {g}: {c} in {s * 1e3:.0f} ms"
                      for g, (c, s) in sorted(collections_.items())))
    others = sorted(((end[tid][0] - start.get(tid, (0, 0))[0]) / us, names.get(tid, str(tid)))
                    for tid in end if tid != main_tid)
    print("  other threads on a CPU: " + ", ".join(f"{name} {cpu:.1f} us"
                                                   for cpu, name in reversed(others)
                                                   if cpu >= 0.05))


def breakdown(bootstrap: str, topic: str, n: int) -> None:
    """Wall time per stage of one daemon loop over ``topic``, per record.

    Stages overlap (predict and learn are inside process); time a Kafka client thread takes
    the GIL from the loop is counted in whatever stage was running."""
    import collections
    import functools

    import streamnb.daemon as daemon_module
    import streamnb.daemon.commit as commit_module
    import streamnb.daemon.prepare as prepare_module
    from streamnb.daemon.feedback import FeedbackStore

    spent: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    restore = []

    def timed(owner, name: str, stage: str) -> None:
        function = getattr(owner, name)
        if isinstance(owner, type):
            restore.append((owner, name, owner.__dict__.get(name)))  # None: inherited

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[stage] += time.perf_counter() - started
                calls[stage] += 1

        setattr(owner, name, wrapper)

    build = daemon_module.build_daemon

    def build_timed(*args, **kwargs):
        daemon = build(*args, **kwargs)
        for name, stage in (("poll", "kafka poll"), ("send", "hand outputs to the producer"),
                            ("send_many", "hand outputs to the producer, many at once"),
                            ("commit", "offsets + commit_transaction"),
                            ("tail_poll", "changelog reader poll")):
            timed(daemon.io, name, stage)
        for name, stage in (("process", "process (all of a batch)"), ("_learn", "learn"),
                            ("checkpoint", "commit (the whole protocol)"),
                            ("_send_changes", "commit: changelog records made and sent")):
            timed(daemon, name, stage)
        timed(daemon.pipeline, "prepare", "featurize (in this process)")
        timed(daemon.preparer, "results", "wait for the prepared results")
        timed(daemon.metrics, "observe_labelled", "metrics: queue observation")
        timed(daemon.metrics, "observe_labelled_many", "metrics: queue a run's observations")
        timed(daemon.metrics, "_fold", "metrics: fold into the counts")
        timed(FeedbackStore, "remember", "feedback store")
        timed(FeedbackStore, "remember_many", "feedback store, a run at a time")
        return daemon

    globals()["build_daemon"] = build_timed
    restore.append((prepare_module, "decode", prepare_module.decode))
    timed(prepare_module, "decode", "decode JSON (in this process)")
    for name, stage in (("changed_feedback_records", "commit: make the store's records"),
                        ("changed_model_records", "commit: make the model's records")):
        restore.append((commit_module, name, getattr(commit_module, name)))
        timed(commit_module, name, stage)
    timed(FeedbackStore, "encode_x", "feedback store: encode x")
    timed(MultinomialNB, "predict_proba_one", "predict, one message")  # the default model
    timed(MultinomialNB, "prequential_many", "model step, a run of messages")
    try:
        total = daemon_loop(bootstrap, topic, n)
    finally:
        globals()["build_daemon"] = build
        for owner, name, original in restore:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    print(f"breakdown of one daemon loop over {n} records: {total:.2f} s, "
          f"{total / n * 1e6:.0f} us per record (the config's defaults: decode and featurize "
          "in this process)")
    for stage, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {stage:32s} {seconds / n * 1e6:7.1f} us/record  ({calls[stage]} calls)")


def _cpu_per_record(step, items, rounds: int = 3) -> float:
    """Median CPU µs per item of ``step(items)`` (one call over all items) over ``rounds``."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        step(items)
        times.append((time.process_time() - started) / len(items) * 1e6)
    return statistics.median(times)


def floor(bootstrap: str, topic: str, values, rounds: int, ceiling_us: float,
          bare_cpu: float, daemon_rate: float, broker_us: float | None = None) -> None:
    """The CPU a record costs in the stages any daemon built on these parts must run, each
    measured on its own, and the best throughput ratio two cores could then give.

    A ratio r against the ceiling (the bare consumer's wall time per record, ``ceiling_us``,
    as measured by the throughput rounds, whose CPU per record is ``bare_cpu``) leaves a
    record ceiling_us / r of wall time. With the stages spread over both cores, perfectly,
    no design on these parts can beat 2 x ceiling_us / (sum of the stages' CPU).

    The state's stage is what keeping it in Kafka costs: the changelog records of commits
    as many messages apart as the daemon's commits were in the throughput rounds (one
    ``checkpoint.every_seconds`` at its median rate ``daemon_rate``), made
    (``changed_records``, with the default token budget's expiry) and produced in a
    transaction each, as the commit protocol's steps 2 and 4 do."""
    from kafka import KafkaProducer

    from streamnb.codec import decode, encode
    from streamnb.daemon.changelog import changed_records, no_cyclic_gc
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.daemon.kafka_io import (
        _BulkAppend,
        producer_config,
        transactional_producer_config,
    )
    from streamnb.pipeline import build_pipeline

    settings = load_settings(text=settings_text(bootstrap, topic, Path("/nonexistent"), "floor"),
                             environ={})
    n = len(values)

    pipeline = build_pipeline(settings.model.table(), settings.features)
    messages = [decode(v, default_id="x") for _, v, _ in values]
    inputs = [pipeline.prepare(m).x for m in messages]
    labels = [m.label for m in messages]
    outputs = [encode({"id": m.id, "label": "ham", "probabilities": {"ham": 0.99, "spam": 0.01},
                       "log_probabilities": {"ham": math.log(0.99), "spam": math.log(0.01)},
                       "score": 0.99, "model_updates": i, "topic": topic, "partition": 0,
                       "offset": i, "latency_seconds": 0.0001})
               for i, m in enumerate(messages) if m.label is None]

    def decode_and_featurize(items):
        for _, value, _ in items:
            pipeline.prepare(decode(value, default_id="x"))

    def model_step(items):
        model = pipeline.model.__class__(**settings.model.options)
        if hasattr(model, "prequential_many"):
            batch = settings.kafka.max_poll_records
            for start in range(0, len(items), batch):
                chunk = items[start:start + batch]
                model.prequential_many([x for x, _ in chunk], [y for _, y in chunk])
            return
        for x, y in items:
            model.predict_proba_one(x)
            if y is not None:
                model.learn_one(x, y)

    def remember(items):
        """A poll at a time, as the daemon's batch step: each message's input encoded (the
        preparer's ``encode_x``), then the poll's run remembered with ``remember_many``."""
        store = FeedbackStore(settings.feedback.max_ids, settings.feedback.max_bytes)
        encode, batch = FeedbackStore.encode_x, settings.kafka.max_poll_records
        for start in range(0, len(items), batch):
            chunk = items[start:start + batch]
            store.remember_many("t:0", [str(i) for i in range(start, start + len(chunk))],
                                [encode(x) for x, _ in chunk], [y for _, y in chunk])

    def produce_outputs(records):
        """The predictions handed over as the daemon hands them: a poll's at a time with
        ``send_many``'s path (one ``send`` each where kafka-python's internals do not allow
        it)."""
        producer = KafkaProducer(**producer_config(settings.kafka))
        items = [(b"%d" % i, value) for i, value in enumerate(records)]

        def send_one(topic_, key, value, headers=None, partition=None):
            producer.send(topic_, value=value, key=key, headers=headers, partition=partition)

        bulk = None if _BulkAppend.unusable(producer) else _BulkAppend(producer, print)
        per_poll = max(1, round(len(records) * settings.kafka.max_poll_records / n))
        for start in range(0, len(items), per_poll):
            if bulk is None:
                for key, value in items[start:start + per_poll]:
                    send_one(f"{topic}-floor", key, value)
            else:
                bulk.send(f"{topic}-floor", items[start:start + per_poll], None, send_one)
        producer.flush()
        producer.close()

    per_commit = max(1, min(n, round(daemon_rate * settings.checkpoint.every_seconds)))
    x_jsons = [FeedbackStore.encode_x(x) for x in inputs]

    def changelog_commits(items) -> float:
        """CPU seconds of making and producing the changelog records of commits of
        ``per_commit`` messages (learning and remembering them is not counted: the model
        step's and the feedback store's stages are)."""
        model = pipeline.model.__class__(**settings.model.options)
        max_tokens, keep = settings.model.max_tokens, settings.model.expiry_keep()
        if max_tokens:
            model.track_last_seen()
        store = FeedbackStore(settings.feedback.max_ids, settings.feedback.max_bytes)
        model.mark_changes()
        store.mark_changes()
        producer = KafkaProducer(**transactional_producer_config(
            settings.kafka, f"floor-{uuid.uuid4().hex[:8]}"))
        producer.init_transactions()
        bulk = None if _BulkAppend.unusable(producer) else _BulkAppend(producer, print)

        def send_one(topic_, key, value, headers=None, partition=None):
            producer.send(topic_, value=value, key=key, headers=headers, partition=partition)

        changelog = f"{topic}-floor-changelog"
        cpu = 0.0
        try:
            for i, (x, y) in enumerate(items):
                if y is not None:
                    model.learn_one(x, y)
                store.remember(str(i), "in:0", x_jsons[i], y)
                if (i + 1) % per_commit and i + 1 < len(items):
                    continue
                started = time.process_time()
                with no_cyclic_gc():
                    if max_tokens:
                        # one partition, as in the throughput rounds: the slice is the
                        # global model, with no sum of slices to follow
                        model.expire(max_tokens, keep, old_values=False)
                    records = list(changed_records(model, store))
                    producer.begin_transaction()
                    if bulk is None:
                        for key, value in records:
                            producer.send(changelog, key=key, value=value, partition=0)
                    else:  # as the daemon's commit hands them over (KafkaIO.send_many)
                        bulk.send(changelog, records, 0, send_one)
                producer.commit_transaction()
                cpu += time.process_time() - started
                model.mark_changes()
                store.mark_changes()
        finally:
            producer.close()
        return cpu

    create_topics(bootstrap, {f"{topic}-floor": 1})
    create_topics(bootstrap, {f"{topic}-floor-changelog": 1},
                  {f"{topic}-floor-changelog": {"cleanup.policy": "compact"}})
    pairs = list(zip(inputs, labels, strict=True))
    stages = {
        "kafka-python consumer (the bare consumer)": bare_cpu,
        "decode JSON + featurize": _cpu_per_record(decode_and_featurize, values, rounds),
        "model step (predict, learn the labelled)": _cpu_per_record(model_step, pairs, rounds),
        "feedback store (a poll at a time)": _cpu_per_record(remember, pairs, rounds),
        f"kafka-python producer ({len(outputs)} predictions, a poll's at once)":
            _cpu_per_record(produce_outputs, outputs, rounds) * len(outputs) / n,
        f"changelog: make and produce (commits of {per_commit})": statistics.median(
            changelog_commits(pairs) for _ in range(rounds)) / n * 1e6,
    }
    total = sum(stages.values())
    print(f"floor over {n} records, CPU per input record, median of {rounds} "
          f"(ceiling: the bare consumer's {ceiling_us:.1f} us a record, "
          f"{1e6 / ceiling_us:,.0f} msg/s):")
    for stage, cpu in stages.items():
        print(f"  {stage:44s} {cpu:6.1f} us")
    print(f"  {'sum':44s} {total:6.1f} us")
    print(f"  best ratio two cores allow (2 x {ceiling_us:.1f} / {total:.1f}): "
          f"{2 * ceiling_us / total:.3f}; ratio 0.5 needs the sum <= {4 * ceiling_us:.1f} us")
    if broker_us is not None:
        print(f"  with the broker's CPU while the daemon ran ({broker_us:.1f} us a record, on "
              f"the same cores): best ratio (2 x {ceiling_us:.1f} / {total + broker_us:.1f}) "
              f"{2 * ceiling_us / (total + broker_us):.3f}")


# ---------------------------------------------------------------------- subprocess daemon
class Subprocess:
    def __init__(self, bootstrap: str, topic: str, workdir: Path, group: str):
        self.workdir = workdir
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        config = workdir / "config.toml"
        config.write_text(settings_text(bootstrap, topic, workdir, group).replace(
            'level = "warning"', 'level = "info"'))
        self.log = workdir / "daemon.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
                cwd=REPO, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        deadline = time.monotonic() + 60
        while b"partitions assigned" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("daemon did not start:\n" + self.log.read_text()[-2000:])
            time.sleep(0.05)

    def wait_offset(self, key: str, offset: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        topic, _, partition = key.rpartition(":")
        while time.monotonic() < deadline:
            done = committed_offsets(self.bootstrap, self.group, topic)
            if done.get((topic, int(partition)), 0) >= offset:
                return
            time.sleep(0.2)
        raise RuntimeError(f"daemon did not reach {key}@{offset}")

    def peak_rss_mib(self) -> tuple[float, float, float]:
        """(peak RSS, RSS) of the daemon process, and the summed peak RSS of its child processes
        (the prepare process, when it is on)."""
        def memory(pid) -> tuple[float, float]:
            status = Path(f"/proc/{pid}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            return (int(fields["VmHWM"].split()[0]) / 1024,
                    int(fields["VmRSS"].split()[0]) / 1024)

        pid = self.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        producer = sum(memory(c)[0] for c in children
                       if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes())
        return (*memory(pid), producer)

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=30)


class _CommittedArrivals:
    """A ``read_committed`` reader of ``topic`` in a thread of its own: the wall-clock time
    (ms) each prediction became readable, by its input offset. A prediction is visible to
    the daemon's readers only once its transaction commits, which its record's CreateTime
    (the moment it was handed to the producer) does not show."""

    def __init__(self, bootstrap: str, topic: str, expected: int):
        import threading

        from kafka import KafkaConsumer

        self.expected = expected
        self.at: dict[int, float] = {}
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
            enable_auto_commit=False, isolation_level="read_committed", fetch_max_wait_ms=20)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set() and len(self.at) < self.expected:
            for records in self._consumer.poll(timeout_ms=50).values():
                now = time.time() * 1000
                for record in records:
                    self.at[orjson.loads(record.value)["offset"]] = now

    def close(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.at) < self.expected and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close(autocommit=False)


def latency(bootstrap: str, rate: float, values, name: str) -> None:
    topic = f"bench-lat-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 1, f"{topic}-out": 1, f"{topic}-dlq": 1})
    workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
    daemon = Subprocess(bootstrap, topic, workdir, f"{topic}-group")
    n_out = sum(1 for _, v, _ in values if b'"label"' not in v)
    arrivals = _CommittedArrivals(bootstrap, f"{topic}-out", n_out)
    try:
        started = time.perf_counter()
        produce(bootstrap, topic, ((k, v) for k, v, _ in values), rate=rate)
        sent_rate = len(values) / (time.perf_counter() - started)
        daemon.wait_offset(f"{topic}:0", len(values))
        arrivals.close()
        inputs = read_all(bootstrap, topic, until=lambda r: len(r) >= len(values))
        outputs = read_all(bootstrap, f"{topic}-out", until=lambda r: len(r) >= n_out)
        sent_at = {r.offset: r.timestamp_ms for r in inputs}
        predictions = [orjson.loads(r.value) for r in outputs]
        lat = sorted(
            r.timestamp_ms - sent_at[p["offset"]]
            for r, p in zip(outputs, predictions, strict=True)
        )
        own = sorted(p["latency_seconds"] * 1000 for p in predictions)
        visible = sorted(arrivals.at[p["offset"]] - sent_at[p["offset"]]
                         for p in predictions if p["offset"] in arrivals.at)

        def pct(xs, q):
            return xs[min(len(xs) - 1, int(len(xs) * q))]

        print(f"latency {name}, produce->prediction at {sent_rate:.0f} msg/s "
              f"(target {rate:.0f}), "
              f"{len(lat)} predictions: p50 {pct(lat, 0.5)} ms, p99 {pct(lat, 0.99)} ms, "
              f"max {lat[-1]} ms; processing alone (latency_seconds): "
              f"p50 {pct(own, 0.5):.2f} ms, p99 {pct(own, 0.99):.2f} ms; "
              f"produce->readable (read_committed, {len(visible)} predictions): "
              f"p50 {pct(visible, 0.5):.0f} ms, p99 {pct(visible, 0.99):.0f} ms, "
              f"max {visible[-1]:.0f} ms")
    finally:
        arrivals.close(timeout=0)
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def memory(bootstrap: str, topic: str, n: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
    daemon = Subprocess(bootstrap, topic, workdir, f"bench-mem-{uuid.uuid4().hex[:8]}")
    try:
        daemon.wait_offset(f"{topic}:0", n)
        peak, now, children = daemon.peak_rss_mib()
        code = daemon.stop()
        print(f"memory after the SpamAssassin stream ({n} messages): peak RSS {peak:.0f} MiB, "
              f"RSS {now:.0f} MiB, child processes (prepare, if on) peak RSS "
              f"{children:.0f} MiB; SIGTERM exit code {code}")
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def broker_pid(bootstrap: str, given: int | None = None) -> int | None:
    """The pid of the broker the benchmark reads from: ``given`` (``--broker-pid``), else the
    one ``scripts/kafka.sh`` started for the bootstrap's port (its pid file), if it runs on
    this machine; None if neither is found (its CPU is then not reported)."""
    if given is None:
        port = bootstrap.rsplit(":", 1)[-1]
        home = Path(os.environ.get("STREAMNB_KAFKA_HOME") or Path(
            os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamnb" / "kafka")
        run = Path(os.environ.get("STREAMNB_KAFKA_RUN") or home / f"run-{port}")
        try:
            given = int((run / "kafka.pid").read_text())
        except (OSError, ValueError):
            return None
    return given if process_cpu_seconds(given) is not None else None


def process_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds process ``pid`` has run, all its threads; None if it is
    gone (Linux's ``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BrokerCPU:
    """The broker's CPU while each contender of a round runs, per record: what the daemon
    costs the broker (its fetches, the predictions', changelog's and offsets' writes, the
    transactions), next to what the bare consumer does. The broker shares the machine's
    cores with the daemon, so the floor counts it too."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.per_record: dict[str, list[float]] = {}

    def timed(self, what: str, n: int, run: Callable[[], tuple[float, float]]
              ) -> tuple[float, float]:
        before = process_cpu_seconds(self.pid) if self.pid else None
        result = run()
        after = process_cpu_seconds(self.pid) if before is not None else None
        if after is not None:
            self.per_record.setdefault(what, []).append((after - before) / n * 1e6)
        return result

    def median(self, what: str) -> float | None:
        rounds = self.per_record.get(what)
        return statistics.median(rounds) if rounds else None

    def line(self, whats: dict[str, str]) -> str | None:
        figures = [(label, self.per_record[what]) for what, label in whats.items()
                   if what in self.per_record]
        if not figures:
            return None
        return (f"  the broker's CPU a record (pid {self.pid}, the contender's whole run): "
                + "; ".join(f"while {label} ran {statistics.median(rounds):.1f} us  ["
                            + ", ".join(f"{r:.1f}" for r in rounds) + "]"
                            for label, rounds in figures))


def in_child(what: str, bootstrap: str, topic: str, n: int, timeout: float = 300,
             repo: Path = REPO, kafka_setting: str = "", waits: list | None = None
             ) -> tuple[float, float]:
    """Run one measurement in a fresh process (isolated memory, and a kafka-python stall
    cannot hang the benchmark); retried once if it stalls. Returns (wall, CPU) seconds; the
    CPU is the measured process's own (the daemon's producer child is not in it). A daemon
    with the prepare process also reports the seconds it waited for the prepare processes'
    results, appended to ``waits`` (a checkout whose daemon does not: nothing).

    The bare consumer runs as ``bench.bare_consumer``, a process that imports kafka-python
    only (see that module for why)."""
    module = ["bench.bare_consumer"] if what == "bare" else ["bench.bench_daemon", "--child", what]
    env = {**os.environ, "PYTHONPATH": str(repo), KAFKA_SETTING_ENV: kafka_setting}
    if repo != REPO:
        env.pop(PREPARE_PROCESSES_ENV, None)  # another checkout keeps its default
    for attempt in (1, 2):
        try:
            out = subprocess.run(
                [sys.executable, "-m", *module, topic, str(n), "--bootstrap", bootstrap],
                cwd=repo, capture_output=True, text=True, timeout=timeout, check=True, env=env,
            ).stdout
            lines = out.strip().splitlines()
            wall, cpu = lines[-1].split()
            if waits is not None:
                waits.extend(float(line.split()[1]) for line in lines
                             if line.startswith("prepare_wait "))
            return float(wall), float(cpu)
        except subprocess.TimeoutExpired:
            print(f"  {what} round stalled (attempt {attempt}); retrying", file=sys.stderr)
    raise RuntimeError(f"{what} stalled twice")


def print_prepare_waits(waits: list[float], times: list[tuple[float, float]], n: int) -> None:
    """The time a daemon with the prepare process waited for its results, a message, beside
    its whole time a message: where they are close, the prepare processes bound its rate."""
    waited = [w / n * 1e6 for w in waits]
    walls = [t / n * 1e6 for t, _ in times]
    print(f"    its wait for the prepare processes' results: median "
          f"{statistics.median(waited):.0f} us a message of its {statistics.median(walls):.0f}"
          "  [" + ", ".join(f"{w:.0f}/{t:.0f}" for w, t in zip(waited, walls, strict=True))
          + "]")


#: Records per poll in the in-process measurements (kafka-python's max_poll_records default).
POLL_RECORDS = 500


def _featurized_stream(name: str) -> list[tuple[dict, str | None]]:
    """(token counts, label or None) of each record of stream ``name``, featurized as the
    daemon does (the featurizer's default options)."""
    from streamnb.features import Featurizer, FeaturizerOptions

    featurizer = Featurizer(FeaturizerOptions())
    stream = []
    for _, value, label in STREAMS[name]():
        record = orjson.loads(value)
        if "raw_b64" in record:
            features = featurizer.from_raw(base64.b64decode(record["raw_b64"]))
        else:
            features = featurizer.from_text(record["text"])
        stream.append((features.tokens, label if "label" in record else None))
    return stream


def model_step(rounds: int, streams: tuple[str, ...] = ("sms", "spamassassin")) -> None:
    """CPU µs per record of the model's prequential step (predict, then learn the labelled),
    in-process, alternating, on each stream: one message at a time (``predict_proba_one``
    then ``learn_one``: the short-message path for SMS, the numpy path for long messages),
    the numpy path forced for every message, and the batch step (``prequential_many`` over
    polls of 500). MultinomialNB with the tuned mail options (``MAIL_OPTIONS``, named in
    full), BernoulliNB with its defaults."""
    from streamnb.models import make_model

    def one_by_one(model, stream, polls) -> None:
        for x, y in stream:
            model.predict_proba_one(x)
            if y is not None:
                model.learn_one(x, y)

    def batched(model, stream, polls) -> None:
        for xs, ys in polls:
            model.prequential_many(xs, ys)

    contenders = (("one at a time", None, one_by_one), ("numpy path", 0, one_by_one),
                  ("batched", None, batched))
    for name in streams:
        stream = _featurized_stream(name)
        chunks = [stream[i:i + POLL_RECORDS] for i in range(0, len(stream), POLL_RECORDS)]
        polls = [([x for x, _ in chunk], [y for _, y in chunk]) for chunk in chunks]
        long = sum(len(x) > SHORT_MESSAGE_TOKENS for x, _ in stream)
        for kind, options, named in (("multinomial", MAIL_OPTIONS, "tuned mail options"),
                                     ("bernoulli", {}, "default options")):
            times: dict[str, list[float]] = {label: [] for label, _, _ in contenders}
            for _ in range(rounds):
                for label, limit, step in contenders:
                    model = make_model(kind, **options)
                    if limit is not None:
                        model._short_limit = limit
                    started = time.process_time()
                    step(model, stream, polls)
                    times[label].append((time.process_time() - started) / len(stream) * 1e6)
            single, numpy_, batch = (statistics.median(times[label])
                                     for label, _, _ in contenders)
            print(f"model step {kind} ({named}), {name} ({len(stream)} records, {long} longer "
                  f"than the short path's limit), CPU per record, median of {rounds}: "
                  f"one at a time {single:.1f} us, numpy path {numpy_:.1f} us, batched "
                  f"({POLL_RECORDS} per call) {batch:.1f} us (one at a time / batched: "
                  f"{single / batch:.2f}x)  [batched rounds: "
                  + ", ".join(f"{t:.1f}" for t in times["batched"]) + "; one at a time: "
                  + ", ".join(f"{t:.1f}" for t in times["one at a time"]) + "]")


def fake_loop(rounds: int) -> None:
    """CPU and wall µs per SMS record of the daemon loop (``Daemon.step``: poll, decode,
    featurize, predict, learn, emit) over the in-memory Kafka of the test suite, polls of 500,
    alternating: record by record and with runs scored by the batch step, both decoding and
    featurizing in-process (``pipeline.prepare_process = false``), and with runs and the
    prepare process (the default), whose own CPU is reported apart."""
    from streamnb.config import FeedbackSettings, ModelSettings, PipelineSettings
    from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, settings_for

    values = sms_values()
    n = len(values)

    def run(runs: bool, prepare_process: bool) -> tuple[float, float, float]:
        workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-"))
        try:
            kafka = FakeKafka({"in": 1})
            for key, value, _ in values:
                kafka.append("in", value, key=key, partition=0)
            settings = settings_for(
                workdir, feedback=FeedbackSettings(),
                model=ModelSettings(kind="multinomial", labels=("ham", "spam")),
                pipeline=PipelineSettings(prepare_process=prepare_process))

            def io_factory(on_assigned, on_revoked):
                return FakeIO(kafka, settings.kafka, on_assigned, on_revoked,
                              batch=POLL_RECORDS)

            daemon = build_daemon(settings, metrics=RecordingMetrics(), io_factory=io_factory)
            try:
                if not runs:
                    daemon._batches = lambda key: False
                child = getattr(daemon.preparer, "pid", None)
                child_cpu = process_cpu_seconds(child) if child else 0.0
                cpu, wall = time.process_time(), time.perf_counter()
                done = 0
                while True:
                    done += daemon.step(0)
                    if daemon.io.caught_up() and not daemon.in_flight:
                        break
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                child_cpu = process_cpu_seconds(child) - child_cpu if child else 0.0
                assert done == n, (done, n)
                daemon.checkpoint("end")
            finally:
                daemon.close()
            return cpu / n * 1e6, wall / n * 1e6, child_cpu / n * 1e6
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    contenders = {"record by record, in-process": (False, False),
                  "runs, in-process": (True, False),
                  "runs, prepare process": (True, True)}
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (runs, prepare_process) in contenders.items():
            times[name].append(run(runs, prepare_process))
    print(f"daemon loop, fake Kafka, SMS ({n} records, polls of {POLL_RECORDS}), per record, "
          f"median of {rounds} interleaved rounds:")
    for name, measured in times.items():
        cpu, wall, child = (statistics.median(m[i] for m in measured) for i in range(3))
        print(f"  {name:30s} CPU {cpu:6.1f} us, wall {wall:6.1f} us"
              + (f", prepare process CPU {child:5.1f} us" if child else ""))


def main(argv: list[str] | None = None) -> int:
    global LABELLED
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("WHAT", "TOPIC", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", default="sms,sms-10x,spamassassin",
                        help="the throughput rounds' streams, of " + ", ".join(STREAMS))
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--sms-copies", type=int, default=1,
                        help="the SMS stream of the throughput rounds this many times over, "
                             "under new ids (a loop long enough for several commits)")
    parser.add_argument("--labelled", type=float, default=DEFAULT_LABELLED, metavar="SHARE",
                        help="the share of each stream's messages that carry their label "
                             "(default %(default)s)")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--latency-streams", default="sms,spamassassin",
                        help="the streams produced at --rate for the latency measurement")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--model-step", action="store_true",
                        help="also time the model's step per SMS and per mail: one at a "
                        "time, numpy path, batch step")
    parser.add_argument("--fake-loop", action="store_true",
                        help="also time the daemon loop per SMS record over an in-memory "
                        "Kafka: record by record, runs with the batch step, and runs with the "
                        "prepare process")
    parser.add_argument("--breakdown", action="store_true",
                        help="also print where the daemon loop's time goes on each stream")
    parser.add_argument("--prepare-processes", type=int, default=1, metavar="K",
                        help="with --prepare-process: its contender's "
                             "pipeline.prepare_processes (default 1)")
    parser.add_argument("--prepare-process", action="store_true",
                        help="also time the daemon with pipeline.prepare_process = true in the "
                             "throughput rounds")
    parser.add_argument("--baseline", type=Path,
                        help="also time, in the same throughput rounds, the daemon of another "
                             "checkout of streamnb (its own bench/bench_daemon.py --child), e.g. "
                             "the code before a change: `git worktree add /tmp/base main`")
    parser.add_argument("--wall-split", action="store_true",
                        help="also print, for one daemon loop in a fresh process without timers, "
                             "the main thread's wall time as on a CPU / waiting for a CPU / "
                             "blocked, the cyclic collector's share and the other threads' CPU")
    parser.add_argument("--skeleton", action="store_true",
                        help="also time, in the same throughput rounds, a loop of the floor's "
                             "stages and nothing else, exactly once, in one process "
                             "(bench/skeleton_loop.py): the best one daemon process can do; "
                             "and that loop with decoding and featurizing done before the "
                             "clock starts")
    parser.add_argument("--kafka-setting", action="append", default=[], metavar="LINE",
                        help="also time, in the same throughput rounds, the daemon with this "
                             "line in its [kafka] table (e.g. 'max_poll_records = 2000'), or in "
                             "another table (e.g. '[checkpoint] every_messages = 1000'); "
                             "repeatable, one contender each, timed before the daemon every "
                             "other round and compared with it round by round")
    parser.add_argument("--broker-pid", type=int, default=None,
                        help="the broker's pid, to report its CPU while each contender runs "
                             "(default: the one scripts/kafka.sh started for the bootstrap's "
                             "port, if any)")
    parser.add_argument("--floor", action="store_true",
                        help="also print the CPU per record of the stages every daemon on these "
                             "parts must run, and the best ratio two cores allow")
    args = parser.parse_args(argv)
    if not 0.0 <= args.labelled <= 1.0:
        parser.error(f"--labelled {args.labelled}: a share, from 0 to 1")
    for name in filter(None, (args.streams + "," + args.latency_streams).split(",")):
        if name not in STREAMS:
            parser.error(f"no stream {name!r}: the streams are {', '.join(STREAMS)}")
    if args.prepare_processes < 1:
        parser.error("--prepare-processes must be at least 1")
    if not args.child:
        os.environ[PREPARE_PROCESSES_ENV] = str(args.prepare_processes)  # its children read it
    LABELLED = args.labelled  # once the command line is accepted
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints where it is
    if args.child:
        what, topic, n = args.child
        cpu_started = time.process_time()
        import streamnb.daemon.loop as run_module

        # What `streamnb run` does once its daemon is built (a checkout without it: nothing).
        started_up = getattr(run_module, "freeze_start_up_heap", None)
        if what == "wall-split":
            wall_split(args.bootstrap, topic, int(n), after_build=started_up)
            return 0
        if what in ("skeleton", "skeleton-free-prepare"):
            from bench.skeleton_loop import skeleton_loop

            if args.wall_split:  # the skeleton's own wall split
                wall_split(args.bootstrap, topic, int(n), after_build=started_up,
                           loop=functools.partial(
                               skeleton_loop, free_prepare=what == "skeleton-free-prepare"))
                return 0
            print(skeleton_loop(args.bootstrap, topic, int(n), after_build=started_up,
                                free_prepare=what == "skeleton-free-prepare"),
                  time.process_time() - cpu_started)
            return 0
        report: dict = {}
        wall = daemon_loop(args.bootstrap, topic, int(n), prepare_process=what == "prepare",
                           after_build=started_up, report=report)
        if what == "prepare":
            print("prepare_wait", report["prepare_wait"])
        print(wall, time.process_time() - cpu_started)
        return 0

    from kafka.record import util as kafka_record_util  # which CRC-32C both readers use

    crc = ("pure Python" if kafka_record_util.crc32c_c is None
           else "C (the crc32c package)")
    print(f"streamnb daemon benchmark, {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}; "
          f"kafka-python's CRC-32C check: {crc}; {LABELLED:.0%} of messages labelled")
    topics = {}
    for name in filter(None, args.streams.split(",")):
        values = sms_values(copies=args.sms_copies) if name == "sms" else STREAMS[name]()
        topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        create_topics(args.bootstrap, {topic: 1, f"{topic}-out": 1, f"{topic}-dlq": 1})
        produce(args.bootstrap, topic, ((k, v) for k, v, _ in values))
        print(f"  {name}: {len(values)} records in {topic}", file=sys.stderr, flush=True)
        topics[name] = (topic, len(values))
        bare, loop, prepared, baseline, skeleton, skeleton_free = [], [], [], [], [], []
        baseline_prepared: list = []
        prepare_waits: list[float] = []  # the contender's, a round each
        baseline_prepare_waits: list[float] = []  # (a baseline that reports them)
        tuned: dict[str, list] = {line: [] for line in args.kafka_setting}

        def time_settings(tuned: dict[str, list], topic: str, n: int) -> None:
            for line, times in tuned.items():
                times.append(in_child("daemon", args.bootstrap, topic, n, kafka_setting=line))

        broker = BrokerCPU(broker_pid(args.bootstrap, args.broker_pid))
        for round_ in range(args.rounds):
            bare.append(broker.timed("bare", len(values), functools.partial(
                in_child, "bare", args.bootstrap, topic, len(values))))
            # the baseline and the settings' daemons before the daemon every other round:
            # the machine's drift over a round (a neighbour's job starting, the broker's
            # caches) falls on both alike
            others_first = round_ % 2 == 1
            if others_first and args.baseline:
                baseline.append(in_child("daemon", args.bootstrap, topic, len(values),
                                         repo=args.baseline))
            if others_first:
                time_settings(tuned, topic, len(values))
            loop.append(broker.timed("daemon", len(values), functools.partial(
                in_child, "daemon", args.bootstrap, topic, len(values))))
            if not others_first:
                time_settings(tuned, topic, len(values))
            if args.skeleton:
                skeleton.append(in_child("skeleton", args.bootstrap, topic, len(values)))
                skeleton_free.append(in_child("skeleton-free-prepare", args.bootstrap, topic,
                                              len(values)))
            if args.prepare_process and args.baseline and others_first:
                baseline_prepared.append(in_child("prepare", args.bootstrap, topic,
                                                  len(values), repo=args.baseline,
                                                  waits=baseline_prepare_waits))
            if args.prepare_process:
                prepared.append(in_child("prepare", args.bootstrap, topic, len(values),
                                         waits=prepare_waits))
            if args.prepare_process and args.baseline and not others_first:
                baseline_prepared.append(in_child("prepare", args.bootstrap, topic,
                                                  len(values), repo=args.baseline,
                                                  waits=baseline_prepare_waits))
            if args.baseline and not others_first:
                baseline.append(in_child("daemon", args.bootstrap, topic, len(values),
                                         repo=args.baseline))
            print(f"  {name} round {round_ + 1}: bare {bare[-1][0]:.2f} s, "
                  f"daemon {loop[-1][0]:.2f} s"
                  + (f", with the prepare process {prepared[-1][0]:.2f} s" if prepared else "")
                  + (f", baseline daemon {baseline[-1][0]:.2f} s" if baseline else "")
                  + (f", skeleton {skeleton[-1][0]:.2f} s, with decoding and featurizing "
                     f"free {skeleton_free[-1][0]:.2f} s" if skeleton else ""),
                  file=sys.stderr, flush=True)
        b, d = statistics.median(w for w, _ in bare), statistics.median(w for w, _ in loop)
        n = len(values)
        print(f"throughput {name} ({n} messages, median of {args.rounds}): "
              f"bare consumer {n / b:,.0f} msg/s, daemon {n / d:,.0f} msg/s, "
              f"ratio {b / d:.3f}  [daemon rounds: "
              + ", ".join(f"{n / t:,.0f}" for t, _ in loop) + "]")
        broker_line = broker.line({"bare": "the bare consumer", "daemon": "the daemon"})
        if broker_line:
            print(broker_line)
        if baseline:
            o = statistics.median(w for w, _ in baseline)
            print(f"  baseline daemon ({args.baseline}): {n / o:,.0f} msg/s, ratio {b / o:.3f}"
                  "  [rounds: " + ", ".join(f"{n / t:,.0f}" for t, _ in baseline) + "]")
            ratios = round_ratios(loop, baseline)
            print(f"  the daemon's time over the baseline's, round by round: median "
                  f"{statistics.median(ratios):.3f}  ["
                  + ", ".join(f"{r:.3f}" for r in ratios) + "]")
        if skeleton:
            k = statistics.median(w for w, _ in skeleton)
            print(f"  skeleton (the floor's stages alone, one process, exactly once): "
                  f"{n / k:,.0f} msg/s, ratio {b / k:.3f}  [rounds: "
                  + ", ".join(f"{n / t:,.0f}" for t, _ in skeleton) + "]")
            k = statistics.median(w for w, _ in skeleton_free)
            print(f"  skeleton with decoding and featurizing free: {n / k:,.0f} msg/s, "
                  f"ratio {b / k:.3f}  [rounds: "
                  + ", ".join(f"{n / t:,.0f}" for t, _ in skeleton_free) + "]")
        for line, times in tuned.items():
            t = statistics.median(w for w, _ in times)
            where = line if line.startswith("[") else f"[kafka] {line}"
            print(f"  with {where}: daemon {n / t:,.0f} msg/s, ratio {b / t:.3f}  [rounds: "
                  + ", ".join(f"{n / w:,.0f}" for w, _ in times) + "]")
            ratios = round_ratios(times, loop)
            print(f"    its time over the daemon's, round by round: median "
                  f"{statistics.median(ratios):.3f}  [" + ", ".join(f"{r:.3f}" for r in ratios)
                  + "]")
        if prepared:
            p = statistics.median(w for w, _ in prepared)
            processes = ("" if args.prepare_processes == 1
                         else f", prepare_processes = {args.prepare_processes}")
            print(f"  with pipeline.prepare_process = true{processes}: daemon {n / p:,.0f} msg/s, "
                  f"ratio {b / p:.3f}  [rounds: "
                  + ", ".join(f"{n / t:,.0f}" for t, _ in prepared) + "]")
            print_prepare_waits(prepare_waits, prepared, n)
        if baseline_prepared:
            p = statistics.median(w for w, _ in baseline_prepared)
            print(f"  baseline with the prepare process: {n / p:,.0f} msg/s, ratio {b / p:.3f}"
                  "  [rounds: " + ", ".join(f"{n / t:,.0f}" for t, _ in baseline_prepared)
                  + "]")
            if baseline_prepare_waits:
                print_prepare_waits(baseline_prepare_waits, baseline_prepared, n)
            for who, times in (("the daemon's", prepared), ("the baseline's", baseline_prepared)):
                cpu = [c / n * 1e6 for _, c in times]
                print(f"  {who} own process with the prepare process, CPU a message (start-up "
                      f"included): median {statistics.median(cpu):.0f} us  ["
                      + ", ".join(f"{c:.0f}" for c in cpu) + "]")
            ratios = [c / o for (_, c), (_, o) in zip(prepared, baseline_prepared, strict=True)]
            print(f"  its CPU over the baseline's, round by round: median "
                  f"{statistics.median(ratios):.3f}  [" + ", ".join(f"{r:.3f}" for r in ratios)
                  + "]")
        if args.breakdown:
            breakdown(args.bootstrap, topic, n)
        if args.wall_split:
            splits = [("wall-split", [])]
            if args.skeleton:
                splits += [(kind, ["--wall-split"])
                           for kind in ("skeleton", "skeleton-free-prepare")]
            for kind, more in splits:
                if kind != "wall-split":
                    print(f"  the {kind.replace('-', ' ')} loop:")
                print(subprocess.run(
                    [sys.executable, "-m", "bench.bench_daemon", "--child", kind, topic,
                     str(n), "--bootstrap", args.bootstrap, *more], cwd=REPO,
                    capture_output=True, text=True, timeout=300, check=True,
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                ).stdout.rstrip())
        if args.floor:
            floor(args.bootstrap, topic, values, max(args.rounds, 3), b / n * 1e6,
                  statistics.median(c for _, c in bare) / n * 1e6, n / d,
                  broker.median("daemon"))
    if args.model_step:
        model_step(max(args.rounds, 3))
    if args.fake_loop:
        fake_loop(max(args.rounds, 3))
    if not args.skip_latency:
        for name in filter(None, args.latency_streams.split(",")):
            latency(args.bootstrap, args.rate, STREAMS[name](), name)
    if not args.skip_memory and "spamassassin" in topics:
        memory(args.bootstrap, *topics["spamassassin"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
