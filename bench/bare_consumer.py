"""The ceiling of ``bench_daemon``: a bare kafka-python consumer reading a topic, nothing else.

    python -m bench.bare_consumer TOPIC N [--bootstrap 127.0.0.1:9092] [--max-poll-records 500]

Prints the wall and CPU seconds it took to read ``N`` records, timed from the first batch.

It runs in a process of its own that imports kafka-python only. A process that has also
imported the daemon's libraries (river, numpy, prometheus-client) holds hundreds of thousands
of objects more, which Python's cyclic garbage collector walks again and again while
kafka-python allocates its records: that doubles the consumer's CPU per record, and would
make the ceiling look lower than a user's own consumer reaches.
"""

from __future__ import annotations

import argparse
import time

from kafka import KafkaConsumer


def read(bootstrap: str, topic: str, n: int, max_poll_records: int = 500) -> tuple[float, float]:
    """(wall, CPU) seconds to read ``n`` records of ``topic`` from the start, from the first
    batch on."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=max_poll_records,
    )
    seen = 0
    started = cpu_started = None
    try:
        while seen < n:
            for records in consumer.poll(timeout_ms=200).values():
                if started is None:
                    started, cpu_started = time.perf_counter(), time.process_time()
                seen += len(records)
        return time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        consumer.close(autocommit=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topic")
    parser.add_argument("n", type=int)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--max-poll-records", type=int, default=500)
    args = parser.parse_args()
    wall, cpu = read(args.bootstrap, args.topic, args.n, args.max_poll_records)
    print(wall, cpu)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
