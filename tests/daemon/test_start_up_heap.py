"""``streamnb run`` freezes its start-up objects out of the cyclic collector, and only those."""

from __future__ import annotations

import argparse
import subprocess
import sys

from streamnb.daemon import loop


def test_objects_made_after_the_freeze_are_still_collected():
    code = """
import gc, weakref
from streamnb.daemon.loop import freeze_start_up_heap

class Node:
    pass

start_up = Node()
start_up.cycle = start_up
freeze_start_up_heap()
assert gc.get_freeze_count() > 0
later = Node()
later.cycle = later
gone = weakref.ref(later)
del later
gc.collect()
assert gone() is None, "a cycle made after the freeze was not collected"
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_collector_still_runs_on_its_own_at_the_higher_young_threshold():
    code = """
import gc, weakref
from streamnb.daemon.loop import YOUNG_COLLECTION_THRESHOLD, freeze_start_up_heap

old_young, *old_older = gc.get_threshold()
freeze_start_up_heap()
young, *older = gc.get_threshold()
assert young == max(old_young, YOUNG_COLLECTION_THRESHOLD), gc.get_threshold()
assert older == old_older, "the older generations' thresholds changed"

class Node:
    pass

later = Node()
later.cycle = later
gone = weakref.ref(later)
del later
kept = []
for _ in range(YOUNG_COLLECTION_THRESHOLD // 10):
    kept.append([[] for _ in range(10)])  # more new containers than the threshold
    if gone() is None:
        break
assert gone() is None, "no automatic collection after the threshold's containers"
assert len(kept) * 11 >= YOUNG_COLLECTION_THRESHOLD * 0.5, "collected sooner than asked"
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_main_freezes_once_the_daemon_is_built_and_before_it_runs(monkeypatch, tmp_path):
    calls: list[str] = []

    class Daemon:
        io = None
        front_door = None

        def request_stop(self, *_):
            pass

        def run(self):
            calls.append("run")
            return 0

    monkeypatch.setattr(loop, "load_settings", lambda path: _settings())
    monkeypatch.setattr(loop, "configure_logging", lambda *a: None)
    monkeypatch.setattr(loop, "build_daemon",
                        lambda settings, **_: calls.append("build") or Daemon())
    monkeypatch.setattr(loop, "freeze_start_up_heap", lambda: calls.append("freeze"))
    monkeypatch.setattr(loop.signal, "signal", lambda *a: None)
    assert loop.main(argparse.Namespace(config=str(tmp_path / "config.toml"))) == 0
    assert calls == ["build", "freeze", "run"]


def _settings():
    from streamnb.config import load_settings

    return load_settings(text="", environ={})
