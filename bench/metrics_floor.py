"""The metrics' cost in the daemon's SMS loop, against another checkout.

    python -m bench.metrics_floor
    python -m bench.metrics_floor --rounds 7 --baseline ../main [--sms-copies 5]
    python -m bench.metrics_floor --rounds 7 --baseline ../main --in-loop 127.0.0.1:<port>

The SMS stream is featurized as the daemon does and scored by the daemon's model
(MultinomialNB with the tuned mail options) in polls of 500 with the batch step
(``prequential_many``), each prediction labelled with ``first_best``, as ``_apply_run``
does; each poll's labelled messages are one run of ``(label, predicted, probabilities)``
observations. Then, in a fresh ``Metrics`` each time, CPU per labelled observation of:

* queue + fold: ``observe_labelled_many`` for each run (with the folds it makes every 4,096
  observations), then the fold of what is left (what a scrape does first);
* the latency histograms: ``observe_latencies`` with a latency per record and
  ``observe_end_to_end_many`` with one per unlabelled record, a poll at a time (what
  ``_flush_tally`` hands over; the amounts are drawn from a fixed seed), per input record;
* a scrape (``generate_latest`` of the metrics' registry) after it all, in milliseconds.

Each figure is the median of five passes in the process, after the daemon's start-up freeze
of the heap and its collector threshold (``freeze_start_up_heap``).

``--in-loop HOST:PORT`` measures the same calls inside the daemon's loop instead (the
benchmark's ``daemon_loop`` over the SMS stream in a topic of that broker, one loop a
round): the main thread's CPU (``thread_time``) in ``observe_labelled_many`` (its folds
included), ``observe_latencies`` and ``observe_end_to_end_many``, per input record, and
the loop's wall time per record. There the observations are no longer in the CPU's caches
when they are folded, and numpy's calls run between the loop's other work.

With ``--baseline``
each round runs this script once in each checkout (a fresh process each, alternating, the
other checkout's code and virtual environment); medians of the rounds. Every child also
prints a digest of the state (``to_state``) and of what ``/metrics`` serves (less the
counters' creation times): the two checkouts must agree, or the script fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
POLL = 500
PASSES = 5


def _runs(copies: int) -> tuple[list[list[tuple]], list[int]]:
    """Each poll's labelled observations, as ``_apply_run`` hands them over, and the number
    of unlabelled records of each poll."""
    from bench.bench_daemon import MAIL_OPTIONS, _featurized_stream
    from streamnb.models import MultinomialNB
    from streamnb.models._base import first_best

    stream = _featurized_stream("sms")
    stream = stream * copies  # a copy's records are the stream's, under other ids
    model = MultinomialNB(**MAIL_OPTIONS)
    runs, unlabelled = [], []
    for start in range(0, len(stream), POLL):
        poll = stream[start:start + POLL]
        probas = model.prequential_many([x for x, _ in poll], [y for _, y in poll])
        runs.append([(y, first_best(p), p) for (_, y), p in zip(poll, probas, strict=True)
                     if y is not None])
        unlabelled.append(len(poll) - len(runs[-1]))
    return runs, unlabelled


def child(args: argparse.Namespace) -> None:
    """One round, in the checkout ``args.root``: prints the figures and the digests."""
    sys.path.insert(0, str(args.root))
    sys.path.insert(1, str(HERE.parents[1]))  # this script's helpers, if the root lacks them
    from prometheus_client import generate_latest

    from streamnb.daemon.loop import freeze_start_up_heap
    from streamnb.metrics import Metrics

    runs, unlabelled = _runs(args.sms_copies)
    n_labelled = sum(map(len, runs))
    n_records = n_labelled + sum(unlabelled)
    rng = random.Random(7)
    latencies = [[rng.lognormvariate(-9.5, 0.7) for _ in range(len(run) + idle)]
                 for run, idle in zip(runs, unlabelled, strict=True)]
    end_to_end = [[rng.lognormvariate(-5.0, 1.0) for _ in range(idle)] for idle in unlabelled]
    freeze_start_up_heap()

    def scraped(m: Metrics) -> bytes:
        return b"\n".join(line for line in generate_latest(m.registry).splitlines()
                          if b"_created" not in line)

    queue_fold, histograms, scrape = [], [], []
    for _ in range(PASSES):
        m = Metrics()
        fresh = [[*run] for run in runs]  # a list of its own per run, as _apply_run's
        started = time.process_time()
        for run in fresh:
            m.observe_labelled_many(run)
        with m._lock:
            m._fold()
        queue_fold.append((time.process_time() - started) / n_labelled * 1e6)
        started = time.process_time()
        for amounts, waits in zip(latencies, end_to_end, strict=True):
            m.observe_latencies(amounts)
            if waits:
                m.observe_end_to_end_many(waits)
        histograms.append((time.process_time() - started) / n_records * 1e6)
        started = time.process_time()
        served = scraped(m)
        scrape.append((time.process_time() - started) * 1e3)
    state = json.dumps(m.to_state(), sort_keys=True).encode()
    print(f"{statistics.median(queue_fold):.4f} {statistics.median(histograms):.4f} "
          f"{statistics.median(scrape):.4f} {n_labelled} {n_records} "
          f"{hashlib.sha256(state).hexdigest()[:16]} {hashlib.sha256(served).hexdigest()[:16]}")


def in_loop(args: argparse.Namespace) -> None:
    """One round inside the daemon's loop, in the checkout ``args.root``: prints the metrics
    calls' CPU per record and the loop's wall time per record."""
    sys.path.insert(0, str(args.root))
    sys.path.insert(1, str(HERE.parents[1]))
    import bench.bench_daemon as bench_daemon
    from streamnb.daemon.loop import freeze_start_up_heap
    from streamnb.metrics import Metrics

    spent = {"observe_labelled_many": 0.0, "observe_latencies": 0.0,
             "observe_end_to_end_many": 0.0}

    def timed(name: str) -> None:
        call = getattr(Metrics, name)

        def timed_call(*call_args, **kwargs):
            started = time.thread_time()
            try:
                return call(*call_args, **kwargs)
            finally:
                spent[name] += time.thread_time() - started

        setattr(Metrics, name, timed_call)

    for name in spent:
        timed(name)
    topic, n = args.child_loop[0], int(args.child_loop[1])
    wall = bench_daemon.daemon_loop(args.in_loop, topic, n, after_build=freeze_start_up_heap)
    print(f"{spent['observe_labelled_many'] / n * 1e6:.4f} "
          f"{(spent['observe_latencies'] + spent['observe_end_to_end_many']) / n * 1e6:.4f} "
          f"{wall / n * 1e6:.2f} {n}")


def main_in_loop(args: argparse.Namespace) -> None:
    from bench.alternate import child_rounds
    from bench.bench_daemon import create_topics, produce, sms_values

    values = sms_values(copies=args.sms_copies)
    topic = f"bench-metrics-{os.getpid()}-{int(time.time())}"
    create_topics(args.in_loop, {topic: 1, f"{topic}-out": 1, f"{topic}-dlq": 1})
    produce(args.in_loop, topic, ((k, v) for k, v, _ in values))
    outputs = child_rounds(HERE, args.baseline, args.rounds,
                           ["--in-loop", args.in_loop, "--child-loop", topic, str(len(values))])
    load = os.getloadavg()[0]
    print(f"metrics inside the daemon's loop over the SMS stream ({len(values)} records in "
          f"{topic}), main thread's CPU per record, median of {args.rounds} rounds "
          f"(load {load:.1f}):")
    for name, rounds in outputs.items():
        print(f"  {name}:")
        for column, what in ((0, "observe_labelled_many (with its folds)"),
                             (1, "the latency histograms"), (2, "the loop's wall time")):
            figures = [float(r[column]) for r in rounds]
            print(f"    {what:42s} {statistics.median(figures):7.3f} us"
                  f"  [rounds: {', '.join(f'{f:.2f}' for f in figures)}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sms-copies", type=int, default=1,
                        help="the SMS stream this many times over (one model learning it all)")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alternately")
    parser.add_argument("--in-loop", metavar="HOST:PORT",
                        help="time the calls inside the daemon's loop, with this broker")
    parser.add_argument("--root", type=Path, default=HERE.parents[1], help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-loop", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        (in_loop if args.in_loop else child)(args)
        return
    # imported here, not at the top: the child runs with the other checkout's code first
    # on its path, which may have no bench.alternate
    sys.path.insert(0, str(HERE.parents[1]))
    if args.in_loop:
        main_in_loop(args)
        return
    from bench.alternate import child_rounds

    outputs = child_rounds(HERE, args.baseline, args.rounds,
                           ["--sms-copies", str(args.sms_copies)])
    load = os.getloadavg()[0]
    first = next(iter(outputs.values()))[0]
    print(f"metrics over the SMS stream ({first[4]} records, {first[3]} labelled, "
          f"polls of {POLL}), CPU, median of {args.rounds} rounds (load {load:.1f}):")
    digests = {}
    for name, rounds in outputs.items():
        print(f"  {name}:")
        for column, what, unit in (
                (0, "queue + fold, per labelled observation", "us"),
                (1, "latency histograms, per record", "us"),
                (2, "a scrape afterwards", "ms")):
            figures = [float(r[column]) for r in rounds]
            print(f"    {what:42s} {statistics.median(figures):7.3f} {unit}"
                  f"  [rounds: {', '.join(f'{f:.3f}' for f in figures)}]")
        digests[name] = {tuple(r[5:7]) for r in rounds}
    if len({frozenset(d) for d in digests.values()}) > 1 or any(
            len(d) > 1 for d in digests.values()):
        sys.exit(f"the checkouts' metrics differ (state and scrape digests): {digests}")
    print("  state and /metrics: the same in every round and checkout "
          f"({' '.join(next(iter(next(iter(digests.values())))))})")


if __name__ == "__main__":
    main()
