"""CPU of producing a stream's changelog records to the broker, by producer setting.

    python -m bench.changelog_produce --bootstrap 127.0.0.1:9092 spamassassin 2000

The records of the stream's commits (every N messages, the daemon benchmark's model with the
default token budget's expiry and a feedback store, as ``bench.changelog_records`` makes them)
are made first; then each producer setting (the daemon's transactional producer, batch sizes,
compression) sends them in a transaction per commit to a compacted topic, twice, alternating.
The CPU is this process's (kafka-python's sender thread included), not the broker's. The
compressed settings need the ``lz4`` and ``zstandard`` packages (``pip install lz4
zstandard``; the daemon does not depend on them) and are left out without them.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaProducer  # noqa: E402

from bench.bench_daemon import (  # noqa: E402
    MAIL_OPTIONS,
    _featurized_stream,
    create_topics,
    load_settings,
    settings_text,
)
from streamnb.daemon.changelog import changed_records  # noqa: E402
from streamnb.daemon.feedback import FeedbackStore  # noqa: E402
from streamnb.daemon.kafka_io import transactional_producer_config  # noqa: E402
from streamnb.models import MultinomialNB  # noqa: E402

SETTINGS = {
    "the daemon's": {},
    "batches of 256 KiB": {"batch_size": 256 * 1024},
    "batches of 1 MiB": {"batch_size": 1024 * 1024},
    "lz4": {"compression_type": "lz4"},
    "zstd": {"compression_type": "zstd"},
}


def commits_of(stream, every: int, max_tokens: int = 150_000) -> list:
    model, store = MultinomialNB(**MAIL_OPTIONS), FeedbackStore()
    model.track_last_seen()
    model.mark_changes()
    store.mark_changes()
    commits = []
    for i, (x, label) in enumerate(stream):
        if label is not None:
            model.learn_one(x, label)
        store.remember(str(i), "in:0", x, label)
        if (i + 1) % every == 0 or i == len(stream) - 1:
            model.expire(max_tokens, max_tokens * 3 // 4, old_values=False)
            commits.append(changed_records(model, store))
            model.mark_changes()
            store.mark_changes()
    return commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("stream", choices=["sms", "spamassassin"])
    parser.add_argument("every", type=int, help="messages per commit")
    args = parser.parse_args()
    stream = _featurized_stream(args.stream)
    gc.disable()
    commits = commits_of(stream, args.every)
    gc.enable()
    n_bytes = sum(len(k) + len(v or b"") for records in commits for k, v in records)
    runs = sum(len(v or b"") for records in commits for k, v in records if b'"entries"' in k)
    print(f"{args.stream}, commits of {args.every}: {sum(map(len, commits))} records, "
          f"{n_bytes / 1e6:.1f} MB ({runs / 1e6:.1f} MB of feedback runs)")
    topic = f"bench-produce-{uuid.uuid4().hex[:8]}"
    settings = load_settings(text=settings_text(args.bootstrap, topic, Path("/nonexistent"),
                                                "produce"), environ={})
    create_topics(args.bootstrap, {topic: 1}, {topic: {"cleanup.policy": "compact"}})
    from kafka import codec

    # compression needs its codec's package (lz4, zstandard: not the daemon's dependencies)
    usable = {name: extra for name, extra in SETTINGS.items()
              if getattr(codec, f"has_{extra.get('compression_type', 'gzip')}")()}
    for name in [name for name in SETTINGS if name not in usable]:
        print(f"  {name}: its codec's package is not installed, left out")
    cpu: dict[str, list[float]] = {name: [] for name in usable}
    for _ in range(2):
        for name, extra in usable.items():
            producer = KafkaProducer(**{**transactional_producer_config(
                settings.kafka, f"produce-{uuid.uuid4().hex[:8]}"), **extra})
            producer.init_transactions()
            started = time.process_time()
            for records in commits:
                producer.begin_transaction()
                for key, value in records:
                    producer.send(topic, key=key, value=value, partition=0)
                producer.commit_transaction()
            cpu[name].append(time.process_time() - started)
            producer.close()
    for name, seconds in cpu.items():
        print(f"  {name:20s} " + ", ".join(f"{s / len(stream) * 1e6:.1f}" for s in seconds)
              + " us a message of CPU")


if __name__ == "__main__":
    main()
