"""The featurizer of another checkout against this one's, interleaved in one process.

Each checkout's ``streamnb`` (its Python and its compiled ``_tokens``) is imported as it is,
one after the other, so both live in one process; ``Featurizer().from_raw`` (or ``read``) of
each and the standard-library peer (``bench.bench_features.stdlib_tokens``) then take turns a
slice of 100 messages at a time, the order alternating from slice to slice and round to round,
so the drift of a shared machine falls on all three. CPU µs per mail, medians over rounds, and
the median per-round ratios.

    python -m bench.features_ab ../main [--corpus spamassassin] [--rounds 5] [--stage read]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def load_checkout(root: Path) -> tuple[ModuleType, ModuleType]:
    """``streamnb.features`` and ``bench.bench_features`` of the checkout at ``root``."""
    for name in [n for n in sys.modules if n.partition(".")[0] in ("streamnb", "bench")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        import bench.bench_features as bench_features
        import streamnb.features as features
    finally:
        sys.path.remove(str(root))
    if not Path(features.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{root}: its streamnb was not the one imported ({features.__file__})")
    return features, bench_features


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (its _tokens built)")
    parser.add_argument("--corpus", default="spamassassin")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stage", choices=["from_raw", "read"], default="from_raw")
    args = parser.parse_args(argv)
    other, _ = load_checkout(args.other)
    this, bench_features = load_checkout(REPO)
    messages = bench_features.load_corpus(args.corpus)
    contenders = {
        "other": getattr(other.Featurizer(), args.stage),
        "this": getattr(this.Featurizer(), args.stage),
        "stdlib": bench_features.stdlib_tokens,
    }
    spent: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(args.rounds):
        totals = dict.fromkeys(contenders, 0.0)
        for k, start in enumerate(range(0, len(messages), 100)):
            batch = messages[start : start + 100]
            order = list(contenders.items())
            if (k + round_) % 2:
                order.reverse()
            for name, fn in order:
                began = time.process_time()
                for raw in batch:
                    fn(raw)
                totals[name] += time.process_time() - began
        for name, total in totals.items():
            spent[name].append(total / len(messages) * 1e6)
    median = statistics.median
    print(f"{args.corpus}: {len(messages)} messages, {args.stage}, {args.rounds} rounds, "
          f"CPU us per mail (medians); other = {args.other}")
    for name, values in spent.items():
        print(f"  {name:<8}{median(values):8.1f}")
    ratio = {name: median(s / v for s, v in zip(spent["stdlib"], values, strict=True))
             for name, values in spent.items() if name != "stdlib"}
    this_over_other = median(t / o for t, o in zip(spent["this"], spent["other"], strict=True))
    print(f"stdlib / other = {ratio['other']:.2f}x; stdlib / this = {ratio['this']:.2f}x; "
          f"this / other (time) = {this_over_other:.3f}")


if __name__ == "__main__":
    main()
