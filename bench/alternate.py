"""Rounds of a benchmark script's child, this checkout and another in turn.

A script that compares this checkout's code with another's (``--baseline DIR``) runs its own
``--child`` once per checkout per round, each a fresh process with that checkout's code on
``PYTHONPATH`` and its virtual environment's Python where it has one, alternating, so both
are measured in the same rounds of this shared machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkouts(baseline: Path | None) -> dict[str, tuple[Path, str]]:
    """Name -> (root, Python) of this checkout and, if given, the baseline."""
    found = {"this checkout": (REPO, sys.executable)}
    if baseline is not None:
        root = baseline.resolve()
        python = root / ".venv" / "bin" / "python"
        found[f"baseline ({root})"] = (root, str(python if python.exists() else sys.executable))
    return found


def child_rounds(script: Path, baseline: Path | None, rounds: int,
                 child_args: list[str]) -> dict[str, list[list[str]]]:
    """Each checkout's child outputs (its stdout split in words), a list per round: ``script
    --child --root ROOT *child_args`` run in every checkout in turn, ``rounds`` times."""
    runs = checkouts(baseline)
    outputs: dict[str, list[list[str]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (root, python) in runs.items():
            outputs[name].append(subprocess.run(
                [python, str(script), "--child", "--root", str(root), *child_args],
                check=True, capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": str(root)}).stdout.split())
    return outputs
