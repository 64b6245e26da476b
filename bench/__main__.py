"""Run every ``bench/bench_*.py`` (or those named: ``python -m bench models``).

Each module's ``main([])`` runs with its defaults; run a module directly for its options
(``python -m bench.bench_models --help``).
"""

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> None:
    folder = str(Path(__file__).parent)
    names = sorted(info.name for info in pkgutil.iter_modules([folder])
                   if info.name.startswith("bench_"))
    wanted = [arg if arg.startswith("bench_") else f"bench_{arg}" for arg in sys.argv[1:]]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        sys.exit(f"unknown benchmark(s) {unknown}; available: {names}")
    for name in wanted or names:
        print(f"== {name} ==", flush=True)
        importlib.import_module(f"bench.{name}").main([])


if __name__ == "__main__":
    main()
