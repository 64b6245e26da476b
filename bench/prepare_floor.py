"""What a mail's token counts cost the daemon when the prepare process computed them.

    python -m bench.prepare_floor                     # SpamAssassin, 5 rounds
    python -m bench.prepare_floor --stream sms --rounds 7

With ``pipeline.prepare_process = true`` the daemon's own process no longer featurizes, but it
still pays for every message's token counts twice: rebuilding them (``orjson.loads`` of the
``x_json`` the child sends) and the model step's reading of them (``_InternedBatch.read``:
each token's row through the model's token table). Both make or read one ``str`` per token,
and on mail they are most of what the daemon's main thread does besides the changelog. This
benchmark measures, on a stream featurized as the daemon does, a poll (500 records) at a time,
the daemon's CPU per message for each way the counts could cross the pipe:

* ``json``: today's way, ``orjson.loads`` of ``x_json``, then the step's read of the dicts;
* ``pickle`` and ``marshal``: the dicts in those formats instead of JSON, then the read;
* ``vocabulary, dicts``: the child numbers each token the first time it sees it and sends the
  numbers (and each new token once); the daemon keeps the same list of tokens and rebuilds
  each dict from it (its tokens are then the same ``str`` objects every time, their hashes
  kept), then the read;
* ``vocabulary, rows``: the numbers go straight to the step's batch, with no dict: the
  daemon keeps each number's model row, finds the new numbers' rows through the model's token
  table, and numbers the batch's new tokens as the C read does (a numpy sketch of that read,
  checked here against the C read's output for every batch).

The model is the daemon's (the ``mail`` preset); it learns every batch with the step as the
daemon does, so the rows looked up are those of a model that has learned the stream so far.
The forms run in turn within each round (their order rotating); medians of the rounds, and
each form's ratio to ``json`` round by round. The child's side (numbering the tokens) is
printed too: with the prepare process it runs beside the daemon, on another core.
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
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_daemon import _featurized_stream  # noqa: E402
from streamnb.daemon.feedback import FeedbackStore  # noqa: E402
from streamnb.models import _prequential as prequential  # noqa: E402
from streamnb.models import make_model  # noqa: E402

POLL = 500


class Vocabulary:
    """The child's numbering of tokens, first seen first, and the list the daemon mirrors."""

    def __init__(self) -> None:
        self.number: dict[str, int] = {}
        self.tokens: list[str] = []

    def encode(self, counts: dict) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The numbers and counts of a message's tokens, in its order, and its new tokens."""
        number, tokens = self.number, self.tokens
        start = len(tokens)
        for token in counts:
            if token not in number:
                number[token] = len(tokens)
                tokens.append(token)
        ids = np.fromiter(map(number.__getitem__, counts), np.int64, len(counts))
        return ids, np.fromiter(counts.values(), np.int64, len(counts)), tokens[start:]


class RowsOfNumbers:
    """The daemon's side of ``vocabulary, rows``: each token number's model row (-1: none yet
    known), for the model's row list ``keys`` (the daemon would start again on another)."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.rows = np.full(1 << 16, -1, dtype=np.int64)
        # per number, scratch of a batch (left at NOWHERE): its first occurrence, its rank
        self.first = np.full(1 << 16, NOWHERE, dtype=np.int64)
        self.rank = np.zeros(1 << 16, dtype=np.int64)

    def extend(self, new_tokens: list[str]) -> None:
        self.tokens += new_tokens
        if len(self.tokens) > self.rows.size:
            size = 2 * len(self.tokens)
            self.rows = _grown(self.rows, size, -1)
            self.first = _grown(self.first, size, NOWHERE)
            self.rank = _grown(self.rank, size, 0)

    def batch(self, model, numbers: np.ndarray, counts: np.ndarray, lengths: np.ndarray,
              labelled: np.ndarray) -> tuple:
        """The C read's output for the batch (see ``_step.c``'s ``intern``): per occurrence
        its distinct token's number in the batch and its count, the distinct tokens by first
        occurrence, their rows (a labelled message's new token: the row it will get), and the
        tokens to index in the loop's order."""
        # each number's first occurrence, without a sort: a scatter of the positions' minimum
        occurrences = np.arange(numbers.size)
        first = self.first
        np.minimum.at(first, numbers, occurrences)
        distinct = numbers[first[numbers] == occurrences]  # in the order first seen
        first[distinct] = NOWHERE
        self.rank[distinct] = np.arange(distinct.size)
        ids = self.rank[numbers]
        rows = self.rows[distinct]
        unknown = np.flatnonzero(rows < 0)
        if unknown.size:  # rows the model made since (or never): through its token table
            found = prequential.table_rows(model, [self.tokens[n] for n in distinct[unknown]])
            rows[unknown] = found
            self.rows[distinct[unknown]] = found
        n_indexed = len(model._keys)
        in_labelled = np.repeat(labelled, lengths)
        candidates = ids[in_labelled & (rows[ids] < 0)]
        new_ids, where = np.unique(candidates, return_index=True)  # a few: the new tokens
        new_ids = new_ids[np.argsort(where, kind="stable")]
        rows[new_ids] = n_indexed + np.arange(new_ids.size)
        self.rows[distinct[new_ids]] = rows[new_ids]
        tokens = self.tokens
        return (ids, counts.astype(np.float64), lengths,
                [tokens[n] for n in distinct], rows, [tokens[n] for n in distinct[new_ids]])


NOWHERE = np.iinfo(np.int64).max


def _grown(array: np.ndarray, size: int, fill: int) -> np.ndarray:
    grown = np.full(size, fill, dtype=array.dtype)
    grown[:array.size] = array
    return grown


def _c_read(model, xs: list, ys: list) -> tuple:
    batch = prequential._InternedBatch.read(model, xs, ys)
    return (batch.ids, batch.values, batch.lengths, batch.distinct, batch.distinct_rows,
            batch.new_keys)


def _same(a: tuple, b: tuple) -> bool:
    return (all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3], strict=True))
            and a[3] == b[3] and np.array_equal(a[4], b[4]) and a[5] == b[5])


def _fresh_model():
    return make_model("multinomial", preset="mail")  # the daemon's default model


def round_of(polls: list, forms: list[str]) -> dict[str, float]:
    """CPU µs per message of each form over the whole stream, in the order given."""
    n = sum(len(poll["xs"]) for poll in polls)
    cpu = {}
    for form in forms:
        model = _fresh_model()
        daemon_side = RowsOfNumbers()
        spent = 0.0
        gc.collect()
        for poll in polls:
            ys = poll["ys"]
            started = time.process_time()
            if form == "json":
                xs = list(map(orjson.loads, poll["json"]))
                _c_read(model, xs, ys)
            elif form == "pickle":
                xs = list(map(pickle.loads, poll["pickle"]))
                _c_read(model, xs, ys)
            elif form == "marshal":
                xs = list(map(marshal.loads, poll["marshal"]))
                _c_read(model, xs, ys)
            elif form == "vocabulary, dicts":
                daemon_side.extend(poll["new"])
                get = daemon_side.tokens.__getitem__
                xs = [dict(zip(map(get, numbers.tolist()), counts.tolist(), strict=True))
                      for numbers, counts in zip(poll["numbers"], poll["counts"], strict=True)]
                _c_read(model, xs, ys)
            else:
                daemon_side.extend(poll["new"])
                daemon_side.batch(model, poll["all_numbers"], poll["all_counts"],
                                  poll["lengths"], poll["labelled"])
            spent += time.process_time() - started
            model.prequential_many(poll["xs"], ys)  # the model learns as the daemon's does
        cpu[form] = spent / n * 1e6
    return cpu


FORMS = ["json", "pickle", "marshal", "vocabulary, dicts", "vocabulary, rows"]


def prepare_polls(stream: list) -> tuple[list, float]:
    """The polls in every form, the sketch checked against the C read on each, and the
    child's CPU µs per message numbering the tokens."""
    vocabulary = Vocabulary()
    polls = []
    numbering = 0.0
    for start in range(0, len(stream), POLL):
        chunk = stream[start:start + POLL]
        xs = [dict(x) for x, _ in chunk]
        started = time.process_time()
        encoded = [vocabulary.encode(x) for x in xs]
        numbering += time.process_time() - started
        numbers = [e[0] for e in encoded]
        polls.append({
            "xs": xs, "ys": [label for _, label in chunk],
            "json": [FeedbackStore.encode_x(x) for x in xs],
            "pickle": [pickle.dumps(x, pickle.HIGHEST_PROTOCOL) for x in xs],
            "marshal": [marshal.dumps(x) for x in xs],
            "numbers": numbers, "counts": [e[1] for e in encoded],
            "new": [token for e in encoded for token in e[2]],
            "all_numbers": np.concatenate(numbers),
            "all_counts": np.concatenate([e[1] for e in encoded]),
            "lengths": np.array([len(x) for x in xs], dtype=np.int64),
            "labelled": np.array([label is not None for _, label in chunk]),
        })
    model, daemon_side = _fresh_model(), RowsOfNumbers()
    for i, poll in enumerate(polls):
        daemon_side.extend(poll["new"])
        sketch = daemon_side.batch(model, poll["all_numbers"], poll["all_counts"],
                                   poll["lengths"], poll["labelled"])
        if not _same(sketch, _c_read(model, poll["xs"], poll["ys"])):
            raise SystemExit(f"poll {i}: the rows sketch differs from the C read")
        model.prequential_many(poll["xs"], poll["ys"])
    return polls, numbering / len(stream) * 1e6


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
    print(f"  the child numbering the tokens (Python): {numbering:.1f} us a message; the "
          f"rows sketch gave the C read's output on all {len(polls)} polls")


if __name__ == "__main__":
    main()
