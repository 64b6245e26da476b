"""``streamnb serve``: a scorer that holds the group's global model without partitions.

A daemon of the group learns into the slices of its partitions and commits their changes to
the compacted changelogs; every daemon reads the others' slices from there. A *standby* does
only the reading: it restores every slice from the changelogs (``read_committed``), keeps
following them, and answers checks with the sum of the slices, the model every daemon
predicts with (each commit reaches it about one commit interval later, as it reaches the other
daemons). It joins no consumer group, so starting or stopping scorers never moves a partition:
checks scale apart from learning. Learns are written to the input topic as the daemon's front
door writes them, and the group learns them.

Several scorers may listen on one port of one host (``SO_REUSEPORT``; the kernel spreads
connections over them), beside a daemon that serves the same port.

The steps, in order:

1. bind ``http.host:http.port`` and ``metrics.port`` (a port in use: exit 2, one line);
2. read every changelog partition of the group's input topics to its committed end;
3. serve checks, and follow the changelogs on the main thread until SIGTERM or SIGINT (or,
   for a scorer a daemon started, until that daemon is gone);
4. on a stop, stop accepting, answer what is in flight (up to a second), close.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from streamnb.config import ConfigError, Settings, load_settings
from streamnb.logs import configure_logging
from streamnb.serve.scorers import READY_ENV

__all__ = ["Standby", "add_arguments", "main"]

log = logging.getLogger("streamnb.serve")

#: How long a follow poll waits for changelog records.
FOLLOW_POLL_MS = 100


class Standby:
    """Every slice of the group, read from the changelogs and followed; ``live`` their sum.

    ``follower`` reads the changelog partitions
    (:class:`~streamnb.daemon.kafka_io.ChangelogFollower`, or a fake with its methods);
    ``changelogs`` maps each input topic to its changelog topic.
    """

    def __init__(self, settings: Settings, follower: Any, changelogs: dict[str, str]):
        from streamnb.daemon.partitions import Partitions
        from streamnb.models import make_model
        from streamnb.models.presets import resolve

        kind, options = resolve(settings.model.table())
        max_tokens = settings.model.max_tokens

        def new_model() -> Any:
            return make_model(kind, **options)

        def new_slice() -> Any:  # as the daemon's: stamped when its owner expires tokens
            model = new_model()
            if max_tokens:
                model.track_last_seen()
            return model

        self.follower = follower
        self.input_of = {changelog: topic for topic, changelog in changelogs.items()}
        self.parts = Partitions(new_slice, lambda key: None, new_live=new_model)
        self.lock = threading.Lock()
        self.caught_up_at = time.monotonic()

    @property
    def live(self) -> Any:
        return self.parts.live

    def restore(self, timeout: float) -> int:
        """Read every changelog partition to its committed end; returns the records read.
        Only ``timeout`` seconds without any record is an error."""
        from streamnb.daemon.changelog import ChangelogError

        tps = self.follower.assign_from_start(self.input_of)
        with self.lock:
            for tp in tps:
                self.parts.slice(self._key(tp))
        ends = self.follower.ends()
        applied, deadline = 0, time.monotonic() + timeout
        while any(position < ends[tp] for tp, position in self.follower.positions().items()):
            got = self._apply(self.follower.poll(200), follow=False)
            if got:
                applied += got
                deadline = time.monotonic() + timeout
            elif time.monotonic() > deadline:
                raise ChangelogError(f"the changelogs gave no record for {timeout:.0f} s "
                                     "before their end")
        with self.lock:
            self.parts.resum()
        self.caught_up_at = time.monotonic()
        return applied

    def follow(self, timeout_ms: int = FOLLOW_POLL_MS) -> int:
        """Apply what the changelogs have gained; returns the records applied."""
        applied = self._apply(self.follower.poll(timeout_ms), follow=True)
        if not self.follower.lag():
            self.caught_up_at = time.monotonic()
        return applied

    def _key(self, tp: tuple[str, int]) -> str:
        from streamnb.daemon.partitions import slice_key

        return slice_key((self.input_of[tp[0]], tp[1]))

    def _apply(self, records: list, follow: bool) -> int:
        """Apply polled changelog records (each partition's in log order) under the lock."""
        from streamnb.daemon.changelog import ChangelogError

        by_partition: dict[tuple[str, int], list] = {}
        for record in records:
            by_partition.setdefault(record.tp, []).append(record)
        applied = 0
        for tp, items in by_partition.items():
            with self.lock:
                try:
                    applied += self.parts.apply_remote(
                        self._key(tp), [(r.key, r.value) for r in items], follow)
                except ChangelogError as error:
                    raise ChangelogError(f"changelog {tp[0]}:{tp[1]} offsets "
                                         f"{items[0].offset}-{items[-1].offset}: "
                                         f"{error}") from None
        return applied

    def stats(self) -> dict:
        from streamnb.serve import model_stats

        with self.lock:
            return {**model_stats(self.live, len(self.parts.slices)),
                    "staleness_seconds": round(time.monotonic() - self.caught_up_at, 3)}


# ---------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default="config.toml", help="settings file (default: config.toml); "
        "[http] port must be set (or STREAMNB_HTTP__PORT)")


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"streamnb: {error}", file=sys.stderr)
        return 2
    if not settings.http.port:
        print("streamnb: http.port: 0 serves nothing: set [http] port or STREAMNB_HTTP__PORT",
              file=sys.stderr)
        return 2
    configure_logging(settings.logging.level, settings.logging.format)
    stopping = threading.Event()
    try:
        server, standby = _start(settings, stopping)
    except _StartError as error:
        print(f"streamnb: {error}", file=sys.stderr)
        return 2
    # Started by a daemon (http.scorers): it goes when the daemon goes, however that ends (a
    # kill -9 leaves no one to stop it, and a restarted daemon starts scorers of its own).
    daemon_pid = os.getppid() if os.environ.get(READY_ENV) else None
    try:
        while not stopping.is_set():
            standby.follow()
            if daemon_pid is not None and os.getppid() != daemon_pid:
                log.warning("the daemon that started this scorer (pid %d) is gone: stopping",
                            daemon_pid, extra={"event": "daemon_gone"})
                break
    except Exception:
        log.exception("stopping on an unexpected error", extra={"event": "failed"})
        return 1
    finally:
        server.stop()
        standby.follower.close()
    log.info("stopped", extra={"event": "stopped"})
    return 0


class _StartError(RuntimeError):
    """Something ``streamnb serve`` checks at start failed; one line naming the setting."""


def _start(settings: Settings, stopping: threading.Event) -> tuple[Any, Standby]:
    from prometheus_client import CollectorRegistry, Gauge, start_http_server

    from streamnb import __version__
    from streamnb.daemon import startup
    from streamnb.daemon.changelog import ChangelogError, changelog_topic
    from streamnb.daemon.kafka_io import ChangelogFollower, KafkaReadError
    from streamnb.serve import serve_model
    from streamnb.serve.server import BindError, bind

    try:
        listener = bind(settings.http, reuse_port=True)
    except BindError as error:
        raise _StartError(str(error)) from None
    registry = CollectorRegistry()
    if settings.metrics.port:
        try:
            start_http_server(settings.metrics.port, addr=settings.metrics.host,
                              registry=registry)
        except OSError as error:
            raise _StartError(f"metrics.port: cannot serve /metrics on {settings.metrics.host}:"
                              f"{settings.metrics.port}: {error.strerror or error} "
                              "(metrics.host, metrics.port; 0 disables)") from None
    kafka = settings.kafka
    try:
        startup.check_kafka(settings)  # the broker answers, the login and the inputs are good
    except startup.StartupError as error:
        raise _StartError(str(error)) from None
    follower = ChangelogFollower(kafka)
    changelogs = {topic: changelog_topic(kafka.group_id, topic) for topic in kafka.input_topics}
    standby = Standby(settings, follower, changelogs)
    started = time.perf_counter()
    try:
        records = standby.restore(kafka.stall_seconds)
    except KafkaReadError as error:
        follower.close()
        raise _StartError(f"cannot read the state: {error} (start the group's daemons first: "
                          f"they create the changelogs of kafka.group_id {kafka.group_id!r})"
                          ) from None
    except ChangelogError as error:
        follower.close()
        raise _StartError(f"cannot read the state: {error}") from None
    log.info("read the state of %d partition(s) from the changelog: %d record(s) in %.2f s, "
             "%d update(s) in the global model", len(standby.parts.slices), records,
             time.perf_counter() - started, standby.live.n_updates,
             extra={"event": "state_restored", "records": records})

    staleness = Gauge("streamnb_global_model_staleness_seconds", "Seconds since this scorer "
                      "last saw every changelog read to its end.", registry=registry)
    staleness.set_function(lambda: time.monotonic() - standby.caught_up_at)
    Gauge("streamnb_build_info", "Version and model of the running scorer (always 1).",
          ["version", "model"], registry=registry).labels(__version__,
                                                          settings.model.kind).set(1)
    try:
        server = serve_model(settings, listener, registry, lambda: standby.live, standby.lock,
                             standby.stats)
    except BindError as error:
        raise _StartError(str(error)) from None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    if os.environ.get(READY_ENV):  # started by a daemon (http.scorers): it waits for this
        print("serving", flush=True)
    return server, standby
