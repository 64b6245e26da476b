"""The daemon floor's changelog stage at a fixed commit size, against another checkout.

    python -m bench.changelog_floor --bootstrap 127.0.0.1:9092 spamassassin 2847
    python -m bench.changelog_floor --bootstrap 127.0.0.1:9092 spamassassin 2847 --baseline ../main

What ``bench.bench_daemon --floor`` counts as "changelog: make and produce": the stream's
commits of N messages (the daemon benchmark's model with the default token budget's expiry,
150,000 keep 112,500, and a feedback store), each commit's expiry and records made
(``changed_records``, the cyclic collector off) and produced in a transaction to a compacted
topic; learning and remembering the messages is not counted. The floor takes N from the
daemon's measured rate (one ``checkpoint.every_seconds``), so two runs of it rarely commit
alike; here N is given, and with ``--baseline`` each round runs this script once in each
checkout (a fresh process each, alternating, the other checkout's code and virtual
environment), so the two are measured in the same rounds. CPU of this process (kafka-python's
sender thread included), per message, median of the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve()


def child(args: argparse.Namespace) -> None:
    """One round, in the checkout ``args.root``: prints the stage's CPU per message."""
    sys.path.insert(0, str(args.root))
    sys.path.insert(1, str(HERE.parents[1]))  # this script's helpers, if the root lacks them
    from kafka import KafkaProducer

    from bench.bench_daemon import (
        MAIL_OPTIONS,
        _featurized_stream,
        create_topics,
        load_settings,
        settings_text,
    )
    from streamnb.daemon.changelog import changed_records, no_cyclic_gc
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.daemon.kafka_io import transactional_producer_config
    from streamnb.models import MultinomialNB

    stream = _featurized_stream(args.stream)
    topic = f"bench-clfloor-{uuid.uuid4().hex[:8]}"
    settings = load_settings(text=settings_text(args.bootstrap, topic, Path("/nonexistent"),
                                                "clfloor"), environ={})
    create_topics(args.bootstrap, {topic: 1}, {topic: {"cleanup.policy": "compact"}})
    x_jsons = [FeedbackStore.encode_x(x) for x, _ in stream]
    model, store = MultinomialNB(**MAIL_OPTIONS), FeedbackStore()
    model.track_last_seen()
    model.mark_changes()
    store.mark_changes()
    producer = KafkaProducer(**transactional_producer_config(
        settings.kafka, f"clfloor-{uuid.uuid4().hex[:8]}"))
    producer.init_transactions()
    cpu = expiring = 0.0
    n_records = 0
    try:
        for i, (x, label) in enumerate(stream):
            if label is not None:
                model.learn_one(x, label)
            store.remember(str(i), "in:0", x_jsons[i], label)
            if (i + 1) % args.every and i + 1 < len(stream):
                continue
            started = time.process_time()
            with no_cyclic_gc():
                model.expire(150_000, 112_500, old_values=False)
                expired = time.process_time()
                records = changed_records(model, store)
                producer.begin_transaction()
                for key, value in records:
                    producer.send(topic, key=key, value=value, partition=0)
            producer.commit_transaction()
            cpu += time.process_time() - started
            expiring += expired - started
            n_records += len(records)
            model.mark_changes()
            store.mark_changes()
    finally:
        producer.close()
    n = len(stream)
    print(f"{cpu / n * 1e6:.2f} {expiring / n * 1e6:.2f} {n_records}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("stream", choices=["sms", "spamassassin"])
    parser.add_argument("every", type=int, help="messages per commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alternately")
    parser.add_argument("--root", type=Path, default=HERE.parents[1], help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    # imported here, not at the top: the child runs with the other checkout's code first
    # on its path, which may have no bench.alternate
    sys.path.insert(0, str(HERE.parents[1]))
    from bench.alternate import child_rounds

    outputs = child_rounds(HERE, args.baseline, args.rounds,
                           ["--bootstrap", args.bootstrap, args.stream, str(args.every)])
    figures = {name: [(float(out[0]), float(out[1]), int(out[2])) for out in rounds]
               for name, rounds in outputs.items()}
    load = os.getloadavg()[0]
    print(f"{args.stream}, commits of {args.every}, changelog stage (make and produce, "
          f"max_tokens 150000), CPU per message, median of {args.rounds} (load {load:.1f}):")
    for name, rounds in figures.items():
        print(f"  {name}: {statistics.median(r[0] for r in rounds):.1f} us, of it expiring "
              f"{statistics.median(r[1] for r in rounds):.1f} us; {rounds[0][2]} records  "
              f"[rounds: {', '.join(f'{r[0]:.1f}' for r in rounds)}]")


if __name__ == "__main__":
    main()
