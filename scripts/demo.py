"""The streamnb demo: a live spam filter learning from a real SMS stream on a local Kafka.

``make demo`` starts the local broker, then runs this script, which:

1. creates three fresh topics (input, predictions, dead letters) and a config for them;
2. starts the daemon (``python -m streamnb run --config ...``) and waits for its partitions;
3. replays ``examples/sms-sample.tsv`` (2,000 real SMS) at a steady rate: 60% arrive with their
   label, 20% arrive unlabelled and get their label later as feedback (some first with a wrong
   label, then corrected, some twice), 20% are never labelled; two malformed records are
   mixed in;
4. prints, every second, the filter's live accuracy: on the predictions it emits for unlabelled
   messages (checked against the true labels, which the filter never saw) and its own
   prequential accuracy from its Prometheus endpoint;
5. stops the daemon with SIGTERM and shows the input offsets it committed with its state (in
   one Kafka transaction with its changelog records) and that it exited cleanly.

It names the run's topics at the start (predictions go to ``demo-<run>-out``, keyed by message
id) and at the end prints the last prediction as the daemon wrote it. The broker is
``--bootstrap``, by default ``$STREAMNB_KAFKA_BOOTSTRAP`` or ``127.0.0.1:$STREAMNB_KAFKA_PORT``
(9092), as for the tests.

Run it again any time: each run uses new topics, a new consumer group (so a new changelog)
and a new folder under ``var/demo/`` for its config and log.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from streamnb.daemon.kafka_io import (  # noqa: E402
    committed_offsets,
    create_topics,
    produce,
    read_all,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    """A few figures from the daemon's /metrics endpoint."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "streamnb_prequential_accuracy":
                out[f"accuracy_{labels['window']}"] = sample.value
            elif sample.name == "streamnb_feedback_total":
                out[f"feedback_{labels['outcome']}"] = sample.value
            elif sample.name == "streamnb_dead_letters_total":
                out[f"dead_{labels['reason']}"] = sample.value
            elif sample.name == "streamnb_learned_total":
                out["learned"] = out.get("learned", 0) + sample.value
    return out


def build_stream(rows: list[tuple[str, str]], seed: int):
    """(key, value) records: labelled, unlabelled + late feedback (some corrected), poison."""
    rng = random.Random(seed)
    records: list[tuple[bytes | None, bytes]] = []
    late: list[tuple[int, str, str]] = []  # (due index, id, label)
    truth: dict[str, str] = {}
    unlabelled: set[str] = set()
    for i, (label, text) in enumerate(rows):
        msg_id = f"sms-{i}"
        truth[msg_id] = label
        roll = rng.random()
        obj: dict = {"id": msg_id, "text": text}
        if roll < 0.6:
            obj["label"] = label
        else:
            unlabelled.add(msg_id)
            if roll < 0.8:
                due = i + rng.randint(50, 400)
                if rng.random() < 0.15:  # a wrong label first, corrected later
                    late.append((due, msg_id, "ham" if label == "spam" else "spam"))
                    late.append((due + rng.randint(20, 200), msg_id, label))
                else:
                    late.append((due, msg_id, label))
                if rng.random() < 0.1:  # the same label sent twice counts once
                    late.append((due + rng.randint(250, 300), msg_id, label))
        records.append((msg_id.encode(), orjson.dumps(obj)))
        if i in (700, 1400):
            records.append((b"poison", b"{this is not json"))
        late.sort()
        while late and late[0][0] <= i:
            _, fb_id, fb_label = late.pop(0)
            records.append(
                (fb_id.encode(), orjson.dumps({"type": "feedback", "id": fb_id, "label": fb_label}))
            )
    for _, fb_id, fb_label in late:
        records.append(
            (fb_id.encode(), orjson.dumps({"type": "feedback", "id": fb_id, "label": fb_label}))
        )
    return records, truth, unlabelled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_bootstrap = os.environ.get(
        "STREAMNB_KAFKA_BOOTSTRAP", f"127.0.0.1:{os.environ.get('STREAMNB_KAFKA_PORT', '9092')}")
    parser.add_argument("--bootstrap", default=default_bootstrap)
    parser.add_argument("--rate", type=float, default=150.0, help="records per second")
    parser.add_argument("--stream", type=Path, default=REPO / "examples" / "sms-sample.tsv")
    args = parser.parse_args()

    rows = [tuple(line.split("\t", 1)) for line in
            args.stream.read_text(encoding="utf-8").splitlines() if line]
    records, truth, unlabelled = build_stream(rows, seed=1)
    run = uuid.uuid4().hex[:8]
    prefix = f"demo-{run}"
    workdir = REPO / "var" / "demo" / run
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # The documented config.toml, with this run's topics etc. as environment overrides.
    config = REPO / "config.toml"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "STREAMNB_KAFKA__BOOTSTRAP_SERVERS": args.bootstrap,
        "STREAMNB_KAFKA__INPUT_TOPICS": f"{prefix}-in",
        "STREAMNB_KAFKA__OUTPUT_TOPIC": f"{prefix}-out",
        "STREAMNB_KAFKA__DEAD_LETTER_TOPIC": f"{prefix}-dlq",
        "STREAMNB_KAFKA__GROUP_ID": f"{prefix}-group",
        "STREAMNB_CHECKPOINT__EVERY_SECONDS": "1.0",
        "STREAMNB_METRICS__HOST": "127.0.0.1",
        "STREAMNB_METRICS__PORT": str(port),
        "STREAMNB_METRICS__WINDOW": "300",
    }
    print(f"demo {run}: {len(rows)} SMS -> {len(records)} records "
          f"({len(unlabelled)} unlabelled, feedback and corrections for some, 2 malformed)")
    create_topics(args.bootstrap, {f"{prefix}-in": 1, f"{prefix}-out": 1, f"{prefix}-dlq": 1})
    print(f"broker {args.bootstrap}; topics: input {prefix}-in, predictions {prefix}-out "
          f"(one JSON record per unlabelled SMS, key = its id), dead letters {prefix}-dlq")

    log_path = workdir / "daemon.log"
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
            cwd=REPO, env=env, stdout=log, stderr=log,
        )
    try:
        deadline = time.monotonic() + 60
        while b"partitions assigned" not in log_path.read_bytes():
            if daemon.poll() is not None or time.monotonic() > deadline:
                print(log_path.read_text()[-2000:], file=sys.stderr)
                print("the daemon did not start; its log is above", file=sys.stderr)
                return 1
            time.sleep(0.1)
        print(f"daemon running (pid {daemon.pid}, log {log_path.relative_to(REPO)}, "
              f"metrics http://127.0.0.1:{port}/metrics)\n")

        predictions: dict[str, str] = {}
        # The latest prediction record, as the daemon wrote it (the first ones come from a
        # model that has learned next to nothing).
        sample: list[bytes] = []
        done = threading.Event()

        def collect(found):
            for record in found[len(predictions):]:
                predictions[record.key.decode()] = orjson.loads(record.value)["label"]
                sample[:] = [record.value]
            return done.is_set() or len(predictions) >= len(unlabelled)

        reader = threading.Thread(
            target=read_all, args=(args.bootstrap, f"{prefix}-out", collect),
            kwargs={"timeout": 600}, daemon=True,
        )
        reader.start()
        sender = threading.Thread(
            target=produce, args=(args.bootstrap, f"{prefix}-in", records),
            kwargs={"rate": args.rate}, daemon=True,
        )
        sender.start()
        print(f"{'time':>5}  {'predicted':>9}  {'accuracy (unlabelled)':>21}  "
              f"{'prequential (recent/all)':>24}  {'feedback learned/relabelled/dup':>31}")
        started = time.monotonic()
        while True:
            time.sleep(1.0)
            figures = scrape(port)
            snapshot = dict(predictions)
            right = sum(truth[m] == label for m, label in snapshot.items())
            acc = f"{right / len(snapshot):.3f}" if snapshot else "-"
            pre = (f"{figures.get('accuracy_recent', float('nan')):.3f} / "
                   f"{figures.get('accuracy_lifetime', float('nan')):.3f}")
            fb = "/".join(str(int(figures.get(f"feedback_{k}", 0)))
                          for k in ("learned", "relabelled", "duplicate"))
            print(f"{time.monotonic() - started:5.0f}  {len(snapshot):9d}  {acc:>21}  "
                  f"{pre:>24}  {fb:>31}", flush=True)
            if not sender.is_alive() and len(snapshot) >= len(unlabelled):
                break
            if time.monotonic() - started > 300:
                print("giving up waiting for predictions", file=sys.stderr)
                break
        time.sleep(1.5)  # one more commit interval, so the summary shows the final state
        figures = scrape(port)
        done.set()

        daemon.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = daemon.wait(timeout=30)
        offsets = {f"{t}:{p}": off for (t, p), off in
                   committed_offsets(args.bootstrap, f"{prefix}-group", f"{prefix}-in").items()}
        right = sum(truth[m] == label for m, label in predictions.items())
        print(f"\npredictions for unlabelled messages: {len(predictions)} of {len(unlabelled)}, "
              f"accuracy {right / max(1, len(predictions)):.3f} (true labels never sent)")
        if sample:
            print(f"one of them, as it is on topic {prefix}-out:\n  {sample[0].decode()}")
        print(f"prequential accuracy on labelled messages (predicted before learning): "
              f"{figures.get('accuracy_lifetime', float('nan')):.3f}")
        print("late feedback: " + ", ".join(
            f"{k} {int(figures.get(f'feedback_{k}', 0))}"
            for k in ("learned", "relabelled", "duplicate", "unknown_id")))
        print(f"dead letters: {int(figures.get('dead_bad_json', 0))} malformed record(s) "
              f"in {prefix}-dlq")
        print(f"SIGTERM: exit code {code} after {time.monotonic() - stopped:.1f} s; "
              f"committed with the state (changelog {prefix}-group-{prefix}-in-changelog): "
              f"{offsets}")
        return 0 if code == 0 else 1
    finally:
        if daemon.poll() is None:
            daemon.kill()


if __name__ == "__main__":
    raise SystemExit(main())
