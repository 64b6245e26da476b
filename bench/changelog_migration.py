"""What the first commit of token pages costs a slice written in the layout before them.

    python -m bench.changelog_migration spamassassin --legacy <checkout of that layout>

The stream is learned (the daemon benchmark's model, with the default token budget's last-seen
stamps) in the other checkout, whose ``all_records`` writes the slice as a compacted changelog
of its layout holds it (a bucket record per bucket); this checkout reads those records into a
new owner's slice, as a daemon taking the partition over does, and times that and the owner's
first commit, which moves every token into pages and tombstones the earlier keys.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

#: Run in the other checkout: learn the stream, write its slice's records, one JSON line each.
WRITE_LEGACY = """
import sys, orjson
from bench.bench_daemon import MAIL_OPTIONS, _featurized_stream
from streamnb.daemon.changelog import all_records
from streamnb.daemon.feedback import FeedbackStore
from streamnb.models import MultinomialNB
model = MultinomialNB(**MAIL_OPTIONS)
model.track_last_seen()
for x, label in _featurized_stream(sys.argv[1]):
    if label is not None:
        model.learn_one(x, label)
with open(sys.argv[2], "wb") as out:
    for key, value in all_records(model, FeedbackStore()):
        out.write(orjson.dumps([key.decode(), None if value is None else value.decode()]))
        out.write(b"\\n")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stream", choices=["sms", "spamassassin"])
    parser.add_argument("--legacy", type=Path, required=True,
                        help="a checkout of the changelog layout before token pages")
    args = parser.parse_args()
    import streamnb.daemon.changelog as changelog
    from bench.bench_daemon import MAIL_OPTIONS
    from streamnb.daemon.changelog import apply_records, changed_records, no_cyclic_gc
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.models import MultinomialNB

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "legacy.jsonl"
        subprocess.run([sys.executable, "-c", WRITE_LEGACY, args.stream, str(path)],
                       cwd=args.legacy, check=True,
                       env={**os.environ, "PYTHONPATH": str(args.legacy)})
        legacy = [(key.encode(), None if value is None else value.encode())
                  for key, value in map(orjson.loads, path.read_bytes().splitlines())]
    owner = MultinomialNB(**MAIL_OPTIONS)
    owner.track_last_seen()
    store = FeedbackStore()
    with no_cyclic_gc():
        started = time.process_time()
        apply_records(owner, store, "in:0", legacy)
        read = time.process_time() - started
        owner.mark_changes()
        store.mark_changes()
        started = time.process_time()
        records = changed_records(owner, store)
        first = time.process_time() - started
    size = sum(len(key) + len(value or b"") for key, value in records)
    index = changelog._PAGES[owner]
    parts = [index.home, index.listed, index.live, index.stale, *index.listed.values(),
             *(pages for pages in index.stale.values() if type(pages) is list)]
    index_bytes = sum(sys.getsizeof(part) for part in parts)
    kinds = {}
    for key, value in records:
        kind = orjson.loads(key)[1] + (" tombstone" if value is None else "")
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"{args.stream}: {owner.vocabulary_size} tokens in {len(legacy)} records of the "
          f"earlier layout, read in {read:.2f} s CPU; the first commit of pages: "
          f"{len(records)} records ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}),"
          f" {size / 1e6:.1f} MB, {first:.2f} s CPU; its page index: {len(index.home)} homes "
          f"in {len(index.listed)} pages, {index_bytes / 2**20:.1f} MiB (its dicts and lists; "
          "the tokens are the model's)")


if __name__ == "__main__":
    main()
