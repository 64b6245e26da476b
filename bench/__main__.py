"""Run every ``bench/bench_*.py`` (or those named: ``python -m bench models``).

Each module's ``main([])`` runs with its defaults; run a module directly for its options
(``python -m bench.bench_models --help``). The soak (``bench_soak``: a million messages
through the daemon, 1,114 s in the run of docs/benchmarks.md) runs only when named:
``python -m bench soak``.
"""

import importlib
import pkgutil
import sys
from pathlib import Path

#: Benchmarks that run only when named (a long run: the soak is a million messages).
ONLY_WHEN_NAMED = ("bench_soak",)


def benchmark_names() -> list[str]:
    """Every ``bench_*`` module of this folder."""
    folder = str(Path(__file__).parent)
    return sorted(info.name for info in pkgutil.iter_modules([folder])
                  if info.name.startswith("bench_"))


def main() -> None:
    names = benchmark_names()
    wanted = [arg if arg.startswith("bench_") else f"bench_{arg}" for arg in sys.argv[1:]]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        sys.exit(f"unknown benchmark(s) {unknown}; available: {names}")
    if not wanted:
        wanted = [name for name in names if name not in ONLY_WHEN_NAMED]
        print(f"(not run unless named: {', '.join(ONLY_WHEN_NAMED)})", flush=True)
    for name in wanted:
        print(f"== {name} ==", flush=True)
        importlib.import_module(f"bench.{name}").main([])


if __name__ == "__main__":
    main()
