"""A soak run: the daemon (in a child process) against the real broker over a long stream whose
vocabulary keeps growing, with a token budget against none.

    python -m bench.bench_soak [--bootstrap 127.0.0.1:9092] [--messages 1000000]
                               [--max-tokens 150000] [--expiry-floor 100000]
                               [--mail-share 0.05] [--unbounded-messages N]
                               [--log-dir DIR] [--save soak.json] [--plot docs/soak.png]
    python -m bench.bench_soak --load soak.json [more.json] --plot docs/soak.png  # saved runs

The stream replays the shared corpora again and again, all labelled: SMS messages as ``text``
and, for a ``--mail-share`` of the messages, SpamAssassin's raw mails as ``raw_b64`` (their
original bytes). From its second replay on, each SMS gets ``--new-tokens`` tokens never seen
before and each mail ``--mail-new-tokens`` in its Subject (``zq<replay>x<i>...``), so the
vocabulary keeps growing, as real mail keeps bringing new tokens. The stream is produced once
to a one-partition input topic (by this process, as it is generated: nothing of it is held);
then one daemon per setting reads it, each in a fresh process and group, so its RSS is the
daemon's own: first the budget (``model.max_tokens``, ``model.expiry_floor``) over all
messages, then no budget over ``--unbounded-messages`` of them (default: all). Commits every
1,000 messages (or 2 s).

The changelog topic is created before the daemon starts, compacted as the daemon would create
it but with 16 MiB segments (``segment.bytes``; the broker's default is 1 GiB) so the log
cleaner compacts it during the run, as it would over months. At every commit the child records
the elapsed time, records since its start, its RSS, the slice's vocabulary, the feedback
store's entries and bytes, the changelog bytes written so far, the changelog's size on disk
(its ``.log`` segments under ``--log-dir``, the broker's ``log.dirs``, when given), the
commit's seconds and the tokens expired, and the prequential accuracy so far (labelled
messages predicted right before being learned).
"""

from __future__ import annotations

import argparse
import base64
import logging
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

from streamnb.config import load_settings  # noqa: E402
from streamnb.daemon import build_daemon  # noqa: E402
from streamnb.daemon.changelog import changelog_topic  # noqa: E402
from streamnb.daemon.kafka_io import committed_offsets, create_topics, produce  # noqa: E402

CHANGELOG_SEGMENT_BYTES = 16 * 2**20
SUBJECT = re.compile(rb"(?im)^subject:")


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _new_tokens(rng: random.Random, replay: int, row: int, count: int) -> str:
    return " ".join(f"zq{replay}x{row}n{k}{rng.randrange(10**6)}" for k in range(count))


def stream(n: int, mail_share: float, new_tokens: int = 3, mail_new_tokens: int = 16,
           seed: int = 15) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of ``n`` labelled messages: SMS lines and, for ``mail_share`` of them,
    SpamAssassin mails, each corpus replayed in its order, perturbed from its second replay."""
    rng = random.Random(seed)
    lines = (DATA / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8").splitlines()
    mails = []
    if mail_share:
        from streamnb.evaluation.corpora import read_corpus

        mails = [(m.label, m.raw) for m in read_corpus(DATA / "spamassassin").messages]
    sms_seen = mails_seen = 0
    for i in range(n):
        msg_id = f"soak-{i}"
        if mails and rng.random() < mail_share:
            replay, row = divmod(mails_seen, len(mails))
            mails_seen += 1
            label, raw = mails[row]
            if replay:
                tokens = _new_tokens(rng, replay, row, mail_new_tokens).encode()
                raw, found = SUBJECT.subn(b"Subject: " + tokens, raw, count=1)
                if not found:
                    raw = b"Subject: " + tokens + b"\n" + raw
            obj = {"id": msg_id, "raw_b64": base64.b64encode(raw).decode(), "label": label}
        else:
            replay, row = divmod(sms_seen, len(lines))
            sms_seen += 1
            label, text = lines[row].split("\t", 1)
            if replay:
                text += " " + _new_tokens(rng, replay, row, new_tokens)
            obj = {"id": msg_id, "text": text, "label": label}
        yield msg_id.encode(), orjson.dumps(obj)


def disk_bytes(log_dir: Path | None, topic: str) -> int | None:
    """The bytes of ``topic``'s log segments (partition 0) in the broker's log dir."""
    if log_dir is None:
        return None
    folder = log_dir / f"{topic}-0"
    try:
        return sum(f.stat().st_size for f in folder.iterdir() if f.name.endswith(".log"))
    except FileNotFoundError:  # a segment deleted by the cleaner while listed
        return disk_bytes(log_dir, topic)


class _Trace:
    """tracemalloc from the commit that passes ``start`` records to the one that passes
    ``end``: the growth in between, by source line, printed to stderr."""

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end
        self.first = None

    def at(self, records: int) -> None:
        import tracemalloc

        if self.first is None and records >= self.start:
            tracemalloc.start(8)
            self.first = (records, tracemalloc.take_snapshot())
        elif self.first is not None and records >= self.end and tracemalloc.is_tracing():
            last = tracemalloc.take_snapshot()
            tracemalloc.stop()
            grown = last.compare_to(self.first[1], "lineno")
            n = records - self.first[0]
            total = sum(stat.size_diff for stat in grown)
            print(f"[soak trace] messages {self.first[0]:,} to {records:,}: "
                  f"{total / n:,.0f} B of traced growth a message", file=sys.stderr)
            for stat in grown[:25]:
                frame = stat.traceback[0]
                print(f"[soak trace]   {stat.size_diff / n:8.1f} B/msg {stat.count_diff:+9,} "
                      f"blocks  {frame.filename}:{frame.lineno}", file=sys.stderr)
            print("[soak trace] by file:", file=sys.stderr)
            for stat in last.compare_to(self.first[1], "filename")[:10]:
                print(f"[soak trace]   {stat.size_diff / n:8.1f} B/msg  "
                      f"{stat.traceback[0].filename}", file=sys.stderr, flush=True)


class _Commits(logging.Handler):
    trace: _Trace | None = None

    def __init__(self, daemon_ref: list, right: list, changelog: str, log_dir: Path | None):
        super().__init__()
        self.daemon_ref, self.right = daemon_ref, right
        self.changelog, self.log_dir = changelog, log_dir
        self.started = time.perf_counter()
        self.rows: list[dict] = []
        self.records = 0
        self.bytes = 0
        self.expired = 0

    def emit(self, record):
        if getattr(record, "event", None) != "checkpoint" or not self.daemon_ref:
            return
        self.records += record.records
        self.bytes += record.bytes
        self.expired += record.expired_tokens
        daemon = self.daemon_ref[0]
        stores = [part.store for part in daemon.parts.slices.values()]
        row = {"t": time.perf_counter() - self.started, "records": self.records,
               "rss": rss(), "vocabulary": daemon.live.vocabulary_size,
               "feedback_entries": sum(len(s) for s in stores),
               "feedback_bytes": sum(s.nbytes for s in stores),
               "changelog_bytes": self.bytes,
               "changelog_disk": disk_bytes(self.log_dir, self.changelog),
               "commit_s": record.seconds, "expired": self.expired,
               "right": self.right[0], "labelled": self.right[1]}
        self.rows.append(row)
        if self.trace:
            self.trace.at(self.records)
        if len(self.rows) % 50 == 0:
            print(f"[soak child] {row['records']:,} msgs {row['t']:.0f} s RSS "
                  f"{row['rss'] / 2**20:.0f} MiB vocabulary {row['vocabulary']:,} accuracy "
                  f"{row['right'] / max(row['labelled'], 1):.4f}", file=sys.stderr, flush=True)


def run_one(bootstrap: str, topic: str, limit: int, max_tokens: int, expiry_floor: int,
            log_dir: Path | None, trace: tuple[int, int] | None = None) -> dict:
    prefix = f"soak-{uuid.uuid4().hex[:8]}"
    group = f"{prefix}-group"
    changelog = changelog_topic(group, topic)
    create_topics(bootstrap, {f"{prefix}-out": 1, f"{prefix}-dlq": 1, changelog: 1},
                  {changelog: {"cleanup.policy": "compact",
                               "segment.bytes": str(CHANGELOG_SEGMENT_BYTES)}})
    # tracemalloc's snapshots stop the daemon for many seconds: no transaction may time out
    transaction_timeout = "transaction_timeout_ms = 600000" if trace else ""
    config = Path(tempfile.mkdtemp()) / "config.toml"
    config.write_text(f"""
[kafka]
bootstrap_servers = "{bootstrap}"
input_topics = ["{topic}"]
output_topic = "{prefix}-out"
dead_letter_topic = "{prefix}-dlq"
group_id = "{group}"
start_offset = "earliest"
{transaction_timeout}
[model]
kind = "multinomial"
labels = ["ham", "spam"]
max_tokens = {max_tokens}
expiry_floor = {expiry_floor}
[checkpoint]
every_messages = 1000
every_seconds = 2.0
[metrics]
port = 0
""")
    settings = load_settings(config)
    daemon_ref: list = []
    right = [0, 0]
    handler = _Commits(daemon_ref, right, changelog, log_dir)
    handler.trace = _Trace(*trace) if trace else None
    logging.getLogger("streamnb").addHandler(handler)
    logging.getLogger("streamnb").setLevel(logging.INFO)
    try:
        daemon = build_daemon(settings)
        daemon_ref.append(daemon)
        observe = daemon.metrics.observe_labelled

        def counting(label, predicted, proba):
            if right[1] < limit:  # the daemon may read past the limit before it stops
                right[0] += predicted == label
                right[1] += 1
            observe(label, predicted, proba)

        daemon.metrics.observe_labelled = counting
        handler.started = time.perf_counter()
        runner = threading.Thread(target=daemon.run, daemon=True)
        runner.start()
        while runner.is_alive():
            done = committed_offsets(bootstrap, group, topic)
            if sum(done.values()) >= limit:
                break
            time.sleep(2.0)
        daemon.request_stop()
        runner.join(120)
    finally:
        logging.getLogger("streamnb").removeHandler(handler)
    rows = [row for row in handler.rows if row["records"] <= limit + 1000]
    return {"max_tokens": max_tokens, "expiry_floor": expiry_floor, "rows": rows,
            "accuracy": right[0] / right[1], "labelled": right[1]}


def name_of(result: dict) -> str:
    if result.get("label"):
        return result["label"]
    if not result["max_tokens"]:
        return "no budget"
    return f"max_tokens={result['max_tokens']:,} (floor {result['expiry_floor']:,})"


def report(result: dict) -> None:
    rows = result["rows"]
    print(f"{name_of(result)}: prequential accuracy {result['accuracy']:.4f} over "
          f"{result['labelled']:,} labelled, {rows[-1]['expired']:,} tokens expired")
    marks = sorted({len(rows) // 10 * k for k in range(1, 10)} | {len(rows) - 1})
    previous = None
    for i in marks:
        row = rows[i]
        rate = ""
        if previous is not None:
            per_s = (row["records"] - previous["records"]) / (row["t"] - previous["t"])
            rate = f", {per_s:,.0f} msg/s since the last line"
        disk = row["changelog_disk"]
        disk = "" if disk is None else f" ({disk / 2**20:.1f} MiB on disk)"
        print(f"  {row['records']:>9,} msgs at {row['t']:7.1f} s: RSS {row['rss'] / 2**20:6.1f} "
              f"MiB, vocabulary {row['vocabulary']:>9,}, feedback {row['feedback_entries']:,} "
              f"({row['feedback_bytes'] / 2**20:.1f} MiB), changelog "
              f"{row['changelog_bytes'] / 2**20:7.1f} MiB written{disk}, commit "
              f"{row['commit_s']:.3f} s{rate}")
        previous = row
    commits = sorted(row["commit_s"] for row in rows)
    print(f"  commit seconds: median {commits[len(commits) // 2]:.3f}, 99th percentile "
          f"{commits[len(commits) * 99 // 100]:.3f}, max {commits[-1]:.3f} "
          f"({len(commits):,} commits)")
    pairs = list(zip(rows, rows[1:], strict=False))
    expiring = sorted(b["commit_s"] for a, b in pairs if b["expired"] > a["expired"])
    others = sorted(b["commit_s"] for a, b in pairs if b["expired"] == a["expired"])
    if expiring:
        print(f"  commits that expired: {len(expiring)}, median {median(expiring):.2f} s, max "
              f"{expiring[-1]:.2f} s; the others median {median(others):.2f} s")
    step = int(float(f"{max(rows[-1]['records'] // 10, 1):.0e}"))  # a tenth, one digit
    marks = [next(r for r in rows if r["records"] >= m)
             for m in range(step, rows[-1]["records"] + 1, step)]
    print(f"  msg/s per {step:,} messages: " + ", ".join(
        f"{(b['records'] - a['records']) / (b['t'] - a['t']):,.0f}"
        for a, b in zip(marks, marks[1:], strict=False)))
    late = [r for r in rows if r["records"] >= rows[-1]["records"] * 0.6]
    in_band = sum(1 for r in late if r["rss"] - min(x["rss"] for x in late) < 2**20)
    print(f"  RSS over the last 40 %: {min(r['rss'] for r in late) / 2**20:.1f}–"
          f"{max(r['rss'] for r in late) / 2**20:.1f} MiB, within 1 MiB of its lowest at "
          f"{in_band} of {len(late)} commits")
    disk = [r["changelog_disk"] for r in rows[len(rows) * 15 // 100:]
            if r["changelog_disk"] is not None]
    if disk:
        print(f"  changelog on disk after the first 15 %: {min(disk) / 2**20:.1f}–"
              f"{max(disk) / 2**20:.1f} MiB")


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def accuracy_at(result: dict, labelled: int) -> tuple[float, int]:
    """The prequential accuracy over the first ``labelled`` messages (to the commit that
    reached them), and how many that was."""
    if labelled >= result["labelled"]:
        return result["accuracy"], result["labelled"]
    row = next(r for r in result["rows"] if r["labelled"] >= labelled)
    return row["right"] / row["labelled"], row["labelled"]


def compare(budget: dict, none: dict) -> None:
    n = min(budget["labelled"], none["labelled"])
    with_budget, n_budget = accuracy_at(budget, n)
    without, n_none = accuracy_at(none, n)
    print(f"accuracy with the budget minus without, over the first {min(n_budget, n_none):,} "
          f"messages: {with_budget:.4f} - {without:.4f} = {with_budget - without:+.4f} "
          f"(over {n_budget:,} and {n_none:,})")


def _rates(rows: list[dict], window: int = 10) -> tuple[list, list]:
    """Throughput over windows of ``window`` commits (one commit's interval is noisy)."""
    xs, ys = [], []
    for a, b in zip(rows, rows[window:], strict=False):
        xs.append(b["records"])
        ys.append((b["records"] - a["records"]) / (b["t"] - a["t"]))
    return xs, ys


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(12, 11))
    for result in results:
        rows = result["rows"]
        name = name_of(result)
        x = [r["records"] for r in rows]
        axes[0, 0].plot(x, [r["rss"] / 2**20 for r in rows], label=name)
        axes[0, 1].plot(x, [r["vocabulary"] for r in rows], label=name)
        line, = axes[1, 0].plot(x, [r["changelog_bytes"] / 2**20 for r in rows],
                                label=f"{name}: written")
        if rows[-1]["changelog_disk"] is not None:
            axes[1, 0].plot(x, [r["changelog_disk"] / 2**20 for r in rows], linestyle="--",
                            color=line.get_color(), label=f"{name}: on disk (compacted)")
        axes[1, 1].plot(x, [r["commit_s"] for r in rows], label=name, linewidth=0.6)
        axes[2, 0].plot(*_rates(rows), label=name)
        axes[2, 1].plot(x, [r["right"] / max(r["labelled"], 1) for r in rows], label=name)
    titles = ["RSS (MiB)", "vocabulary (tokens)", "changelog (MiB)", "commit (s)",
              "throughput (msg/s, over 10 commits)", "prequential accuracy so far"]
    for ax, title in zip(axes.flat, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("messages")
        ax.legend(fontsize=8)
    axes[0, 1].set_yscale("log")
    axes[1, 0].set_yscale("log")
    axes[2, 1].set_ylim(0.95, 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--unbounded-messages", type=int,
                        help="messages of the no-budget run (default: all; 0: skip it)")
    parser.add_argument("--max-tokens", type=int, default=150_000)
    parser.add_argument("--expiry-floor", type=int, default=100_000)
    parser.add_argument("--mail-share", type=float, default=0.05)
    parser.add_argument("--new-tokens", type=int, default=3, help="per SMS, from replay 2")
    parser.add_argument("--mail-new-tokens", type=int, default=16, help="per mail, from replay 2")
    parser.add_argument("--log-dir", type=Path, help="the broker's log.dirs")
    parser.add_argument("--save", type=Path, help="write the results (JSON) here")
    parser.add_argument("--load", type=Path, nargs="+", help="report and plot saved results")
    parser.add_argument("--labels", nargs="+", help="names of the loaded runs, in order")
    parser.add_argument("--topic", help="an input topic produced by an earlier run: read it "
                        "again (--messages must be what it holds) instead of producing one")
    parser.add_argument("--only", choices=["budget", "none"], help="run one setting only")
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--trace", help="FROM,TO: tracemalloc the growth between the commits "
                        "at FROM and TO messages (slows the daemon: not for the timed figures)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        topic, limit, max_tokens, floor = args.child
        trace = tuple(int(n) for n in args.trace.split(",")) if args.trace else None
        result = run_one(args.bootstrap, topic, int(limit), int(max_tokens), int(floor),
                         args.log_dir, trace)
        print(orjson.dumps(result).decode())
        return 0
    if args.load:
        results = [result for path in args.load for result in orjson.loads(path.read_bytes())]
        for result, label in zip(results, args.labels or (), strict=False):
            result["label"] = label
        for result in results:
            report(result)
    else:
        results = soak(args)
    budget = [r for r in results if r["max_tokens"]]
    none = [r for r in results if not r["max_tokens"]]
    if budget and none:
        compare(budget[0], none[0])
    if args.plot:
        plot(results, args.plot)
    return 0


def soak(args) -> list[dict]:
    topic = args.topic
    if topic is None:
        topic = f"soak-in-{uuid.uuid4().hex[:8]}"
        create_topics(args.bootstrap, {topic: 1})
        started = time.perf_counter()
        produced = produce(args.bootstrap, topic, stream(args.messages, args.mail_share,
                                                         args.new_tokens, args.mail_new_tokens))
        print(f"produced {produced:,} messages to {topic} in "
              f"{time.perf_counter() - started:.0f} s (mail share {args.mail_share}, "
              f"{args.new_tokens} new tokens an SMS, {args.mail_new_tokens} a mail)", flush=True)
    unbounded = args.messages if args.unbounded_messages is None else args.unbounded_messages
    settings = []
    if args.only != "none":
        settings.append((args.messages, args.max_tokens, args.expiry_floor))
    if unbounded and args.only != "budget":
        settings.append((unbounded, 0, args.expiry_floor))
    results = []
    for limit, max_tokens, floor in settings:  # each in a fresh process: its own RSS
        extra = ["--log-dir", str(args.log_dir)] if args.log_dir else []
        extra += ["--trace", args.trace] if args.trace else []
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_soak", "--bootstrap", args.bootstrap, *extra,
             "--child", topic, str(limit), str(max_tokens), str(floor)],
            cwd=REPO, stdout=subprocess.PIPE, text=True, check=True)
        results.append(orjson.loads(out.stdout.strip().splitlines()[-1]))
        report(results[-1])
        if args.save:  # after each setting: a long run's first half survives the second's end
            args.save.write_bytes(orjson.dumps(results))
    return results


if __name__ == "__main__":
    raise SystemExit(main())
