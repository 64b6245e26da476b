"""What a mail's token counts cost the daemon when the prepare process computed them.

    python -m bench.prepare_floor                     # SpamAssassin, 5 rounds
    python -m bench.prepare_floor --stream sms --rounds 7

With ``pipeline.prepare_process = true`` the daemon's own process no longer featurizes, but
with the counts as dicts it would still pay for every message's token counts twice:
rebuilding them (``decode_x`` of the ``x_json`` the child sends) and the model step's
reading of them (``_InternedBatch.read``: each token's row through the model's token table).
Both make or read one ``str`` per token, and on mail they were most of what the daemon's main
thread did besides the changelog. This benchmark measures, on a stream featurized as the
daemon does, a poll (500 records) at a time, the daemon's CPU per message for each way the
counts could cross the pipe:

* ``json``: the dicts as the feedback store keeps them (``x_json``: their JSON, compressed from
  1 KiB of it on), ``decode_x`` of each, then the step's read of them;
* ``pickle`` and ``marshal``: the dicts in those formats instead of JSON, then the read;
* ``numbers, dicts``: the child numbers each token the first time it sees it and sends the
  numbers (and each new token once); the daemon keeps the same list of tokens and rebuilds
  each dict from it (its tokens are then the same ``str`` objects every time, their hashes
  kept), then the read;
* ``numbers``: the daemon's way since, the numbers go straight to the step's batch, with no
  dict (``TokenNumbers`` of ``streamnb.models._prequential``: each number's model row kept,
  the new numbers' rows found through the model's token table), checked here against the C
  read of the dicts for every batch.

The model is the daemon's (the ``mail`` preset); it learns every batch with the step as the
daemon does, so the rows looked up are those of a model that has learned the stream so far.
The forms run in turn within each round (their order rotating); medians of the rounds, and
each form's ratio to ``json`` round by round. The child's side (numbering the tokens, in C:
``streamnb.daemon.prepare.TokenNumbering``) is printed too: with the prepare process it runs
beside the daemon, on another core.
"""

from __future__ import annotations

import argparse
import gc
import marshal
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_daemon import _featurized_stream  # noqa: E402
from streamnb.daemon.feedback import decode_x, encode_x  # noqa: E402
from streamnb.daemon.prepare import MESSAGE, TokenNumbering  # noqa: E402
from streamnb.models import _prequential as prequential  # noqa: E402
from streamnb.models import make_model  # noqa: E402
from streamnb.models._prequential import TokenNumbers  # noqa: E402

POLL = 500


def _c_read(model, xs: list, ys: list) -> tuple:
    batch = prequential._InternedBatch.read(model, xs, ys)
    return batch.ids, batch.values, batch.lengths, batch.distinct_rows, batch.new_keys


def _same(a: tuple, b: tuple) -> bool:
    return (all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4], strict=True))
            and a[4] == b[4])


def _fresh_model():
    return make_model("multinomial", preset="mail")  # the daemon's default model


def round_of(polls: list, forms: list[str]) -> dict[str, float]:
    """CPU µs per message of each form over the whole stream, in the order given."""
    n = sum(len(poll["xs"]) for poll in polls)
    cpu = {}
    for form in forms:
        model = _fresh_model()
        daemon_side = TokenNumbers()
        spent = 0.0
        gc.collect()
        for poll in polls:
            ys = poll["ys"]
            started = time.process_time()
            if form == "json":
                xs = list(map(decode_x, poll["json"]))
                _c_read(model, xs, ys)
            elif form == "pickle":
                xs = list(map(pickle.loads, poll["pickle"]))
                _c_read(model, xs, ys)
            elif form == "marshal":
                xs = list(map(marshal.loads, poll["marshal"]))
                _c_read(model, xs, ys)
            elif form == "numbers, dicts":
                daemon_side.extend(poll["new"])
                get = daemon_side.tokens.__getitem__
                numbers = poll["numbers"].tolist()
                counts = poll["counts"].astype(np.int64).tolist()
                xs, at = [], 0
                for length in poll["lengths"].tolist():
                    xs.append(dict(zip(map(get, numbers[at:at + length]),
                                       counts[at:at + length], strict=True)))
                    at += length
                _c_read(model, xs, ys)
            else:
                daemon_side.extend(poll["new"])
                daemon_side.batch(model, poll["numbers"], poll["counts"], poll["lengths"], ys)
            spent += time.process_time() - started
            model.prequential_many(poll["xs"], ys)  # the model learns as the daemon's does
        cpu[form] = spent / n * 1e6
    return cpu


FORMS = ["json", "pickle", "marshal", "numbers, dicts", "numbers"]


def prepare_polls(stream: list) -> tuple[list, float]:
    """The polls in every form, the daemon's read of numbers checked against the C read of
    the dicts on each, and the child's CPU µs per message numbering the tokens."""
    numbering = TokenNumbering()
    polls = []
    numbering_cpu = 0.0
    for start in range(0, len(stream), POLL):
        chunk = stream[start:start + POLL]
        xs = [dict(x) for x, _ in chunk]
        ys = [label for _, label in chunk]
        results = [(MESSAGE, "", y, x, b"", ()) for x, y in zip(xs, ys, strict=True)]
        started = time.process_time()
        _, new, numbers, counts, _, lengths = numbering.number(results)
        numbering_cpu += time.process_time() - started
        polls.append({
            "xs": xs, "ys": ys,
            "json": [encode_x(x) for x in xs],
            "pickle": [pickle.dumps(x, pickle.HIGHEST_PROTOCOL) for x in xs],
            "marshal": [marshal.dumps(x) for x in xs],
            "new": new, "numbers": numbers, "counts": counts, "lengths": lengths,
        })
    model, daemon_side = _fresh_model(), TokenNumbers()
    for i, poll in enumerate(polls):
        daemon_side.extend(poll["new"])
        batch = daemon_side.batch(model, poll["numbers"], poll["counts"], poll["lengths"],
                                  poll["ys"])
        read = (batch.ids, batch.values, batch.lengths, batch.distinct_rows, batch.new_keys)
        if not _same(read, _c_read(model, poll["xs"], poll["ys"])):
            raise SystemExit(f"poll {i}: the read of numbers differs from the C read")
        model.prequential_many(poll["xs"], poll["ys"])
    return polls, numbering_cpu / len(stream) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", choices=["sms", "spamassassin"], default="spamassassin")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if not prequential.native():
        raise SystemExit("the C step is not built: run `make setup`")
    stream = _featurized_stream(args.stream)
    polls, numbering = prepare_polls(stream)
    rounds = []
    for i in range(args.rounds):
        forms = FORMS[i % len(FORMS):] + FORMS[:i % len(FORMS)]
        rounds.append(round_of(polls, forms))
    tokens = statistics.mean(len(x) for x, _ in stream)
    print(f"{args.stream} ({len(stream)} messages, {tokens:.0f} distinct tokens a message, "
          f"{sum(label is not None for _, label in stream)} labelled), the daemon's CPU per "
          f"message for its token counts and the step's read of them, median of "
          f"{args.rounds} (load {os.getloadavg()[0]:.1f}):")
    for form in FORMS:
        cpu = [r[form] for r in rounds]
        ratio = statistics.median(r[form] / r["json"] for r in rounds)
        print(f"  {form:18s} {statistics.median(cpu):6.1f} us  ({ratio:.2f} of json)  "
              f"[rounds: {', '.join(f'{c:.1f}' for c in cpu)}]")
    print(f"  the child numbering the tokens: {numbering:.1f} us a message; the read of numbers "
          f"gave the C read's batch on all {len(polls)} polls")


if __name__ == "__main__":
    main()
