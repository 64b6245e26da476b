"""Bytes held per vocabulary entry by a text model, and per remembered message by the feedback
store.

    python -m bench.bench_memory [--tokens 300000] [--kind multinomial] [--messages 20000]
                                 [--corpora all|sms]

The inputs are the SpamAssassin and 20 Newsgroups mails (the articles as ham: two classes,
as a spam filter has) and the SMS, featurized once (cached under $TMPDIR), replayed with
perturbations until the model holds ``--tokens`` tokens: in each replay after the first, 16
tokens of every message get the replay's suffix, so new tokens keep
coming as in real mail. The model learns them in a **child process** that reports:

* RSS growth while learning (``/proc/self/status`` VmRSS; the inputs are loaded before; in a
  child without tracemalloc, whose own bookkeeping would count),
* the bytes tracemalloc sees allocated by the model (everything it holds),
* a breakdown: the token index (dict), the token strings, the keys list, the per-row Python
  lists of counts (the short path's copy), the per-row score cache, and the numpy arrays,

each divided by the vocabulary size. Then the feedback store: ``--messages`` messages
remembered as the daemon does (their model input as JSON bytes), RSS and tracemalloc per
message, against its own ``nbytes`` estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
CACHE = Path(tempfile.gettempdir()) / "streamnb-bench-memory-inputs.json"
#: Which inputs: "all" (mail and SMS), or "sms" (short messages only: the short path's rows)
CORPORA = os.environ.get("STREAMNB_BENCH_CORPORA", "all")


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def inputs() -> list[list]:
    """[label, {token: count}] of every mail and SMS, featurized once and cached."""
    selected = CACHE.with_suffix(f".{CORPORA}.json")
    if selected.exists():  # only what is used: a bigger load, freed, would be reused unseen
        return orjson.loads(selected.read_bytes())
    if CACHE.exists():
        out = select(orjson.loads(CACHE.read_bytes()))
        selected.write_bytes(orjson.dumps(out))
        return out
    from streamnb.evaluation.corpora import read_corpus
    from streamnb.pipeline import build_pipeline

    pipeline = build_pipeline({"kind": "multinomial"}, {})
    out = []
    for name in ("spamassassin", "20newsgroups", "sms-spam-collection"):
        for message in read_corpus(DATA / name).messages:
            # a spam filter's two classes: the newsgroup articles are ham
            label = message.label if name != "20newsgroups" else "ham"
            out.append([label, dict(pipeline.prepare(message).x)])
    CACHE.write_bytes(orjson.dumps(out))
    return select(out)


def select(messages: list[list]) -> list[list]:
    return messages[-5574:] if CORPORA == "sms" else messages


def perturbed(messages: list[list], replay: int, rng: random.Random) -> list[list]:
    if replay == 0:
        return messages
    out = []
    for label, x in messages:
        tokens = list(x)
        renamed = set(rng.sample(tokens, min(16, len(tokens))))
        out.append([label, {(f"{t}~{replay}" if t in renamed else t): c for t, c in x.items()}])
    return out


def deep_list_bytes(rows: list, seen: set) -> int:
    total = sys.getsizeof(rows)
    for row in rows:
        if row is None or id(row) in seen:
            continue
        seen.add(id(row))
        total += sys.getsizeof(row)
        for value in row if isinstance(row, list) else ():
            if id(value) not in seen:
                seen.add(id(value))
                total += sys.getsizeof(value)
    return total


def breakdown(model) -> dict[str, int]:
    seen: set = set()
    parts = {
        "index dict": sys.getsizeof(model._index),
        "token strings": sum(sys.getsizeof(k) for k in model._keys),
        "keys list": sys.getsizeof(model._keys),
        "row lists": deep_list_bytes(model._row_counts, seen),
        "row cache": sys.getsizeof(model._row_cache) + sum(
            deep_list_bytes(v, seen) if isinstance(v, list) else sys.getsizeof(v)
            for v in model._row_cache.values()),
        "arrays": sum(a.nbytes for a in (model._counts, model._nnz, model._stale)
                      if a is not None) + (model._seen.nbytes if model._seen is not None else 0),
    }
    parts["total"] = sum(parts.values())
    return parts


def model_child(kind: str, target: int, stamps: bool, traced: bool) -> dict:
    from streamnb.models import make_model

    rng = random.Random(15)
    base = inputs()
    streams = []
    replay = 0
    vocabulary: set = set()
    while len(vocabulary) < target:  # the inputs, before anything is measured
        stream = perturbed(base, replay, rng)
        for _, x in stream:
            vocabulary.update(x)
        streams.append(stream)
        replay += 1
    del vocabulary
    model = make_model(kind)
    if stamps:
        model.track_last_seen()
    before = rss()
    if traced:
        tracemalloc.start()
    n = 0
    for stream in streams:
        for label, x in stream:
            model.prequential_many([x], [label])
            n += 1
            if model.vocabulary_size >= target:
                break
        if model.vocabulary_size >= target:
            break
    grown = rss() - before
    vocab = model.vocabulary_size
    result = {"kind": kind, "stamps": stamps, "messages": n, "vocabulary": vocab,
              "rss_per_token": grown / vocab}
    if traced:
        result["traced_per_token"] = tracemalloc.get_traced_memory()[0] / vocab
        tracemalloc.stop()
        result["breakdown_per_token"] = {k: v / vocab for k, v in breakdown(model).items()}
    return result


def store_child(messages: int, traced: bool) -> dict:
    from streamnb.daemon.feedback import FeedbackStore

    base = inputs()
    xs = [base[i % len(base)][1] for i in range(messages)]
    store = FeedbackStore(max_ids=messages + 1, max_bytes=1 << 40)
    before = rss()
    if traced:
        tracemalloc.start()
    encode = FeedbackStore.encode_x
    for i, x in enumerate(xs):
        # the daemon's decode encodes each input (the store keeps those bytes), and names
        # each record's slice afresh (a new str per record)
        store.remember(f"mail-{i:08d}", f"mail:{i % 1}", encode(x), "ham")
    grown = rss() - before
    traced_bytes = tracemalloc.get_traced_memory()[0] if traced else 0
    tracemalloc.stop()
    payload = sum(len(orjson.dumps(x)) for x in xs)
    return {"messages": messages, "payload_per_message": payload / messages,
            "rss_per_message": grown / messages, "traced_per_message": traced_bytes / messages,
            "estimate_per_message": store.nbytes / messages,
            "note": "the x_json bytes included (encoded as the daemon's decode does)"}


def _streams(target: int) -> list[list]:
    """The perturbed replays that bring the vocabulary to ``target`` tokens."""
    rng = random.Random(15)
    base = inputs()
    streams = []
    replay = 0
    vocabulary: set = set()
    while len(vocabulary) < target:
        stream = perturbed(base, replay, rng)
        for _, x in stream:
            vocabulary.update(x)
        streams.append(stream)
        replay += 1
    return [m for stream in streams for m in stream]


def _partitions(kind: str):
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.daemon.partitions import Partitions
    from streamnb.models import make_model

    def stamped():  # as a daemon with a budget (the default) makes its slices
        model = make_model(kind)
        model.track_last_seen()
        return model

    return Partitions(stamped, lambda key: FeedbackStore(), new_live=lambda: make_model(kind))


def changelog_child(kind: str, target: int, slices: int, path: str) -> dict:
    """Learn the stream into ``slices`` slices as their owners would (message i into slice i
    mod n, until their sum holds ``target`` tokens) and write each slice's changelog records
    (``all_records``, what a compacted changelog holds) to ``path``, one JSON line each."""
    from streamnb.daemon.changelog import all_records

    parts = _partitions(kind)
    keys = [f"in:{p}" for p in range(slices)]
    for key in keys:
        parts.own(key)
    n = 0
    for n, (label, x) in enumerate(_streams(target), 1):
        parts.learn(keys[n % slices], x, label)
        if parts.live.vocabulary_size >= target:
            break
    with open(path, "wb") as out:
        for key in keys:
            part = parts.slices[key]
            for record_key, value in all_records(part.model, part.store):
                out.write(orjson.dumps([key, record_key.decode(),
                                        None if value is None else value.decode()]) + b"\n")
    return {"messages": n}


def slices_child(kind: str, target: int, slices: int, mode: str, path: str) -> dict:
    """RSS growth of the slices a daemon holds and their sum (``live``): ``owned``, learning the
    stream into ``slices`` owned slices (``slices`` 1: one partition, whose slice is live); or
    ``remote``, following the changelog records ``changelog_child`` wrote (``apply_remote``,
    in chunks of 5,000 records, as the daemon applies what it polls)."""
    messages = _streams(target) if mode == "owned" else []  # made before RSS is taken
    parts = _partitions(kind)
    keys = [f"in:{p}" for p in range(slices)]
    before = rss()
    n = 0
    if mode == "owned":
        for key in keys:
            parts.own(key)
        for n, (label, x) in enumerate(messages, 1):
            parts.learn(keys[n % slices], x, label)
            if parts.live.vocabulary_size >= target:
                break
    else:
        with open(path, "rb") as records:
            chunk: list = []
            chunk_key = None
            for line in records:
                key, record_key, value = orjson.loads(line)
                if chunk and (key != chunk_key or len(chunk) >= 5000):
                    n += parts.apply_remote(chunk_key, chunk)
                    chunk = []
                chunk_key = key
                chunk.append((record_key.encode(), None if value is None else value.encode()))
            n += parts.apply_remote(chunk_key, chunk)
    grown = rss() - before
    held = sum(part.model.vocabulary_size for part in parts.slices.values())
    return {"mode": mode, "slices": slices, "applied": n, "vocabulary": parts.live.vocabulary_size,
            "slice_tokens": held, "rss_grown": grown}


def slices_report(kind: str, target: int, slices: int) -> None:
    one = child(["slices", kind, str(target), "1", "owned", ""])
    owned = child(["slices", kind, str(target), str(slices), "owned", ""])
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as records:
        written = child(["changelog", kind, str(target), str(slices), records.name])
        remote = child(["slices", kind, str(target), str(slices), "remote", records.name])
    print(f"a daemon's slices and their sum ({kind}, last-seen stamps on the slices, "
          f"{one['vocabulary']:,} tokens in the sum):")
    for name, result in (("one partition (its slice is the sum)", one),
                         (f"{slices} owned slices + their sum", owned),
                         (f"{slices} remote slices followed from the changelog + their sum "
                          f"({written['messages']:,} messages learned by their owners)", remote)):
        print(f"  {name}: RSS {result['rss_grown'] / 2**20:.0f} MiB "
              f"({result['rss_grown'] / one['rss_grown']:.2f}x one partition), "
              f"{result['slice_tokens']:,} tokens in the slices, {result['vocabulary']:,} "
              "in the sum")


def child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.bench_memory", "--child", *args],
                         cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=300_000)
    parser.add_argument("--kind", default="multinomial")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--corpora", choices=["all", "sms"], default="all",
                        help="sms: the SMS only (short messages, the short path)")
    parser.add_argument("--slices", type=int, help="measure instead a daemon's N slices and "
                        "their sum, owned and followed from the changelog, against one slice")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ["STREAMNB_BENCH_CORPORA"] = args.corpora
    if args.child:
        what = args.child[0]
        if what == "model":
            result = model_child(args.child[1], int(args.child[2]), args.child[3] == "1",
                                 args.child[4] == "1")
        elif what == "slices":
            result = slices_child(args.child[1], int(args.child[2]), int(args.child[3]),
                                  args.child[4], args.child[5])
        elif what == "changelog":
            result = changelog_child(args.child[1], int(args.child[2]), int(args.child[3]),
                                     args.child[4])
        else:
            result = store_child(int(args.child[1]), args.child[2] == "1")
        print(json.dumps(result))
        return 0
    inputs()  # featurize once, outside the measured children
    if args.slices:
        slices_report(args.kind, args.tokens, args.slices)
        return 0
    for stamps in ("0", "1"):
        plain = child(["model", args.kind, str(args.tokens), stamps, "0"])
        result = child(["model", args.kind, str(args.tokens), stamps, "1"])
        print(f"{result['kind']} (last-seen stamps: {bool(int(stamps))}): "
              f"{result['vocabulary']:,} tokens after {result['messages']:,} messages; "
              f"RSS {plain['rss_per_token']:.0f} B/token (without tracemalloc), "
              f"tracemalloc {result['traced_per_token']:.0f} B/token")
        print("  " + ", ".join(f"{k} {v:.0f}" for k, v in result["breakdown_per_token"].items()))
    plain = child(["store", str(args.messages), "0"])
    result = child(["store", str(args.messages), "1"])
    print(f"feedback store: {result['messages']:,} messages, payload "
          f"{result['payload_per_message']:.0f} B/message; RSS {plain['rss_per_message']:.0f} "
          f"(beside the payload, made before), "
          f"tracemalloc {result['traced_per_message']:.0f} (beside the payload), its estimate "
          f"{result['estimate_per_message']:.0f} B/message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
