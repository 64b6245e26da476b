"""CPU a record of handing predictions to kafka-python's transactional producer: one
``KafkaProducer.send`` a record (what ``KafkaIO.send`` does, with its errback) against
``KafkaIO.send_many``'s path (``_BulkAppend``), in the same process and rounds, alternating.

    python -m bench.send_many --bootstrap 127.0.0.1:9092 [--records 20000] [--per-call 100]
    python -m bench.send_many --bootstrap 127.0.0.1:9092 --changelog spamassassin --every 2000

Each round sends ``--records`` predictions (the daemon's JSON of an SMS prediction, keyed by
message id) in one transaction, ``--per-call`` records a ``send_many`` call (a run's
unlabelled members), and commits it. With ``--changelog STREAM`` it sends the changelog
records of that stream's commits instead (every ``--every`` messages, as
``bench.changelog_produce`` makes them: the feedback store's and the model's changed records),
a transaction and one ``send_many`` call per commit, to partition 0. The figure is the main
thread's CPU over the sends alone (``time.thread_time``), per record, the median of the
rounds; the producer's network thread and the commit are not in it. A topic of its own is
created (one partition, compacted for the changelog) and its end offsets checked to hold every
round's records.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaProducer  # noqa: E402

from streamnb.codec import encode  # noqa: E402
from streamnb.config import KafkaSettings  # noqa: E402
from streamnb.daemon.kafka_io import (  # noqa: E402
    _BulkAppend,
    create_topics,
    end_offsets,
    transactional_producer_config,
)


def predictions(count: int) -> list[tuple[bytes, bytes]]:
    """``count`` predictions as the daemon emits them for SMS (key: the message id)."""
    out = []
    for i in range(count):
        msg_id = f"sms-{i}"
        proba = {"ham": 0.9876543210123 - i * 1e-9, "spam": 0.0123456789877 + i * 1e-9}
        log_proba = {c: math.log(p) for c, p in proba.items()}
        out.append((msg_id.encode(), encode({
            "id": msg_id, "label": "ham", "probabilities": proba,
            "log_probabilities": log_proba, "score": proba["ham"],
            "model_updates": 4000 + i, "model": "global", "model_partitions": 1,
            "topic": "sms", "partition": 0, "offset": i, "latency_seconds": 0.000412345,
        })))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--per-call", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--changelog", choices=["sms", "spamassassin"])
    parser.add_argument("--every", type=int, default=2000, help="messages per commit")
    args = parser.parse_args(argv)

    if args.changelog:
        from bench.bench_daemon import _featurized_stream
        from bench.changelog_produce import commits_of

        transactions = commits_of(_featurized_stream(args.changelog), args.every)
        what = (f"{args.changelog}'s changelog, commits of {args.every} messages: "
                f"{sum(map(len, transactions))} records in {len(transactions)} transactions, "
                f"{sum(len(k) + len(v or b'') for t in transactions for k, v in t) / 1e6:.1f} "
                "MB, one send_many call a commit")
        calls, partition = [[t] for t in transactions], 0
    else:
        records = predictions(args.records)
        transactions = [records]
        calls = [[records[i:i + args.per_call] for i in range(0, len(records), args.per_call)]]
        what = (f"{args.records} predictions a transaction ({len(records[0][1])}-byte values), "
                f"{args.per_call} a send_many call")
        partition = None
    count = sum(map(len, transactions))

    topic = f"bench-send-many-{uuid.uuid4().hex[:8]}"
    create_topics(args.bootstrap, {topic: 1},
                  {topic: {"cleanup.policy": "compact"}} if args.changelog else None)
    settings = KafkaSettings(bootstrap_servers=args.bootstrap)
    producer = KafkaProducer(**transactional_producer_config(
        settings, f"bench-send-many-{uuid.uuid4().hex[:8]}"))
    errors: list[BaseException] = []
    try:
        producer.init_transactions()
        why_not = _BulkAppend.unusable(producer)
        if why_not is not None:
            print(f"send_many falls back to one send a record here: {why_not}")
            return 1
        bulk = _BulkAppend(producer, errors.append)
        producer.partitions_for(topic)

        def one_send_a_record(records, _) -> float:
            send = producer.send
            started = time.thread_time()
            for key, value in records:
                send(topic, value=value, key=key, partition=partition).add_errback(errors.append)
            return time.thread_time() - started

        def send_many(_, runs) -> float:
            started = time.thread_time()
            for run in runs:
                bulk.send(topic, run, partition, None)
            return time.thread_time() - started

        ways = {"KafkaProducer.send": one_send_a_record, "send_many": send_many}
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        sent = 0
        for _ in range(args.rounds):
            for name, way in ways.items():
                spent = 0.0
                for records, runs in zip(transactions, calls, strict=True):
                    producer.begin_transaction()
                    spent += way(records, runs)
                    producer.commit_transaction()
                    sent += len(records) + 1  # and the commit marker
                cpu[name].append(spent)
        if errors:
            print(f"{len(errors)} record(s) not delivered: {errors[0]!r}")
            return 1
        arrived = sum(end_offsets(args.bootstrap, topic).values())
        if arrived != sent:
            print(f"{arrived} offsets in {topic}, expected {sent}")
            return 1
        print(f"{what}, median of {args.rounds} rounds, main thread's CPU per record:")
        medians = {name: statistics.median(values) / count * 1e6 for name, values in cpu.items()}
        for name, values in cpu.items():
            rounds = ", ".join(f"{v / count * 1e6:.2f}" for v in values)
            print(f"  {name:20} {medians[name]:6.2f} us  [rounds: {rounds}]")
        print(f"  ratio {medians['KafkaProducer.send'] / medians['send_many']:.1f}x")
    finally:
        producer.close(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
