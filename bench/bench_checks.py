"""Checks over HTTP: streamnb's ``/checkv2`` against rspamd's own, its Bayes classifier alone.

    python -m bench.bench_checks [--train 500] [--concurrency 8,32] [--requests 3000]
        [--rounds 5] [--latency-seconds 8] [--stream 20000] [--check-rate 200]
        [--consuming-rounds 3] [--skip-consuming] [--breakdown] [--keep-topics] [--json]

Same mails, same machine, same run. A ``streamnb run`` subprocess (its HTTP front door on a
free port, its own topics and group, the tuned mail model of ``bench.bench_daemon``) and
rspamd 3.4 as ``bench.peers.filters.RspamdBayesFilter`` starts it (a private redis-server, a
configuration of nothing but the Bayes classifier, one controller process serving
``/checkv2``) both learn the same labelled SpamAssassin mails: the first ``--train`` spam and
``--train`` ham of the corpus in its shuffled order (seed 1), streamnb from labelled records
on its input topic (until ``/stat`` says it learned them all), rspamd through ``/learnspam``
and ``/learnham``. Every other mail of the corpus is then checked, the same request bytes
sent to both:

0. Sanity: each check mail once to each server, every answer parsed: the statuses (all must
   be 200), streamnb's "add header" on spam and on ham, rspamd's BAYES_SPAM on each, and
   both servers' accuracy on the checked mails.
1. Saturation: a closed loop of C concurrent connections (``--concurrency``, each a request
   in flight, the next sent as its answer arrives) over ``--requests`` checks a round, each
   server in turn (the order alternating between rounds); checks/s, median of ``--rounds``
   rounds, and streamnb's over rspamd's round by round (median). Keep-alive where the server
   offers it: rspamd 3.4 answers every request ``Connection: close``, so its client opens a
   connection a check (as rspamc does); streamnb keeps its connections, and a third row gives
   streamnb with a new connection a check too. The CPU a check cost each server (streamnb's
   process; rspamd's processes and its redis-server) and the client is printed beside it.
2. Latency at a fixed rate: an open loop at half of rspamd's saturation rate (its best median
   over the concurrencies), the arrival times fixed in advance (evenly spaced) and each
   latency measured from its request's intended send time, so a queue counts; p50 and p99,
   ``--latency-seconds`` a round, median of the rounds.
3. Checks while consuming: ``--stream`` SpamAssassin records (the corpus again and again under
   new ids, 80% labelled, as ``bench.bench_daemon`` makes them) on a topic of their own; the
   daemon (``bench.bench_daemon.daemon_loop`` in a fresh process and group, its front door
   on, timed by that loop's clock: from its first poll that returned records to the end of
   its final commit) once without checks (the front door idle) and once while the client
   sends ``--check-rate`` checks/s (open loop), alternating the order; both rates, their
   ratio (median of the round-by-round ratios), and the p50/p99 of the checks meant to be
   sent while the clock ran. Checks still unanswered when the daemon closes its front door
   after its final commit are counted apart (status 0), with how long before the end the
   first of them was sent.

``--breakdown`` also times, in this process, the stages of streamnb's check path per mail
(the message id, featurizing, scoring, the reply's JSON), a model trained on the same mails.

The load generator (``bench.http_load``) is the same for both servers: asyncio over raw sockets,
every request encoded before the clock starts, an answer parsed for its status line and
Content-Length only. It runs in this process, on the same two cores as the servers and the
broker: its CPU a check is printed so its share can be judged. ``--json`` prints the figures as
one JSON object instead of the tables. The topics the run made are deleted at its end (unless
``--keep-topics``). Needs the local broker (``scripts/kafka.sh start``), rspamd and redis-server
(``scripts/install-peer-filters.sh``); without rspamd it prints why and stops.
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_daemon import (  # noqa: E402
    DATA,
    KAFKA_SETTING_ENV,
    daemon_loop,
    process_cpu_seconds,
    settings_text,
    spamassassin_values,
)
from bench.http_load import (  # noqa: E402
    Run,
    check_request,
    closed_loop,
    free_port,
    open_loop,
    wait_for_port,
)
from bench.peers.filters import RspamdBayesFilter  # noqa: E402
from streamnb.daemon.kafka_io import create_topics, produce  # noqa: E402
from streamnb.evaluation.corpora import read_corpus  # noqa: E402

SPAM = "spam"
#: The actions with which streamnb (and rspamd) flag a mail as spam.
SPAM_ACTIONS = ("add header", "rewrite subject", "reject")


# ---------------------------------------------------------------------- the mails
@dataclass
class Mails:
    train: list[tuple[bytes, str]]
    check: list[tuple[bytes, str]]


def load_mails(data: Path, per_class: int, checks: int = 0, shuffle: int = 1) -> Mails:
    """The first ``per_class`` spam and ham of the SpamAssassin corpus (shuffled with
    ``shuffle``) to learn, and the others to check (the first ``checks`` of them; 0: all)."""
    corpus = read_corpus(data / "spamassassin", shuffle=shuffle)
    taken = collections.Counter()
    train, check = [], []
    for message in corpus.messages:
        if taken[message.label] < per_class:
            taken[message.label] += 1
            train.append((message.raw, message.label))
        else:
            check.append((message.raw, message.label))
    if min(taken[SPAM], taken["ham"]) < per_class:
        raise SystemExit(f"--train {per_class}: the corpus has {dict(taken)} to learn")
    return Mails(train, check[:checks] if checks else check)


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return orjson.loads(response.read())


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class StreamnbServer:
    """``python -m streamnb run`` (what ``streamnb run`` runs) with its front door on a free
    port, given by the environment as a deployment would (``STREAMNB_HTTP__PORT``,
    ``STREAMNB_HTTP__PASSWORD``), its own input topic and group."""

    name = "streamnb"

    def __init__(self, bootstrap: str, workdir: Path):
        self.bootstrap = bootstrap
        self.topic = f"bench-checks-{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, {self.topic: 1, f"{self.topic}-out": 1,
                                  f"{self.topic}-dlq": 1})
        self.port = free_port()
        config = workdir / "streamnb.toml"
        config.write_text(settings_text(bootstrap, self.topic, workdir, f"{self.topic}-group")
                          .replace('level = "warning"', 'level = "info"'))
        self.log = workdir / "streamnb.log"
        env = {**os.environ, "PYTHONPATH": str(REPO), "STREAMNB_HTTP__PORT": str(self.port),
               "STREAMNB_HTTP__PASSWORD": secrets.token_hex(8)}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamnb", "run", "--config", str(config)],
                cwd=REPO, stdout=log, stderr=log, env=env)

    def wait_serving(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while b"serving checks" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("streamnb did not start serving:\n"
                                   + self.log.read_text(errors="replace")[-2000:])
            time.sleep(0.05)

    def stat(self) -> dict:
        return _get_json(f"http://127.0.0.1:{self.port}/stat")

    def train(self, mails: list[tuple[bytes, str]], timeout: float = 120.0) -> dict:
        """Labelled records on the input topic; returns ``/stat`` once all are learned."""
        produce(self.bootstrap, self.topic, (
            (f"train-{i}".encode(), orjson.dumps({"id": f"train-{i}", "label": label,
                                                  "raw_b64": base64.b64encode(raw).decode()}))
            for i, (raw, label) in enumerate(mails)))
        deadline = time.monotonic() + timeout
        while (stat := self.stat())["learned"] < len(mails):
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamnb learned {stat['learned']} of {len(mails)}")
            time.sleep(0.1)
        return stat

    def pids(self) -> list[int]:
        return [self.proc.pid, *_children(self.proc.pid)]

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class RspamdServer:
    """rspamd 3.4 with its Bayes classifier alone, as ``bench.peers`` runs it."""

    name = "rspamd"

    def __init__(self, workdir: Path):
        self.filter = RspamdBayesFilter()
        self.folder = str(workdir / "rspamd")
        os.makedirs(self.folder)

    def start(self) -> None:
        self.filter.start(self.folder)
        self.port = int(self.filter.url.rsplit(":", 1)[1])

    def train(self, mails: list[tuple[bytes, str]], timeout: float = 60.0) -> dict:
        """Learned through ``/learnspam`` and ``/learnham``; returns ``/stat`` once rspamd
        classifies (it reads its learn counts from redis every second or so)."""
        for raw, label in mails:
            self.filter.learn(raw, label == SPAM, 0.0)
        probe = check_request(next(raw for raw, label in mails if label == SPAM))
        deadline = time.monotonic() + timeout
        while True:
            run = closed_loop(self.port, [probe], 1, 1, keep_bodies=True)
            symbols = orjson.loads(run.bodies[0]).get("symbols", {}) if run.bodies else {}
            if "BAYES_SPAM" in symbols or "BAYES_HAM" in symbols:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("rspamd does not classify after learning")
            time.sleep(0.25)
        return {**_get_json(self.filter.url + "/stat"),
                "refused_learns": getattr(self.filter, "refused", 0)}

    def pids(self) -> list[int]:
        """redis-server's first, then rspamd's main process and its workers."""
        redis, main = (p.pid for p in self.filter.processes)
        return [redis, main, *_children(main)]

    def version(self) -> str:
        return self.filter.version()

    def stop(self) -> None:
        self.filter.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def cpu_of(pids: list[int]) -> float:
    return sum(process_cpu_seconds(pid) or 0.0 for pid in pids)


def timed(server, run) -> tuple[Run, float, float]:
    """``run()``, the CPU seconds ``server``'s processes spent meanwhile, and of those its
    first process's (rspamd's redis-server)."""
    pids = server.pids()
    before, first = cpu_of(pids), cpu_of(pids[:1])
    result = run()
    return result, cpu_of(pids) - before, cpu_of(pids[:1]) - first


# ---------------------------------------------------------------------- the phases
def _flagged(server: str, body: bytes) -> tuple[bool, dict]:
    reply = orjson.loads(body)
    if server == "streamnb":
        return reply["action"] in SPAM_ACTIONS, reply
    return "BAYES_SPAM" in reply.get("symbols", {}), reply


def sanity(servers, mails: Mails, say) -> dict:
    """Each check mail once to each server, every answer read."""
    requests = [check_request(raw) for raw, _ in mails.check]
    out = {}
    for server in servers:
        run = closed_loop(server.port, requests, len(requests), 8, keep_bodies=True)
        flagged = collections.Counter()
        correct, unscored, updates = 0, 0, set()
        for i, (_, label) in enumerate(mails.check):
            if i not in run.bodies:
                continue
            spam, reply = _flagged(server.name, run.bodies[i])
            flagged[label] += spam
            correct += spam == (label == SPAM)
            if server.name == "streamnb":
                updates.add(reply["streamnb"]["model_updates"])
            elif not {"BAYES_SPAM", "BAYES_HAM"} & set(reply.get("symbols", {})):
                unscored += 1
        counts = collections.Counter(label for _, label in mails.check)
        out[server.name] = {
            "statuses": run.statuses, "checked": len(requests),
            "flagged_spam": flagged[SPAM], "spam": counts[SPAM],
            "flagged_ham": flagged["ham"], "ham": counts["ham"],
            "accuracy": correct / len(requests),
            **({"model_updates": sorted(updates)} if server.name == "streamnb"
               else {"unscored": unscored}),
        }
        say(f"  sanity {server.name}: {run.statuses}, flagged {flagged[SPAM]} of "
            f"{counts[SPAM]} spam, {flagged['ham']} of {counts['ham']} ham")
        if run.ok != len(requests):
            raise RuntimeError(f"{server.name} answered {run.statuses} to {len(requests)} "
                               "checks: every check must be answered 200")
    return out


def _rounds_entry(runs: list[tuple[Run, float, float]], n: int, first: str | None) -> dict:
    out = {
        "checks_per_second": [r.sent / r.wall for r, _, _ in runs],
        "median": statistics.median(r.sent / r.wall for r, _, _ in runs),
        "server_cpu_us": statistics.median(cpu / n * 1e6 for _, cpu, _ in runs),
        "client_cpu_us": statistics.median(r.cpu / n * 1e6 for r, _, _ in runs),
        "p50_ms": statistics.median(r.percentile(0.5) * 1e3 for r, _, _ in runs),
        "p99_ms": statistics.median(r.percentile(0.99) * 1e3 for r, _, _ in runs),
        "connections": statistics.median(r.connections for r, _, _ in runs),
        "statuses": _sum_statuses(r for r, _, _ in runs),
    }
    if first:  # of server_cpu_us, the part of the server's first process
        out[f"{first}_cpu_us"] = statistics.median(cpu / n * 1e6 for _, _, cpu in runs)
    return out


def _sum_statuses(runs) -> dict[int, int]:
    total: collections.Counter = collections.Counter()
    for run in runs:
        total.update(run.statuses)
    return dict(total)


def _must_all_be_ok(name: str, run: Run) -> None:
    if run.ok != run.sent:
        raise RuntimeError(f"{name}: {run.statuses} of {run.sent} checks (every check must be "
                           "answered 200)")


def saturation(streamnb: StreamnbServer, rspamd: RspamdServer, mails: Mails, concurrency: int,
               n: int, rounds: int, say) -> dict:
    keep = [check_request(raw) for raw, _ in mails.check]
    close = [check_request(raw, close=True) for raw, _ in mails.check]
    contenders = [("streamnb", streamnb, keep), ("rspamd", rspamd, keep),
                  ("streamnb_close", streamnb, close)]
    runs: dict[str, list[tuple[Run, float, float]]] = {name: [] for name, _, _ in contenders}
    for round_ in range(rounds):
        order = contenders if round_ % 2 == 0 else contenders[::-1]
        for name, server, requests in order:
            result = timed(server, lambda s=server, r=requests: closed_loop(
                s.port, r, n, concurrency))
            _must_all_be_ok(name, result[0])
            runs[name].append(result)
        say(f"  saturation C={concurrency} round {round_ + 1}: " + ", ".join(
            f"{name} {runs[name][-1][0].sent / runs[name][-1][0].wall:,.0f}/s"
            for name, _, _ in contenders))
    # streamnb's checks/s over rspamd's, round by round (the same n: rspamd's time over its)
    ratios = [r.wall / s.wall for (s, _, _), (r, _, _) in
              zip(runs["streamnb"], runs["rspamd"], strict=True)]
    return {"concurrency": concurrency, "requests": n,
            **{name: _rounds_entry(found, n, "redis" if name == "rspamd" else None)
               for name, found in runs.items()},
            "ratios": ratios, "ratio": statistics.median(ratios)}


def latency(streamnb: StreamnbServer, rspamd: RspamdServer, mails: Mails, rate: float,
            seconds: float, rounds: int, connections: int, say) -> dict:
    requests = [check_request(raw) for raw, _ in mails.check]
    n = max(1, round(rate * seconds))
    runs: dict[str, list[Run]] = {"streamnb": [], "rspamd": []}
    for round_ in range(rounds):
        order = (streamnb, rspamd) if round_ % 2 == 0 else (rspamd, streamnb)
        for server in order:
            run = open_loop(server.port, requests, rate, n=n, max_connections=connections)
            _must_all_be_ok(server.name, run)
            runs[server.name].append(run)
        say(f"  latency round {round_ + 1} at {rate:,.0f}/s: " + ", ".join(
            f"{name} p50 {found[-1].percentile(0.5) * 1e3:.2f} ms p99 "
            f"{found[-1].percentile(0.99) * 1e3:.2f} ms" for name, found in runs.items()))
    out = {"rate": rate, "requests": n, "seconds": seconds}
    for name, found in runs.items():
        out[name] = {
            "p50_ms": statistics.median(r.percentile(0.5) * 1e3 for r in found),
            "p99_ms": statistics.median(r.percentile(0.99) * 1e3 for r in found),
            "p50_rounds": [r.percentile(0.5) * 1e3 for r in found],
            "p99_rounds": [r.percentile(0.99) * 1e3 for r in found],
            "achieved_rate": statistics.median(r.sent / r.wall for r in found),
        }
    out["p99_ratio"] = out["streamnb"]["p99_ms"] / out["rspamd"]["p99_ms"]
    return out


def stream_values(n: int) -> list[tuple[bytes, bytes]]:
    """``n`` SpamAssassin records: ``bench.bench_daemon``'s stream (80% labelled) again and
    again, each copy under new ids."""
    base = spamassassin_values()
    out: list[tuple[bytes, bytes]] = []
    copy = 0
    while len(out) < n:
        for key, value, _ in base[:n - len(out)]:
            if copy:
                record = orjson.loads(value)
                record["id"] = f"{record['id']}#{copy}"
                key, value = record["id"].encode(), orjson.dumps(record)
            out.append((key, value))
        copy += 1
    return out


class StandbyScorer:
    """``python -m streamnb serve`` (a standby scorer: the group's model read from its
    changelogs, no partitions) for the group of ``config``, on a free port."""

    def __init__(self, config: Path, workdir: Path):
        self.port = free_port()
        self.log = workdir / "standby.log"
        env = {**os.environ, "PYTHONPATH": str(REPO), "STREAMNB_HTTP__PORT": str(self.port),
               "STREAMNB_METRICS__PORT": "0"}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamnb", "serve", "--config", str(config)],
                cwd=REPO, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + 90
        while b"serving checks" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("streamnb serve did not start serving:\n"
                                   + self.log.read_text(errors="replace")[-2000:])
            time.sleep(0.05)

    def stop(self) -> None:
        stop_process(self.proc)


class DaemonChild:
    """``bench.bench_daemon.daemon_loop`` over ``n`` records of ``topic`` in a fresh process
    (``python -m bench.bench_checks --child``), its front door on ``port``: the daemon's own
    clock, from its first poll that returned records to the end of its final commit, and the
    ``time.monotonic()`` of both moments, read from its output as they happen."""

    def __init__(self, bootstrap: str, topic: str, n: int, port: int | None):
        env = {**os.environ, "PYTHONPATH": str(REPO),
               KAFKA_SETTING_ENV: f"[http] port = {port}" if port else ""}
        # the daemon's log, shown if the run fails (closed in wait())
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_checks", "--child", topic, str(n),
             "--bootstrap", bootstrap], cwd=REPO, stdout=subprocess.PIPE, stderr=self.log,
            text=True, env=env)
        self.moments: dict[str, float] = {}
        self.ended = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            what, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                self.moments[what] = float(value)
            if what in ("end", "wall"):
                self.ended.set()
        self.ended.set()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = 300.0) -> float:
        """The daemon's seconds for the ``n`` records."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise RuntimeError("the daemon's run stalled") from None
        self._reader.join(5)
        self.log.seek(0)
        log = self.log.read().decode(errors="replace")
        self.log.close()
        if code != 0 or "wall" not in self.moments:
            raise RuntimeError(f"the daemon's run failed (exit code {code}):\n{log[-3000:]}")
        return self.moments["wall"]


def child(bootstrap: str, topic: str, n: int) -> None:
    """The daemon loop of ``DaemonChild``: ``start``, ``end`` and ``wall`` lines on stdout."""
    import streamnb.daemon.loop as run_module

    def probe(moment: str) -> None:
        print(moment, time.monotonic(), flush=True)

    # What `streamnb run` does once its daemon is built, as bench_daemon's child does.
    started_up = getattr(run_module, "freeze_start_up_heap", None)
    wall = daemon_loop(bootstrap, topic, n, after_build=started_up, probe=probe)
    print("wall", wall, flush=True)


def consuming(bootstrap: str, mails: Mails, n: int, check_rate: float, rounds: int,
              connections: int, say, created: list[str], standby: StandbyScorer | None = None
              ) -> dict:
    """The daemon's rate over ``n`` records without and with ``check_rate`` checks a second,
    and the latency of the checks meant to be sent while its clock ran; the topic it makes
    is appended to ``created``. The checks go to the daemon's own front door, or with
    ``standby`` to that scorer process (on the same machine; the daemon serves nothing)."""
    topic = f"bench-checks-stream-{uuid.uuid4().hex[:8]}"
    created.append(topic)
    create_topics(bootstrap, {topic: 1, f"{topic}-out": 1, f"{topic}-dlq": 1})
    produce(bootstrap, topic, stream_values(n))
    say(f"  {n} records in {topic}")
    requests = [check_request(raw) for raw, _ in mails.check]
    walls: dict[str, list[float]] = {"without": [], "with": []}
    checks: list[Run] = []
    unanswered: list[float] = []  # seconds before the daemon's end, of checks not answered
    for round_ in range(rounds):
        for kind in (("without", "with") if round_ % 2 == 0 else ("with", "without")):
            port = free_port() if standby is None else standby.port
            daemon = DaemonChild(bootstrap, topic, n, port if standby is None else None)
            try:
                if kind == "with":
                    if standby is None:
                        wait_for_port(port, 120, alive=daemon.alive)
                    run = open_loop(port, requests, check_rate, max_connections=connections,
                                    stop=lambda d=daemon: d.ended.is_set() or not d.alive())
                walls[kind].append(daemon.wait())
            finally:
                if daemon.alive():
                    daemon.proc.kill()
            if kind == "with":
                start, end = daemon.moments["start"], daemon.moments["end"]
                checks.append(run.within(start, end))
                # unanswered: queued when the daemon closed its front door after its last commit?
                unanswered.extend(end - t for t, status in zip(run.intended, run.status,
                                                               strict=True)
                                  if start <= t <= end and status != 200)
        say(f"  consuming round {round_ + 1} ({'daemon' if standby is None else 'standby'} "
            f"serves the checks): without checks {n / walls['without'][-1]:,.0f} "
            f"msg/s, with {n / walls['with'][-1]:,.0f} msg/s; checks meanwhile "
            f"{checks[-1].statuses}, p50 {checks[-1].percentile(0.5) * 1e3:.1f} ms, "
            f"p99 {checks[-1].percentile(0.99) * 1e3:.1f} ms")
    ratios = [w / c for w, c in zip(walls["without"], walls["with"], strict=True)]
    return {
        "records": n, "topic": topic, "check_rate": check_rate,
        "scorer": "daemon" if standby is None else "standby",
        "without": {"rounds": [n / w for w in walls["without"]],
                    "median": statistics.median(n / w for w in walls["without"])},
        "with": {"rounds": [n / w for w in walls["with"]],
                 "median": statistics.median(n / w for w in walls["with"])},
        "ratios": ratios, "ratio": statistics.median(ratios),
        "checks": {
            "p50_ms": statistics.median(r.percentile(0.5) * 1e3 for r in checks),
            "p99_ms": statistics.median(r.percentile(0.99) * 1e3 for r in checks),
            "p50_rounds": [r.percentile(0.5) * 1e3 for r in checks],
            "p99_rounds": [r.percentile(0.99) * 1e3 for r in checks],
            "answered_rate": statistics.median(r.ok / r.wall for r in checks),
            "statuses": _sum_statuses(checks),
            "unanswered": len(unanswered),
            "unanswered_earliest_s_before_end": max(unanswered, default=None),
        },
    }


def breakdown(bootstrap: str, mails: Mails, rounds: int = 3) -> dict:
    """CPU microseconds per check of each stage of streamnb's check path, in this process:
    what ``FrontDoor.check`` runs between aiohttp's reading the body and its writing the
    reply, with the daemon's model options, the model trained on the same mails."""
    from streamnb.codec import Message
    from streamnb.config import load_settings
    from streamnb.models import make_model
    from streamnb.models.presets import resolve
    from streamnb.pipeline import build_pipeline
    from streamnb.serve import policy_of
    from streamnb.serve.rspamd import check_reply, message_id

    settings = load_settings(text=settings_text(bootstrap, "x", Path("."), "x"), environ={})
    table = settings.model.table()
    kind, options = resolve(table)
    pipeline = build_pipeline(table, settings.features)
    model = make_model(kind, **options)
    for raw, label in mails.train:
        model.learn_one(pipeline.prepare(Message(id="", raw=raw)).x, label)
    policy = policy_of(settings, model)
    spent: dict[str, list[float]] = {}
    for _ in range(rounds):
        stages = collections.Counter()
        for raw, _ in mails.check:
            t0 = time.perf_counter()
            mid = message_id(raw)
            t1 = time.perf_counter()
            x = pipeline.prepare(Message(id="", raw=raw)).x
            t2 = time.perf_counter()
            log_proba = model.predict_log_proba_one(x)
            t3 = time.perf_counter()
            verdict = policy.verdict(log_proba)
            orjson.dumps(check_reply(policy, verdict, log_proba, mid=mid, seconds=t3 - t1,
                                     model_updates=model.n_updates,
                                     verdict_header=settings.http.verdict_header))
            t4 = time.perf_counter()
            stages["message id"] += t1 - t0
            stages["featurize"] += t2 - t1
            stages["score"] += t3 - t2
            stages["verdict and JSON reply"] += t4 - t3
        for stage, seconds in stages.items():
            spent.setdefault(stage, []).append(seconds / len(mails.check) * 1e6)
    return {stage: statistics.median(us) for stage, us in spent.items()}


def drop_topics(bootstrap: str, bases: list[str]) -> None:
    """Delete every topic whose name holds one of ``bases`` (a topic this run made: its
    outputs, dead letters and the changelogs of every group that read it hold its name)."""
    if not bases:
        return
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="streamnb-bench-checks")
    try:
        names = [t for t in admin.list_topics() if any(base in t for base in bases)]
        if names:
            admin.delete_topics(names)
    finally:
        admin.close()


# ---------------------------------------------------------------------- the report
def _revision() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=False).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain",
                                                                    "--", "streamnb") else "")


def _rounds(values, fmt: str = "{:,.0f}") -> str:
    return "[" + ", ".join(fmt.format(v) for v in values) + "]"


def _render_consuming(c: dict) -> list[str]:
    k = c["checks"]
    served = ("checks served by the daemon's front door" if c.get("scorer", "daemon") == "daemon"
              else "checks served by a 'streamnb serve' process beside it")
    return ["", f"3. The daemon consuming {c['records']:,} SpamAssassin records (80% "
                f"labelled) from Kafka, {served}, median of {len(c['ratios'])} rounds", "",
              "| | daemon msg/s | checks p50 / p99 ms |", "|---|---|---|",
              f"| without checks | {c['without']['median']:,.0f} "
              f"{_rounds(c['without']['rounds'])} | |",
              f"| with {c['check_rate']:,.0f} checks/s sent | {c['with']['median']:,.0f} "
              f"{_rounds(c['with']['rounds'])} | {k['p50_ms']:.1f} "
              f"{_rounds(k['p50_rounds'], '{:.1f}')} / {k['p99_ms']:.1f} "
              f"{_rounds(k['p99_rounds'], '{:.1f}')} |",
              f"| with / without (target >= 0.85) | **{c['ratio']:.3f}** "
              f"{_rounds(c['ratios'], '{:.3f}')} | |",
              "",
              f"checks meant to be sent while the daemon's clock ran: statuses "
              f"{k['statuses']} (0: unanswered), answered {k['answered_rate']:,.0f}/s "
              f"(median of the rounds); p50/p99 of the answered ones"
              + (f"; {k['unanswered']:,} unanswered when the daemon stopped after its last "
                 f"commit, the first of them sent {k['unanswered_earliest_s_before_end']:.1f}"
                 " s before it (queued behind the client's connections)"
                 if k["unanswered"] else "")]


def render(report: dict) -> str:
    m, s = report["machine"], report["sanity"]
    lines = [
        f"Checks over HTTP: streamnb ({m['revision']}) against {m['rspamd']} (Bayes alone, one "
        f"controller process, redis), {m['cpus']} CPUs shared with the broker, load "
        f"{m['load_before']:.1f} -> {m['load_after']:.1f}",
        f"trained on {report['train']['spam']} spam + {report['train']['ham']} ham SpamAssassin "
        f"mails (streamnb learned {report['train']['streamnb_learned']}, rspamd "
        f"{report['train']['rspamd_learned']}, {report['train']['rspamd_refused']} learns "
        f"refused); checks on {report['train']['checked_mails']:,} other mails",
    ]
    for name in ("streamnb", "rspamd"):
        x = s[name]
        what = '"add header"' if name == "streamnb" else "BAYES_SPAM"
        extra = (f", model_updates {x['model_updates']}" if name == "streamnb"
                 else f", {x['unscored']} without a Bayes symbol")
        lines.append(f"sanity {name}: statuses {x['statuses']}; {what} on {x['flagged_spam']:,} "
                     f"of {x['spam']:,} spam, {x['flagged_ham']:,} of {x['ham']:,} ham; "
                     f"accuracy {x['accuracy']:.4f}{extra}")
    if report.get("saturation"):
        first = report["saturation"][0]
        lines += ["", f"1. Saturation: closed loop, {first['requests']:,} checks a round, "
                      f"median of {len(first['ratios'])} rounds (streamnb keep-alive; rspamd "
                      "closes every connection)", "",
                  "| connections | streamnb checks/s | rspamd checks/s | streamnb / rspamd "
                  "(target >= 2) | streamnb, a connection a check | CPU a check: streamnb / "
                  "rspamd (of it redis) | client CPU a check (streamnb / rspamd) |",
                  "|---|---|---|---|---|---|---|"]
        for row in report["saturation"]:
            sn, rs, sc = row["streamnb"], row["rspamd"], row["streamnb_close"]
            lines.append(
                f"| {row['concurrency']} | {sn['median']:,.0f} {_rounds(sn['checks_per_second'])}"
                f" | {rs['median']:,.0f} {_rounds(rs['checks_per_second'])} | "
                f"**{row['ratio']:.2f}** {_rounds(row['ratios'], '{:.2f}')} | "
                f"{sc['median']:,.0f} {_rounds(sc['checks_per_second'])} | "
                f"{sn['server_cpu_us']:,.0f} / {rs['server_cpu_us']:,.0f} "
                f"({rs['redis_cpu_us']:,.0f}) us | "
                f"{sn['client_cpu_us']:,.0f} / {rs['client_cpu_us']:,.0f} us |")
    if report.get("latency"):
        lat = report["latency"]
        lines += ["", f"2. Latency at {lat['rate']:,.0f} checks/s (half of rspamd's saturation "
                      f"{report['rspamd_saturation']:,.0f}/s), open loop, {lat['requests']:,} "
                      f"checks a round, from the intended send time, median of "
                      f"{len(lat['streamnb']['p50_rounds'])} rounds", "",
                  "| server | p50 ms | p99 ms | achieved checks/s |", "|---|---|---|---|"]
        for name in ("streamnb", "rspamd"):
            x = lat[name]
            lines.append(f"| {name} | {x['p50_ms']:.2f} {_rounds(x['p50_rounds'], '{:.2f}')} | "
                         f"{x['p99_ms']:.2f} {_rounds(x['p99_rounds'], '{:.2f}')} | "
                         f"{x['achieved_rate']:,.0f} |")
        lines.append(f"| p99 streamnb / rspamd (target <= 1) | | **{lat['p99_ratio']:.2f}** | |")
    for key in ("consuming", "consuming_standby"):
        if report.get(key):
            lines += _render_consuming(report[key])
    if report.get("breakdown"):
        b = report["breakdown"]
        lines += ["", "streamnb's check path in this process, per check (median of 3 passes): "
                  + ", ".join(f"{stage} {us:,.0f} us" for stage, us in b.items())
                  + f"; total {sum(b.values()):,.0f} us"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("TOPIC", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--train", type=int, default=500,
                        help="mails of each class both servers learn (default %(default)s)")
    parser.add_argument("--checks", type=int, default=0,
                        help="distinct mails checked, after the learned ones (0: all of them)")
    parser.add_argument("--concurrency", default="8,32",
                        help="the saturation's concurrent connections, comma-separated")
    parser.add_argument("--requests", type=int, default=3000,
                        help="checks a saturation round, a server (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-seconds", type=float, default=8.0,
                        help="length of a latency round, a server (default %(default)s)")
    parser.add_argument("--connections", type=int, default=32,
                        help="the open loop's most connections (default %(default)s)")
    parser.add_argument("--stream", type=int, default=20000,
                        help="records the daemon consumes in part 3 (default %(default)s)")
    parser.add_argument("--check-rate", type=float, default=200.0,
                        help="checks a second while the daemon consumes (default %(default)s)")
    parser.add_argument("--consuming-rounds", type=int, default=3)
    parser.add_argument("--skip-consuming", action="store_true")
    parser.add_argument("--scorer", choices=("daemon", "standby", "both"), default="both",
                        help="part 3: who answers the checks, the consuming daemon's own front "
                        "door or a 'streamnb serve' process beside it (default %(default)s)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the stages of streamnb's check path in this process")
    parser.add_argument("--keep-topics", action="store_true",
                        help="keep the topics the run made (deleted at the end by default)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.child:
        child(args.bootstrap, args.child[0], int(args.child[1]))
        return 0
    concurrencies = [int(c) for c in args.concurrency.split(",") if c]

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rspamd_missing = RspamdBayesFilter().missing()
    if rspamd_missing:
        say(f"bench_checks skipped: rspamd-bayes: {rspamd_missing}")
        return 0
    mails = load_mails(args.data, args.train, args.checks)
    workdir = Path(tempfile.mkdtemp(prefix="streamnb-bench-checks-"))
    report: dict = {"machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
                                "revision": _revision(), "python": sys.version.split()[0]}}
    streamnb = rspamd = None
    created: list[str] = []  # the topics this run made (their outputs and changelogs too)
    try:
        streamnb = StreamnbServer(args.bootstrap, workdir)
        created.append(streamnb.topic)
        rspamd = RspamdServer(workdir)
        rspamd.start()
        report["machine"]["rspamd"] = rspamd.version()
        rspamd_stat = rspamd.train(mails.train)
        streamnb.wait_serving()
        streamnb_stat = streamnb.train(mails.train)
        report["train"] = {
            "spam": args.train, "ham": args.train, "checked_mails": len(mails.check),
            "streamnb_learned": streamnb_stat["learned"],
            "rspamd_learned": rspamd_stat.get("learned"),
            "rspamd_refused": rspamd_stat["refused_learns"],
        }
        say(f"  trained: {report['train']}")
        servers = (streamnb, rspamd)
        report["sanity"] = sanity(servers, mails, say)
        report["saturation"] = [saturation(streamnb, rspamd, mails, c, args.requests,
                                           args.rounds, say) for c in concurrencies]
        best = max(row["rspamd"]["median"] for row in report["saturation"])
        report["rspamd_saturation"] = best
        report["latency"] = latency(streamnb, rspamd, mails, best / 2, args.latency_seconds,
                                    args.rounds, args.connections, say)
        for server in (streamnb, rspamd):
            server.stop()
        if not args.skip_consuming:
            if args.scorer in ("daemon", "both"):
                report["consuming"] = consuming(args.bootstrap, mails, args.stream,
                                                args.check_rate, args.consuming_rounds,
                                                args.connections, say, created)
            if args.scorer in ("standby", "both"):
                # A standby of the trained group of parts 1 and 2 answers the checks.
                standby = StandbyScorer(workdir / "streamnb.toml", workdir)
                try:
                    report["consuming_standby"] = consuming(
                        args.bootstrap, mails, args.stream, args.check_rate,
                        args.consuming_rounds, args.connections, say, created, standby)
                finally:
                    standby.stop()
    finally:
        for server in (streamnb, rspamd):
            if server is not None:
                server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if not args.keep_topics:
            drop_topics(args.bootstrap, created)
    if args.breakdown:
        report["breakdown"] = breakdown(args.bootstrap, mails)
    report["machine"]["load_after"] = os.getloadavg()[0]
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_NON_STR_KEYS).decode())
    else:
        print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
