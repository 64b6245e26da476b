"""A bound on Kafka calls that wait without one: past it, the process exits (code 3).

kafka-python 3 can, rarely, leave a ``poll()`` waiting forever for its IO thread (seen under
heavy load), and its transactional producer's ``init_transactions``,
``send_offsets_to_transaction``, ``commit_transaction`` and ``abort_transaction`` wait for the
broker with no timeout at all. A
stuck daemon learns nothing and ignores SIGTERM, so the watchdog logs which call stalled and
ends the process instead. Exiting is safe at any point of the commit protocol: a transaction
that was not committed is aborted by the broker (or fenced by the next producer with the same
transactional id), and a restart resumes from what was committed.

>>> watchdog = Watchdog(60.0)
>>> with watchdog.guard("a poll"):
...     pass
>>> watchdog.since is None
True
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

__all__ = ["STALLED_EXIT_CODE", "Watchdog"]

log = logging.getLogger("streamnb.daemon")

#: The exit code of a daemon whose Kafka client stalled (its supervisor restarts it).
STALLED_EXIT_CODE = 3


class Watchdog:
    """Ends the process when a guarded call lasts longer than ``limit`` seconds."""

    def __init__(self, limit: float):
        self.limit = limit
        self.since: float | None = None
        self.what = ""
        self._thread = threading.Thread(target=self._watch, name="kafka-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def guard(self, what: str):
        outer = self.since, self.what
        if self.since is None:  # a guard inside a guard keeps the outer deadline
            self.since, self.what = time.monotonic(), what
        try:
            yield self
        finally:
            self.since, self.what = outer

    # PollWatchdog's old surface: ``with watchdog:`` guards a poll.
    def __enter__(self) -> Watchdog:
        self.since, self.what = time.monotonic(), "a Kafka poll"
        return self

    def __exit__(self, *exc: object) -> None:
        self.since = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.limit / 4))
            since = self.since
            if since is not None and time.monotonic() - since > self.limit:
                log.error(
                    "%s has been blocked for %.0f s: exiting (code %d) so a restart resumes "
                    "from what was committed",
                    self.what,
                    time.monotonic() - since,
                    STALLED_EXIT_CODE,
                    extra={"event": "stalled", "call": self.what},
                )
                logging.shutdown()
                os._exit(STALLED_EXIT_CODE)
