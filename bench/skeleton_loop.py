"""The best one daemon process can do on these parts: a loop of the floor's stages and nothing else.

    python -m bench.bench_daemon --bootstrap 127.0.0.1:<port> --streams sms --skeleton

``bench_daemon --floor`` times each stage every daemon on these parts must run on its own, and
bounds the ratio two cores could give if the stages were spread over both perfectly. One
daemon is one process, though, and every stage but the broker runs under its one GIL: the
consumer's and the producer's network threads are Python too. So this loop runs those stages,
and only those, the way an exactly-once daemon must, in one process:

1. poll the input with the daemon's own group consumer (``KafkaIO``: ``read_committed``, the
   daemon's fetch sizes);
2. decode and featurize each record (``prepare_value``: the decoder, the pipeline, the feedback
   store's encoding of the input);
3. score and learn the poll with one batch step (``prequential_log_proba_many``);
4. remember the poll's messages in the feedback store (``remember_many``);
5. send a prediction for each unlabelled message (the daemon's fields, encoded as it does),
   the poll's with one ``send_many``;
6. every ``checkpoint.every_seconds``, and at the end: the changelog's records of what
   changed (with the token budget's expiry, with one ``send_many``), sent with the input
   offsets in one transaction (``KafkaIO.commit``).

With ``free_prepare`` step 2 costs nothing: every record's result is computed before the
clock starts (the topic read once with a plain consumer) and looked up by offset, the best a
second process that decodes and featurizes (``pipeline.prepare_process``) could ever do for
this one, with no cost to hand its results over.

No metrics, no dead-letter checks, no size checks, no feedback records, no partition
bookkeeping, no rebalance handling: the daemon does all that besides. Its clock is the
daemon's (``bench_daemon.daemon_loop``): from the first poll that returned records to the end
of the last commit. A ratio this loop cannot reach, the daemon cannot either.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path


def skeleton_loop(bootstrap: str, topic: str, n: int, after_build=None, probe=None,
                  free_prepare: bool = False) -> float:
    """Seconds for the floor's stages, in one loop, to process ``n`` records of ``topic``
    exactly once (see the module docstring). ``after_build()`` runs once the loop's parts are
    built, before the clock starts (what ``streamnb run`` does once its daemon is built);
    ``probe("start")`` and ``probe("end")`` when the clock starts and stops."""
    from bench.bench_daemon import settings_text
    from streamnb.codec import encode
    from streamnb.config import load_settings
    from streamnb.daemon import startup
    from streamnb.daemon.changelog import changed_records, changelog_topic, no_cyclic_gc
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.daemon.kafka_io import KafkaIO, ensure_changelogs, read_all
    from streamnb.daemon.loop import transactional_id
    from streamnb.daemon.prepare import MESSAGE, prepare_value
    from streamnb.daemon.watchdog import Watchdog
    from streamnb.models._base import probabilities_of
    from streamnb.pipeline import build_pipeline

    workdir = Path(tempfile.mkdtemp(prefix="streamnb-skeleton-"))
    group = f"skeleton-{uuid.uuid4().hex[:8]}"
    try:
        settings = load_settings(text=settings_text(bootstrap, topic, workdir, group),
                                 environ={})
        kafka = settings.kafka
        pipeline = build_pipeline(settings.model.table(), settings.features)
        model = pipeline.model
        max_tokens, keep = settings.model.max_tokens, settings.model.expiry_keep()
        if max_tokens:
            model.track_last_seen()
        store = FeedbackStore(settings.feedback.max_ids, settings.feedback.max_bytes)
        model.mark_changes()
        store.mark_changes()

        changelog = changelog_topic(kafka.group_id, topic)
        ensure_changelogs(kafka, {topic: changelog})
        limits = startup.topic_limits(settings, [changelog])
        io = KafkaIO(kafka, lambda tps: None, lambda tps, lost: None, {topic: changelog},
                     transactional_id(settings), Watchdog(kafka.stall_seconds), limits)
        offsets: dict[tuple[str, int], int] = {}
        ready: dict[int, tuple] = {}
        if free_prepare:
            ready = {record.offset: prepare_value(pipeline, record.value, "x")
                     for record in read_all(bootstrap, topic, lambda got: len(got) >= n)}
        if after_build is not None:
            after_build()

        def commit() -> None:
            with no_cyclic_gc():
                if max_tokens:
                    model.expire(max_tokens, keep, old_values=False)
                io.begin()
                io.send_many(changelog, list(changed_records(model, store)), partition=0)
                io.commit(offsets)
            model.mark_changes()
            store.mark_changes()

        io.subscribe()
        started = None
        done = 0
        last_commit = 0.0
        try:
            while done < n:
                records = io.poll(200)
                if not records:
                    continue
                if started is None:
                    started = last_commit = time.perf_counter()
                    if probe is not None:
                        probe("start")
                ids, labels, xs, x_jsons, kept = [], [], [], [], []
                for record in records:
                    result = (ready[record.offset] if free_prepare
                              else prepare_value(pipeline, record.value, "x"))
                    if result[0] == MESSAGE:
                        _, msg_id, label, x, x_json, _ = result
                        ids.append(msg_id)
                        labels.append(label)
                        xs.append(x)
                        x_jsons.append(x_json)
                        kept.append(record)
                log_probas = model.prequential_log_proba_many(xs, labels)
                store.remember_many(f"{topic}:0", ids, x_jsons, labels)
                updates = model.n_updates
                predictions = []
                for record, msg_id, label, log_proba in zip(kept, ids, labels, log_probas,
                                                            strict=True):
                    if label is None:
                        proba = probabilities_of(log_proba)
                        predicted = max(proba, key=proba.get)
                        predictions.append((msg_id.encode(), encode({
                            "id": msg_id, "label": predicted, "probabilities": proba,
                            "log_probabilities": log_proba,
                            "score": proba[predicted], "model_updates": updates,
                            "model": "global", "model_partitions": 1,
                            "topic": record.topic, "partition": record.partition,
                            "offset": record.offset, "latency_seconds": 0.0,
                        })))
                io.send_many(kafka.output_topic, predictions)
                last = records[-1]
                offsets[(last.topic, last.partition)] = last.offset + 1
                done += len(records)
                if time.perf_counter() - last_commit >= settings.checkpoint.every_seconds:
                    commit()
                    last_commit = time.perf_counter()
            commit()
            seconds = time.perf_counter() - started
            if probe is not None:
                probe("end")
            return seconds
        finally:
            io.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
