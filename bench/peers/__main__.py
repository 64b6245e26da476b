"""``python -m bench.peers``: streamnb beside river, scikit-learn and bogofilter on one stream.

Each (stream, filter) pair runs in its own Python process, so peak memory is that filter's
alone: the table reports the growth of the process's peak RSS from the moment the stream was
loaded (for bogofilter: the largest bogofilter process, plus its word list on disk). Every
filter is scored by ``streamnb.evaluation.scoring`` from its own per-message scores.

    python -m bench.peers                       # all streams and filters, print the table
    python -m bench.peers --write docs/benchmarks.md
    python -m bench.peers --streams sms --peers streamnb,bogofilter --limit 1000
    python -m bench.peers --peers streamnb,bogofilter --set model.alpha=0.1 --cache /tmp/peers
    python -m bench.peers --streams spamassassin+subject-noblank --peers streamnb,bogofilter
    python -m bench.peers --views all --cache DIR --write docs/benchmarks.md   # the whole table

A stream name ``<stream>+<view>`` replays the stream's mail in one of the forms public corpora
come in (``streamnb.evaluation.views``: subject-blank, subject-noblank, body-only, html-text).
``--views all`` (or a list) adds each view of every mail stream after it; the view streams run
the filters of ``--view-peers`` (default ``mail``: streamnb and the outside mail filters; the
Python baselines compare models on streamnb's tokens, which the originals show already).

streamnb runs with ``./config.toml`` (``--config``, ``--set`` as in ``streamnb evaluate``).
``--cache DIR`` keeps every other filter's row and reuses it on the next run with the same
stream and limit, so trying streamnb options against bogofilter costs streamnb's time only.

river's BernoulliNB loops over its whole vocabulary for every message, so on mail it would run
for hours: it stops after ``--budget`` seconds, and its row covers the messages it reached and
says so. Every other filter runs the whole stream.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.peers.filters import BUDGETED, MAIL_FILTERS, PEERS, CommandPeer, make_filter
from bench.peers.streams import DEFAULT_DATA, STREAMS, load, stream_named, with_views
from streamnb.evaluation import scoring
from streamnb.evaluation.options import Tables
from streamnb.evaluation.views import VIEWS

REPO = Path(__file__).resolve().parents[2]
# Per-row notes an outside filter reports about its own settings and work.
SETTING_NOTES = ("learnt", "min_learns", "min_tokens", "refused_learns",
                 "refused_as_already_learned")
BEGIN = "<!-- peers:begin -->"
END = "<!-- peers:end -->"


def _maxrss_bytes(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # Linux reports KiB


def run_child(
    stream_name: str,
    peer: str,
    data: Path,
    limit: int | None,
    budget: float,
    tables: Tables | None = None,
) -> dict:
    stream = stream_named(stream_name)
    messages = load(stream, data, limit)
    classes = sorted({m.label for m in messages})
    flt = make_filter(peer, classes, tables)
    flt.warm_up()
    baseline = _maxrss_bytes(resource.RUSAGE_SELF)
    run = flt.run(messages, budget if peer in BUDGETED else math.inf)
    peak_growth = _maxrss_bytes(resource.RUSAGE_SELF) - baseline
    y = np.array([label == "spam" for label in run.labels])
    predicted = np.array([p == "spam" for p in run.predicted])
    correct = np.array([p == t for p, t in zip(run.predicted, run.labels, strict=True)])
    figures = {
        "stream": stream_name,
        "peer": peer,
        "n": len(run.labels),
        "n_stream": len(messages),
        "limit": limit,
        "finished": run.finished,
        "accuracy": float(correct.mean()),
        **scoring.binary_report(y, np.array(run.scores, dtype=float), predicted),
        "msgs_per_s": len(run.labels) / run.seconds if run.seconds else None,
        "model_msgs_per_s": (
            len(run.labels) / run.seconds_model if run.seconds_model else None
        ),
        "peak_memory_bytes": peak_growth,
        "commit": _commit(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        **run.notes,
    }
    if isinstance(flt, CommandPeer):  # its work is in its own processes, its state on disk
        figures["peak_memory_bytes"] = _maxrss_bytes(resource.RUSAGE_CHILDREN) + run.notes.get(
            "wordlist_bytes", 0
        )
    return figures


def _commit() -> str:
    """The code a row was measured with (a cached row may be older than the table)."""
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=REPO,
        check=False,
    )
    return done.stdout.strip() or "?"


def _machine() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import river
    import sklearn

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "river": river.__version__,
        "scikit-learn": sklearn.__version__,
        "os": platform.platform(),
        "load": "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg()),
    }


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    return format(value, spec)


def side_by_side(rows: list[dict]) -> str:
    """One line per stream, one column per filter: (1-ROCA)% and, in brackets, spam recall at
    0.1% FPR; the best of each figure on a stream in bold (full-stream rows only). The mail
    filters (``MAIL_FILTERS``) come first."""
    streams = list(dict.fromkeys(r["stream"] for r in rows))
    ran = list(dict.fromkeys(r["peer"] for r in rows))  # the mail filters first, then the rest
    peers = [p for p in MAIL_FILTERS if p in ran] + [p for p in ran if p not in MAIL_FILTERS]
    found = {(r["stream"], r["peer"]): r for r in rows}
    lines = [
        "| stream | " + " | ".join(peers) + " |",
        "|---|" + "---:|" * len(peers),
    ]
    for stream in streams:
        measured = [
            found[stream, p] for p in peers
            if (stream, p) in found and "n" in found[stream, p] and found[stream, p]["finished"]
        ]
        best_auc = min((r["one_minus_auc_pct"] for r in measured), default=None)
        best_recall = max((r["spam_recall_at_fpr_0.1pct"] for r in measured), default=None)
        cells = []
        for peer in peers:
            r = found.get((stream, peer))
            if r is None:
                cells.append("")
            elif "n" not in r:
                cells.append("skipped" if "unavailable" in r else "failed")
            else:
                auc, recall = r["one_minus_auc_pct"], r["spam_recall_at_fpr_0.1pct"]
                auc_text, recall_text = _fmt(auc, ".4f"), _fmt(recall, ".3f")
                if r["finished"] and auc == best_auc:
                    auc_text = f"**{auc_text}**"
                if r["finished"] and recall == best_recall:
                    recall_text = f"**{recall_text}**"
                budget = "" if r["finished"] else f", {r['n']:,} msgs (budget)"
                cells.append(f"{auc_text} ({recall_text}{budget})")
        lines.append(f"| {stream} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    lines = [
        "| stream | filter | messages | accuracy | (1-ROCA)% | lam% | spam recall @ 0.1% FPR "
        "| msgs/s | model msgs/s | peak memory MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['stream']} | {r['peer']} | failed: {r['error'][:80]} |||||||")
            continue
        if "unavailable" in r:
            lines.append(f"| {r['stream']} | {r['peer']} | skipped: {r['unavailable']} |||||||")
            continue
        n = f"{r['n']:,}" if r["finished"] else f"{r['n']:,} of {r['n_stream']:,} (budget)"
        lines.append(
            f"| {r['stream']} | {r['peer']} | {n} | {_fmt(r['accuracy'], '.4f')} "
            f"| {_fmt(r.get('one_minus_auc_pct'), '.4f')} | {_fmt(r.get('lam_pct'), '.3f')} "
            f"| {_fmt(r.get('spam_recall_at_fpr_0.1pct'), '.3f')} "
            f"| {_fmt(r['msgs_per_s'], ',.0f')} | {_fmt(r['model_msgs_per_s'], ',.0f')} "
            f"| {_fmt(r['peak_memory_bytes'] / 2**20, '.1f')} |"
        )
    return "\n".join(lines)


def render(rows: list[dict], machine: dict, command: str) -> str:
    streams = {r["stream"] for r in rows}
    described = "\n".join(
        f"- **{name}**: {stream_named(name).description}" for name in sorted(streams)
    )
    streamnb_options = sorted({r["options"] for r in rows if r.get("options")})
    options = "".join(f"streamnb options: `{o}`.\n\n" for o in streamnb_options)
    measured = [r for r in rows if "n" in r]
    commits = sorted({r.get("commit", "?") for r in measured})
    if len(commits) > 1:
        options += (
            "Rows measured with different code (cached rows): "
            + "; ".join(
                f"{r['stream']}/{r['peer']} {r.get('commit', 'before c97fb56')}"
                for r in measured
            )
            + ".\n\n"
        )
    versions = sorted({r["version"] for r in measured if r.get("version", "?") != "?"})
    settings = "".join(
        f"- {r['stream']} / {r['peer']}: "
        + ", ".join(f"{k} {r[k]}" for k in SETTING_NOTES if k in r) + "\n"
        for r in measured if any(k in r for k in SETTING_NOTES)
    )
    if settings:
        settings = f"Settings and counts the outside filters reported:\n\n{settings}\n"
    limited = "".join(
        f"- {r['stream']}: first {r['n_stream']:,} messages (`--limit`/`--stream-limit`)\n"
        for r in {r["stream"]: r for r in measured if r.get("limit")}.values()
    )
    return (
        f"{BEGIN}\n"
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        f"Machine: {machine['nproc']} CPUs ({machine['cpu']}), Python {machine['python']}, "
        f"numpy {machine['numpy']}, river {machine['river']}, scikit-learn "
        f"{machine['scikit-learn']}; {'; '.join(versions) or 'no outside filter'}; "
        f"{machine['os']}. "
        f"Load average at the end of the run: {machine.get('load', '?')} (the speed columns are "
        f"comparable only within one run, and only as far as the load allows).\n\n"
        f"{described}\n{limited}\n{options}"
        "(1-ROCA)% (lower is better; four decimals, the Chinese set's figures are small) and, "
        "in brackets, the share of spam caught at 0.1% false "
        "positives (higher is better); the best of each on a stream in bold:\n\n"
        f"{side_by_side(rows)}\n\nAll figures:\n\n{table(rows)}\n\n{settings}{END}"
    )


def write_doc(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = (text.rstrip() + "\n\n" if text else "# Benchmarks\n\n") + block + "\n"
    path.write_text(text, encoding="utf-8")


def _peer_names(spec: str) -> list[str]:
    """``--peers``: names, or ``mail`` (the mail filters side by side) / ``all``."""
    names: list[str] = []
    for name in (p.strip() for p in spec.split(",")):
        group = {"mail": MAIL_FILTERS, "all": PEERS}.get(name, (name,) if name else ())
        names += [n for n in group if n not in names]
    return names


def _stream_limits(specs: list[str]) -> dict[str, int]:
    """``--stream-limit NAME=N`` (repeatable): the first N messages of that stream only."""
    limits = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        if name not in STREAMS or not value.isdigit() or int(value) < 1:
            raise ValueError(f"--stream-limit {spec!r}: expected STREAM=N, STREAM one of "
                             f"{', '.join(STREAMS)}")
        limits[name] = int(value)
    return limits


def _run_one(args: argparse.Namespace, stream: str, peer: str, limit: int | None) -> dict:
    """One (stream, filter) row: from the cache, skipped (program missing), or measured."""
    flt = make_filter(peer, ["ham", "spam"])
    if isinstance(flt, CommandPeer) and (why := flt.missing()) is not None:
        print(f"{stream} / {peer}: skipped, {why}", file=sys.stderr)
        return {"stream": stream, "peer": peer, "unavailable": why}
    command = [
        sys.executable, "-m", "bench.peers", "--child", stream, peer,
        "--data", str(args.data), "--budget", str(args.budget),
    ]
    if limit:
        command += ["--limit", str(limit)]
    if peer == "streamnb":
        if args.config:
            command += ["--config", str(Path(args.config).resolve())]
        for override in args.overrides:
            command += ["--set", override]
    cached = None
    if args.cache and peer != "streamnb":
        budget = f"-{args.budget:g}s" if peer in BUDGETED else ""
        cached = args.cache / f"{stream}-{peer}-{limit or 'all'}{budget}.json"
        if cached.exists():
            print(f"{stream} / {peer}: from {cached}", file=sys.stderr)
            return json.loads(cached.read_text())
    print(f"{stream} / {peer} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  failed: {error}", file=sys.stderr)
        return {"stream": stream, "peer": peer, "error": error}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(row))
    print(
        f"  (1-ROCA)% {_fmt(row.get('one_minus_auc_pct'), '.4f')}, "
        f"recall @ 0.1% FPR {_fmt(row.get('spam_recall_at_fpr_0.1pct'), '.3f')}, "
        f"accuracy {row['accuracy']:.4f}, {_fmt(row['msgs_per_s'], ',.0f')} msgs/s",
        file=sys.stderr,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--streams", default=",".join(STREAMS), help="comma-separated")
    parser.add_argument(
        "--peers", default="all",
        help="comma-separated names; 'mail': " + ",".join(MAIL_FILTERS) + "; 'all' (default)",
    )
    parser.add_argument(
        "--views", default="",
        help="'all' or comma-separated views (" + ",".join(VIEWS[1:]) + ") to add after each "
        "mail stream (default: none)",
    )
    parser.add_argument(
        "--view-peers", default="mail",
        help="the filters run on the view streams: names, 'mail' (default) or 'all'",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, help="first N messages of each stream")
    parser.add_argument(
        "--stream-limit", dest="stream_limits", action="append", default=[],
        metavar="STREAM=N", help="first N messages of that stream (repeatable; beats --limit)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds river-bernoulli may run per stream (default 300)",
    )
    parser.add_argument("--write", type=Path, metavar="FILE.md", help="update the table in FILE")
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="also save the raw rows")
    parser.add_argument(
        "--config", metavar="FILE", help="streamnb's options (default: ./config.toml)"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override one of streamnb's options (repeatable)",
    )
    parser.add_argument(
        "--cache", type=Path, metavar="DIR", help="reuse the other filters' rows kept in DIR"
    )
    parser.add_argument("--child", nargs=2, metavar=("STREAM", "PEER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        tables = Tables.load(args.config).with_overrides(args.overrides)
        figures = run_child(*args.child, args.data, args.limit, args.budget, tables)
        print(json.dumps(figures))
        return 0

    streams = [s.strip() for s in args.streams.split(",") if s.strip()]
    views = list(VIEWS[1:]) if args.views == "all" else [
        v.strip() for v in args.views.split(",") if v.strip()
    ]
    for view in views:
        if view not in VIEWS:
            parser.error(f"unknown view {view!r}; known: {', '.join(VIEWS[1:])} (or 'all')")
    peers = _peer_names(args.peers)
    view_peers = [p for p in _peer_names(args.view_peers) if p in peers]
    for name in streams:
        try:
            stream_named(name)
        except KeyError:
            parser.error(f"unknown stream {name!r}; known: {', '.join(STREAMS)}, each also as "
                         f"<stream>+<view> with a view of streamnb.evaluation.views")
    for name in peers:
        if name not in PEERS:
            parser.error(
                f"unknown filter {name!r}; known: {', '.join(PEERS)} (or 'mail', 'all')"
            )
    for name in _peer_names(args.view_peers):
        if name not in PEERS:
            parser.error(f"--view-peers: unknown filter {name!r}; known: {', '.join(PEERS)}")
    try:
        limits = _stream_limits(args.stream_limits)
    except ValueError as error:
        parser.error(str(error))
    rows = []
    for stream in with_views(streams, views):
        base = stream.partition("+")[0]
        limit = limits.get(stream, limits.get(base, args.limit))
        for peer in peers if "+" not in stream or stream in streams else view_peers:
            rows.append(_run_one(args, stream, peer, limit))
    invocation = "python -m bench.peers" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    block = render(rows, _machine(), invocation)
    print(block)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.write:
        write_doc(args.write, block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
