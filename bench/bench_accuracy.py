"""``python -m bench.bench_accuracy``: streamnb's default configuration against bogofilter.

Every stream is replayed under the TREC immediate-feedback protocol (score each message, then
learn it with its gold label) by three filters on the same messages in the same order:

- **streamnb**: the built-in defaults (the ``"mail"`` preset and ``FeaturizerOptions()``),
  or the ``[model]``/``[features]`` tables of ``--config FILE``;
- **plain NB**: a plain multinomial NB (occurrence counts, α = 1, every token, temperature 1) on
  the same tokens, the reference for how calibrated the probabilities are;
- **bogofilter**: the Debian binary driven by ``bench.peers`` (its defaults, a fresh word list).

It prints (1-ROCA)% and spam recall at 0.1% false positives side by side, then log loss (over
the messages whose class the filter already knew, from log-probabilities), Brier score and a
reliability table of P(spam) for each filter (bogofilter's spamicity read as a probability; it
prints 16 digits, so 0 and 1 are read as 1e-16 and 1 - 1e-16).

    python -m bench.bench_accuracy                          # all four streams (~15-25 min)
    python -m bench.bench_accuracy --streams sms --limit 1000
    python -m bench.bench_accuracy --no-bogofilter          # streamnb and plain NB only
    python -m bench.bench_accuracy --bogofilter-cache /tmp/bogofilter-scores   # bogofilter once
    python -m bench.bench_accuracy --streams spamassassin,chinese --views all   # + the views

``--views`` also replays each mail stream in the forms public corpora come in
(``streamnb.evaluation.views``): ``subject-blank`` and ``subject-noblank`` (every header
removed but ``Subject:``, with and without the empty line after it), ``body-only`` and
``html-text`` (Subject, then the body with HTML converted to text). Each is its own stream,
``<stream>+<view>``, with its own bogofilter cache entry.

bogofilter takes two processes per message (10-15 minutes a stream on a busy machine). Its
figures do not depend on streamnb's options, so ``--bogofilter-cache DIR`` keeps each stream's
bogofilter scores in ``DIR/<stream>-<limit>.json`` and reuses them on the next run.

The Chinese set runs twice: ``chinese`` with the ``Received:`` header lines removed from every
message (one relay there nearly separates spam from ham, see its README) and
``chinese-headers`` with the mail as it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench.peers.filters import BogofilterFilter
from bench.peers.streams import DEFAULT_DATA, STREAMS, Stream, in_view, load
from streamnb.evaluation import scoring
from streamnb.evaluation.options import Tables
from streamnb.evaluation.replay import class_scores, featurize_all, reliability_table, replay
from streamnb.evaluation.views import VIEWS
from streamnb.models import TEXTBOOK_OPTIONS
from streamnb.pipeline import Pipeline

SPAM = "spam"

#: The streams compared; the Chinese set with and without its ``Received:`` lines.
ACCURACY_STREAMS: dict[str, Stream] = {
    "spamassassin": STREAMS["spamassassin"],
    "sms": STREAMS["sms"],
    "chinese": STREAMS["chinese"],
    "chinese-headers": dataclasses.replace(
        STREAMS["chinese"],
        name="chinese-headers",
        mask_received=False,
        description="trec06c subset (shared 40%), shuffle 1, headers as they are",
    ),
}

#: The plain multinomial NB the calibration is compared with.
PLAIN_NB = {"kind": "multinomial", **TEXTBOOK_OPTIONS}


@dataclasses.dataclass
class Outcome:
    """One filter's replay of one stream: gold labels, decisions, P(spam) and ranking scores."""

    labels: list[str]
    predicted: list[str | None]
    p_spam: np.ndarray
    scores: np.ndarray
    seconds: float
    #: Messages whose true class the filter already knew (the log loss is over these, as in
    #: ``streamnb evaluate``: before its first spam a model cannot give spam any probability).
    known: np.ndarray | None = None
    #: log P(true class) where the filter gives it in log space (no underflow to 0).
    log_p_truth: np.ndarray | None = None

    def figures(self) -> dict:
        y = np.array([label == SPAM for label in self.labels])
        decided = np.array([p == SPAM for p in self.predicted])
        out = scoring.binary_report(y, self.scores, decided)
        out["accuracy"] = float(np.mean(decided == y))
        p = self.p_spam
        if self.log_p_truth is not None:
            truth = self.log_p_truth
        else:  # a probability printed with 16 digits: 0 and 1 mean "within 1e-16 of"
            q = np.clip(p, 1e-16, 1 - 1e-16)
            truth = np.where(y, np.log(q), np.log1p(-q))
        known = np.ones(len(y), dtype=bool) if self.known is None else self.known
        out["log_loss"] = float(-np.mean(truth[known]))
        out["log_loss_n"] = int(known.sum())
        out["brier"] = float(np.mean((p - y) ** 2))
        out["reliability"] = reliability_table(y, p)
        out["n"] = len(self.labels)
        out["seconds"] = self.seconds
        return out


def run_model(pipeline: Pipeline, messages, featurized) -> Outcome:
    result = replay(pipeline, messages, featurized=featurized)
    log_p = np.array([lp.get(SPAM, -math.inf) if lp else math.log(0.5)
                      for lp in result.log_proba])
    pairs = list(zip(result.log_proba, result.labels, strict=True))
    known = np.array([y in lp for lp, y in pairs])
    log_p_truth = np.array([lp.get(y, -math.inf) for lp, y in pairs])
    return Outcome(result.labels, result.predicted, np.exp(log_p),
                   class_scores(result.log_proba, SPAM), result.seconds, known, log_p_truth)


def run_bogofilter(messages, cache: Path | None = None) -> Outcome:
    if cache is not None and cache.is_file():
        saved = json.loads(cache.read_text())
        if saved["ids"] != [m.id for m in messages]:
            raise SystemExit(f"{cache} was made from other messages; delete it")
        labels, scores, seconds = saved["labels"], saved["scores"], saved["seconds"]
    else:
        run = BogofilterFilter().run(messages, budget=math.inf)
        labels, scores, seconds = run.labels, run.scores, run.seconds
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({"ids": [m.id for m in messages], "labels": labels,
                                         "scores": scores, "seconds": seconds}))
    # Its spamicity is printed with 16 digits; the ranking uses it as it is.
    p = np.clip(np.array(scores, dtype=float), 0.0, 1.0)
    predicted = [SPAM if s >= BogofilterFilter.SPAM_CUTOFF else "ham" for s in scores]
    return Outcome(labels, predicted, p, p.copy(), seconds)


def run_stream(stream: Stream, data: Path, tables: Tables, limit: int | None,
               with_bogofilter: bool, cache_dir: Path | None = None) -> dict[str, dict]:
    messages = load(stream, data, limit)
    cache = None if cache_dir is None else cache_dir / f"{stream.name}-{limit or 'all'}.json"
    with ThreadPoolExecutor(max_workers=1) as pool:
        # bogofilter spends its time in child processes, so it runs beside the Python replays.
        bogofilter = pool.submit(run_bogofilter, messages, cache) if with_bogofilter else None
        default = tables.build_pipeline()
        featurized = featurize_all(default, messages)
        outcomes = {"streamnb": run_model(default, messages, featurized)}
        plain = Tables(dict(PLAIN_NB), dict(tables.features)).build_pipeline()
        outcomes["plain NB"] = run_model(plain, messages, featurized)
        if bogofilter is not None:
            outcomes["bogofilter"] = bogofilter.result()
    return {name: outcome.figures() for name, outcome in outcomes.items()}


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def side_by_side(results: dict[str, dict[str, dict]]) -> str:
    lines = [
        "| stream | filter | (1-ROCA)% | spam recall @ 0.1% FPR | accuracy | log loss | Brier |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for stream, by_filter in results.items():
        for name, f in by_filter.items():
            lines.append(
                f"| {stream} | {name} | {_fmt(f.get('one_minus_auc_pct'), '.3f')} "
                f"| {_fmt(f.get('spam_recall_at_fpr_0.1pct'), '.3f')} "
                f"| {_fmt(f['accuracy'], '.4f')} | {_fmt(f['log_loss'], '.4f')} "
                f"| {_fmt(f['brier'], '.4f')} |"
            )
    return "\n".join(lines)


def reliability(results: dict[str, dict[str, dict]]) -> str:
    blocks = []
    for stream, by_filter in results.items():
        names = list(by_filter)
        header = "| P(spam) | " + " | ".join(f"{n}: n, mean P, spam share" for n in names) + " |"
        lines = [f"**{stream}**", "", header, "|---|" + "---:|" * len(names)]
        for row in range(len(by_filter[names[0]]["reliability"])):
            cells = []
            for name in names:
                r = by_filter[name]["reliability"][row]
                cells.append(
                    f"{r['n']}, {_fmt(r['mean_predicted'], '.3f')}, {_fmt(r['observed'], '.3f')}"
                )
            lines.append(f"| {by_filter[names[0]]['reliability'][row]['bin']} | "
                         + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_accuracy",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--streams", default=",".join(ACCURACY_STREAMS), help="comma-separated")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, help="first N messages of each stream")
    parser.add_argument("--config", type=Path,
                        help="take [model]/[features] from this TOML file, not the defaults")
    parser.add_argument("--no-bogofilter", action="store_true", help="leave bogofilter out")
    parser.add_argument("--bogofilter-cache", type=Path, metavar="DIR",
                        help="reuse (or save) bogofilter's scores per stream in DIR")
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="also save every figure")
    parser.add_argument("--views", default="original", metavar="VIEW,...",
                        help=f"replay each stream in these forms ({', '.join(VIEWS)}; 'all')")
    args = parser.parse_args(argv)

    streams = [s.strip() for s in args.streams.split(",") if s.strip()]
    for name in streams:
        if name not in ACCURACY_STREAMS:
            parser.error(f"unknown stream {name!r}; known: {', '.join(ACCURACY_STREAMS)}")
    views = list(VIEWS) if args.views == "all" else [
        v.strip() for v in args.views.split(",") if v.strip()]
    for view in views:
        if view not in VIEWS:
            parser.error(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
    tables = Tables.load(args.config) if args.config else Tables()
    print(f"streamnb options: {tables.describe()}", file=sys.stderr)
    results = {}
    described = []
    for name in streams:
        for view in views:
            if view != "original" and name == "sms":
                continue  # text, not mail: it has one form
            stream = in_view(ACCURACY_STREAMS[name], view)
            started = time.perf_counter()
            print(f"{stream.name} ...", file=sys.stderr, flush=True)
            results[stream.name] = run_stream(stream, args.data, tables, args.limit,
                                              not args.no_bogofilter, args.bogofilter_cache)
            summary = ", ".join(f"{n} {_fmt(f.get('one_minus_auc_pct'), '.3f')}"
                                for n, f in results[stream.name].items())
            print(f"  (1-ROCA)%: {summary} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
            described.append(f"- **{stream.name}**: {stream.description}")
    described = "\n".join(described)
    print(f"{described}\n\n{side_by_side(results)}\n\nReliability of P(spam) "
          f"(messages, mean predicted probability, observed share of spam per bin):\n\n"
          f"{reliability(results)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
