"""Run every ``bench/bench_*.py`` (or those named on the command line): ``python -m bench``."""

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> None:
    wanted = sys.argv[1:]
    folder = str(Path(__file__).parent)
    names = sorted(info.name for info in pkgutil.iter_modules([folder])
                   if info.name.startswith("bench_"))
    for name in names:
        if wanted and name not in wanted and name.removeprefix("bench_") not in wanted:
            continue
        print(f"== {name} ==", flush=True)
        importlib.import_module(f"bench.{name}").main([])


if __name__ == "__main__":
    main()
