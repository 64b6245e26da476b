"""The feedback store's stage of the daemon on a stream, against another checkout.

    python -m bench.feedback_floor spamassassin
    python -m bench.feedback_floor spamassassin --rounds 7 --baseline ../main

Two ways the daemon remembers a stream's messages (featurized as the daemon does), each in
a new store, CPU per message and the page faults per message (the memory the allocator took
from the system again):

* one at a time: ``encode_x`` then ``remember`` for each message (the floor's "feedback
  store" stage of ``bench.bench_daemon --floor``, and the daemon's per-message path);
* a poll at a time: ``encode_x`` for each message of a poll of 500, the encodings held until
  the poll's run is remembered with ``remember_many`` (the batch step with the in-process
  preparer: ``prepare_value`` encodes each message of the poll before the run is applied).

With ``--baseline`` each round runs this script once in each checkout (a fresh process each,
alternating, the other checkout's code and virtual environment), so the two are measured in
the same rounds; medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
POLL = 500


def _cpu_and_faults(step) -> tuple[float, float]:
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    started = time.process_time()
    step()
    return time.process_time() - started, resource.getrusage(
        resource.RUSAGE_SELF).ru_minflt - faults


def child(args: argparse.Namespace) -> None:
    """One round, in the checkout ``args.root``: prints CPU µs and faults per message."""
    sys.path.insert(0, str(args.root))
    sys.path.insert(1, str(HERE.parents[1]))  # this script's helpers, if the root lacks them
    from bench.bench_daemon import _featurized_stream
    from streamnb.daemon.feedback import FeedbackStore

    stream = _featurized_stream(args.stream)
    ids = [str(i) for i in range(len(stream))]
    encode = FeedbackStore.encode_x

    def one_at_a_time() -> None:
        store = FeedbackStore()
        for msg_id, (x, label) in zip(ids, stream, strict=True):
            store.remember(msg_id, "in:0", encode(x), label)

    def a_poll_at_a_time() -> None:
        store = FeedbackStore()
        for start in range(0, len(stream), POLL):
            poll = stream[start:start + POLL]
            x_jsons = [encode(x) for x, _ in poll]
            store.remember_many("in:0", ids[start:start + POLL], x_jsons,
                                [label for _, label in poll])

    n = len(stream)
    figures = []
    for step in (one_at_a_time, a_poll_at_a_time):
        cpu, faults = _cpu_and_faults(step)
        figures += [cpu / n * 1e6, faults / n]
    print(" ".join(f"{figure:.3f}" for figure in figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stream", choices=["sms", "spamassassin"])
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

    outputs = child_rounds(HERE, args.baseline, args.rounds, [args.stream])
    figures = {name: [[float(figure) for figure in out] for out in rounds]
               for name, rounds in outputs.items()}
    load = os.getloadavg()[0]
    print(f"{args.stream}, the feedback store's stage, CPU per message, median of "
          f"{args.rounds} (load {load:.1f}):")
    for name, rounds in figures.items():
        print(f"  {name}:")
        for column, way in ((0, "one at a time (encode_x, remember)"),
                            (2, f"a poll at a time ({POLL}: encode_x each, remember_many)")):
            cpu = [r[column] for r in rounds]
            faults = statistics.median(r[column + 1] for r in rounds)
            print(f"    {way:52s} {statistics.median(cpu):5.2f} us, {faults:.2f} page faults"
                  f"  [rounds: {', '.join(f'{c:.2f}' for c in cpu)}]")


if __name__ == "__main__":
    main()
