"""The model step as the daemon runs it, this checkout against another, alternating processes.

Each round runs one process per checkout (its own ``.venv`` if it has one, with that checkout
first on the path), the order alternating from round to round, so the drift of a shared
machine falls on both. Each process featurizes SpamAssassin as the daemon does
(``bench.bench_daemon._featurized_stream``), then steps it with MultinomialNB and the tuned
mail options (``MAIL_OPTIONS``) over polls of 500, ``--repeats`` times:

- ``alone``: ``prequential_many`` on a fresh model (the floor's model step);
- ``daemon``: the slice as the daemon keeps it: last-seen stamps (``track_last_seen``),
  change tracking (``mark_changes``) and, every ``--per-commit`` mails, a commit's state work
  (the default token budget's expiry and ``changed_records``, cyclic GC off), timed apart.

CPU µs per mail, the median over repeats per process, then medians over rounds and the median
of the per-round ratios (this checkout / the other).

    python -m bench.model_step_ab ../main [--rounds 5] [--repeats 3] [--per-commit 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(repeats: int, per_commit: int) -> dict[str, float]:
    """The figures of this process's checkout (the one first on the path: its
    ``streamnb`` and its ``bench.bench_daemon``)."""
    from bench.bench_daemon import MAIL_OPTIONS, POLL_RECORDS, _featurized_stream
    from streamnb.config import ModelSettings
    from streamnb.daemon.changelog import changed_records, no_cyclic_gc
    from streamnb.daemon.feedback import FeedbackStore
    from streamnb.models import make_model

    stream = _featurized_stream("spamassassin")
    n = len(stream)
    chunks = [stream[i:i + POLL_RECORDS] for i in range(0, n, POLL_RECORDS)]
    polls = [([x for x, _ in chunk], [y for _, y in chunk]) for chunk in chunks]
    budget = ModelSettings()
    max_tokens, keep = budget.max_tokens, budget.expiry_keep()

    def alone() -> float:
        model = make_model("multinomial", **MAIL_OPTIONS)
        started = time.process_time()
        for xs, ys in polls:
            model.prequential_many(xs, ys)
        return (time.process_time() - started) / n * 1e6

    def daemon() -> tuple[float, float]:
        model = make_model("multinomial", **MAIL_OPTIONS)
        model.track_last_seen()
        model.mark_changes()
        store = FeedbackStore(10**6, 10**10)
        store.mark_changes()
        step = commit = 0.0
        done = since = 0
        for xs, ys in polls:
            started = time.process_time()
            model.prequential_many(xs, ys)
            step += time.process_time() - started
            done += len(xs)
            since += len(xs)
            if since >= per_commit or done == n:
                started = time.process_time()
                with no_cyclic_gc():
                    model.expire(max_tokens, keep, old_values=False)
                    changed_records(model, store)
                model.mark_changes()
                store.mark_changes()
                commit += time.process_time() - started
                since = 0
        return step / n * 1e6, commit / n * 1e6

    alones, steps, commits = [], [], []
    for _ in range(repeats):
        alones.append(alone())
        step, commit = daemon()
        steps.append(step)
        commits.append(commit)
    return {"alone": statistics.median(alones), "daemon step": statistics.median(steps),
            "daemon commit": statistics.median(commits)}


def run_in(root: Path, repeats: int, per_commit: int) -> dict[str, float]:
    """:func:`child` (this file's) in a process of ``root``'s Python, its code first."""
    python = root / ".venv" / "bin" / "python"
    here = str(Path(__file__).resolve())
    code = ("import importlib.util, json; "
            f"spec = importlib.util.spec_from_file_location('model_step_ab', {here!r}); "
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
            f"print(json.dumps(module.child({repeats}, {per_commit})))")
    out = subprocess.run([str(python if python.exists() else sys.executable), "-c", code],
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (built: make setup)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-commit", type=int, default=2000)
    args = parser.parse_args(argv)
    if not (args.other / "bench" / "bench_daemon.py").exists():
        raise SystemExit(f"{args.other}: not a streamnb checkout")
    mine: list[dict] = []
    theirs: list[dict] = []
    for i in range(args.rounds):
        order = [(REPO, mine), (args.other, theirs)]
        for root, into in order if i % 2 == 0 else order[::-1]:
            into.append(run_in(root, args.repeats, args.per_commit))
        print(f"  round {i + 1}: " + ", ".join(
            f"{key} {mine[-1][key]:.1f} / {theirs[-1][key]:.1f} us" for key in mine[-1]),
            flush=True)
    load = os.getloadavg()[0]
    print(f"model step over SpamAssassin, CPU per mail, medians of {args.rounds} rounds "
          f"(this checkout / {args.other}), load {load:.1f}:")
    for key in mine[0]:
        a = statistics.median(r[key] for r in mine)
        b = statistics.median(r[key] for r in theirs)
        ratio = statistics.median(x[key] / y[key] for x, y in zip(mine, theirs, strict=True))
        print(f"  {key:14s} {a:6.1f} us against {b:6.1f} us  (median ratio {ratio:.3f})")


if __name__ == "__main__":
    main()
