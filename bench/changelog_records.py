"""How many changelog records a stream's commits make, their bytes and the CPU to make them.

    python -m bench.changelog_records spamassassin 1000
    python -m bench.changelog_records spamassassin 2000 --max-tokens 150000

The stream (``sms`` or ``spamassassin``, featurized as the daemon does) is learned by the
daemon benchmark's model (MultinomialNB, tuned mail options) and remembered in a feedback
store; after every N messages (a commit) ``changed_records`` makes the commit's records, as
the daemon's commit does, without a broker. It uses only the changelog's public functions, so
the same command in a checkout of an earlier changelog layout measures that one.
``--max-tokens N``: the slice stamps its tokens and, before a commit's records are made,
expires down to 3/4 of N when it holds more (the daemon's defaults: 150,000 keep 112,500),
its CPU counted with the records' as the daemon's commit does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamnb.daemon.changelog as changelog  # noqa: E402
from bench.bench_daemon import MAIL_OPTIONS, _featurized_stream  # noqa: E402
from streamnb.daemon.feedback import FeedbackStore  # noqa: E402
from streamnb.models import MultinomialNB  # noqa: E402


def page_pairs(body) -> list:
    """A page's ``[token, value]`` pairs, of either page format (a checkout from before
    columnar pages writes only lists of pairs)."""
    read = getattr(changelog, "page_pairs", None)
    return body if read is None else read(body)


def expire(model, max_tokens: int) -> None:
    """The expiry of a slice that is the whole model (one partition: no old values to read;
    a checkout from before ``old_values`` reads them)."""
    try:
        model.expire(max_tokens, max_tokens * 3 // 4, old_values=False)
    except TypeError:
        model.expire(max_tokens, max_tokens * 3 // 4)


def time_feedback_records(store: FeedbackStore) -> float:
    """CPU seconds of making the feedback records of the commit just made, once more."""
    started = time.process_time()
    changelog._feedback_records(store, store.changed_ids(), store.changed_runs())
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stream", choices=["sms", "spamassassin"])
    parser.add_argument("every", type=int, help="messages per commit")
    parser.add_argument("--max-tokens", type=int, default=0,
                        help="expire the slice to 3/4 of this many tokens when over it")
    args = parser.parse_args()
    stream = _featurized_stream(args.stream)
    model, store = MultinomialNB(**MAIL_OPTIONS), FeedbackStore()
    if args.max_tokens:
        model.track_last_seen()
    model.mark_changes()
    store.mark_changes()
    cpu = expiring = feedback = 0.0
    n_records = n_bytes = n_changed = n_values = 0
    for i, (x, label) in enumerate(stream):
        if label is not None:
            model.learn_one(x, label)
        store.remember(str(i), "in:0", x, label)
        if (i + 1) % args.every == 0 or i == len(stream) - 1:
            n_changed += sum(1 for key in model.changed_keys() if key[0] == "token")
            started = time.process_time()
            with changelog.no_cyclic_gc():  # as the daemon's commit
                if args.max_tokens:
                    expire(model, args.max_tokens)
                expired = time.process_time()
                records = changelog.changed_records(model, store)
            cpu += time.process_time() - started
            expiring += expired - started
            feedback += time_feedback_records(store)
            n_records += len(records)
            n_bytes += sum(len(key) + len(value or b"") for key, value in records)
            n_values += sum(len(page_pairs(orjson.loads(value))) for key, value in records
                            if value is not None and key.startswith(b'[1,"page"'))
            model.mark_changes()
            store.mark_changes()
    budget = f", max_tokens {args.max_tokens}" if args.max_tokens else ""
    print(f"{args.stream}, commits of {args.every}{budget}: {n_records} records, "
          f"{n_bytes / 1e6:.1f} MB, making them {cpu:.2f} s CPU; token values in pages "
          f"{n_values} for {n_changed} changed ({n_values / max(n_changed, 1):.2f} per change)")
    print(f"  of the CPU: expiring {expiring:.2f} s, the feedback runs' records {feedback:.2f} s "
          f"(made again on their own), the token pages and totals the rest")


if __name__ == "__main__":
    main()
