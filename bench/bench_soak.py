"""A soak run: the daemon (in a child process) against the real broker over a long stream whose
vocabulary keeps growing, with a token budget against none.

    python -m bench.bench_soak [--bootstrap 127.0.0.1:9092] [--messages 100000]
                               [--max-tokens 20000] [--plot docs/soak.png]

The stream is the SMS collection replayed again and again, all labelled; from the second
replay on, each message gets three tokens never seen before (``zq<replay>x<i>...``), so the
vocabulary grows by about three tokens a message, as real mail keeps bringing new ones. It is
produced to a one-partition input first, then one daemon per setting reads it, each in a
fresh process (commits every 1,000 messages; RSS includes the stream held in memory to
produce it, the same for both). At every commit the run records the elapsed time, records
since the start, the process RSS, the vocabulary of the slice, the changelog bytes written so
far and the commit's seconds; at the end the prequential accuracy (labelled messages predicted
right before being learned). Both settings run in fresh topics, one after the other, in this
order: budget, then none.
"""

from __future__ import annotations

import argparse
import logging
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

from streamnb.config import load_settings  # noqa: E402
from streamnb.daemon import build_daemon  # noqa: E402
from streamnb.daemon.kafka_io import committed_offsets, create_topics, produce  # noqa: E402


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def stream(n: int, seed: int = 15) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    lines = (DATA / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8").splitlines()
    out = []
    for i in range(n):
        replay, row = divmod(i, len(lines))
        label, text = lines[row].split("\t", 1)
        if replay:
            text += " " + " ".join(f"zq{replay}x{row}n{k}{rng.randrange(10**6)}" for k in range(3))
        msg_id = f"soak-{i}"
        out.append((msg_id.encode(), orjson.dumps({"id": msg_id, "text": text, "label": label})))
    return out


class _Commits(logging.Handler):
    def __init__(self, daemon_ref: list, started: float):
        super().__init__()
        self.daemon_ref, self.started = daemon_ref, started
        self.rows: list[dict] = []
        self.records = 0
        self.bytes = 0

    def emit(self, record):
        if getattr(record, "event", None) != "checkpoint" or not self.daemon_ref:
            return
        self.records += record.records
        self.bytes += record.bytes
        daemon = self.daemon_ref[0]
        self.rows.append({"t": time.perf_counter() - self.started, "records": self.records,
                          "rss": rss(), "vocabulary": daemon.live.vocabulary_size,
                          "changelog_bytes": self.bytes, "commit_s": record.seconds})


def run_one(bootstrap: str, values: list, max_tokens: int) -> dict:
    prefix = f"soak-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {f"{prefix}-in": 1, f"{prefix}-out": 1, f"{prefix}-dlq": 1})
    produce(bootstrap, f"{prefix}-in", values)
    config = Path(tempfile.mkdtemp()) / "config.toml"
    config.write_text(f"""
[kafka]
bootstrap_servers = "{bootstrap}"
input_topics = ["{prefix}-in"]
output_topic = "{prefix}-out"
dead_letter_topic = "{prefix}-dlq"
group_id = "{prefix}-group"
start_offset = "earliest"
[model]
kind = "multinomial"
labels = ["ham", "spam"]
max_tokens = {max_tokens}
expiry_floor = 0
[checkpoint]
every_messages = 1000
every_seconds = 2.0
[metrics]
port = 0
""")
    settings = load_settings(config)
    daemon_ref: list = []
    handler = _Commits(daemon_ref, time.perf_counter())
    logging.getLogger("streamnb").addHandler(handler)
    logging.getLogger("streamnb").setLevel(logging.INFO)
    right = [0, 0]
    try:
        daemon = build_daemon(settings)
        daemon_ref.append(daemon)
        observe = daemon.metrics.observe_labelled

        def counting(label, predicted, proba):
            right[0] += predicted == label
            right[1] += 1
            observe(label, predicted, proba)

        daemon.metrics.observe_labelled = counting
        handler.started = time.perf_counter()
        runner = threading.Thread(target=daemon.run, daemon=True)
        runner.start()
        while True:
            done = committed_offsets(bootstrap, f"{prefix}-group", f"{prefix}-in")
            if sum(done.values()) >= len(values):
                break
            time.sleep(1.0)
        daemon.request_stop()
        runner.join(120)
    finally:
        logging.getLogger("streamnb").removeHandler(handler)
    return {"max_tokens": max_tokens, "rows": handler.rows, "accuracy": right[0] / right[1],
            "labelled": right[1]}


def report(result: dict) -> None:
    rows = result["rows"]
    name = f"budget {result['max_tokens']:,}" if result["max_tokens"] else "no budget"
    print(f"{name}: prequential accuracy {result['accuracy']:.4f} over "
          f"{result['labelled']:,} labelled")
    marks = sorted({len(rows) // 10 * k for k in range(1, 11)} | {len(rows) - 1})
    previous = None
    for i in marks:
        row = rows[i]
        rate = ""
        if previous is not None:
            per_s = (row["records"] - previous["records"]) / (row["t"] - previous["t"])
            rate = f", {per_s:,.0f} msg/s since the last line"
        print(f"  {row['records']:>8,} msgs at {row['t']:7.1f} s: RSS {row['rss'] / 2**20:6.1f} "
              f"MiB, vocabulary {row['vocabulary']:>8,}, changelog "
              f"{row['changelog_bytes'] / 2**20:7.1f} MiB written, commit {row['commit_s']:.3f} s"
              f"{rate}")
        previous = row


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for result in results:
        rows = result["rows"]
        name = f"max_tokens={result['max_tokens']:,}" if result["max_tokens"] else "no budget"
        x = [r["records"] for r in rows]
        axes[0, 0].plot(x, [r["rss"] / 2**20 for r in rows], label=name)
        axes[0, 1].plot(x, [r["vocabulary"] for r in rows], label=name)
        axes[1, 0].plot(x, [r["commit_s"] for r in rows], label=name)
        rates = [0.0] + [(b["records"] - a["records"]) / (b["t"] - a["t"])
                         for a, b in zip(rows, rows[1:], strict=False)]
        axes[1, 1].plot(x, rates, label=name)
    for ax, title in zip(axes.flat, ["RSS (MiB)", "vocabulary (tokens)", "commit (s)",
                                     "throughput (msg/s, per commit interval)"], strict=True):
        ax.set_title(title)
        ax.set_xlabel("messages")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--max-tokens", type=int, default=20_000)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(orjson.dumps(run_one(args.bootstrap, stream(args.messages), args.child)).decode())
        return 0
    results = []
    for max_tokens in (args.max_tokens, 0):  # each in a fresh process: its own RSS
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_soak", "--bootstrap", args.bootstrap,
             "--messages", str(args.messages), "--child", str(max_tokens)],
            cwd=REPO, capture_output=True, text=True, check=True)
        result = orjson.loads(out.stdout.strip().splitlines()[-1])
        report(result)
        results.append(result)
    print(f"accuracy with the budget minus without: "
          f"{results[0]['accuracy'] - results[1]['accuracy']:+.4f}")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
