"""``streamnb evaluate PATH``: replay a labelled corpus prequentially, as the daemon would see it.

Every message goes through the daemon's own pipeline (``streamnb.pipeline.build_pipeline`` with the
``[model]`` and ``[features]`` tables of ``config.toml``): it is scored first, then learned with its
gold label (TREC's immediate feedback). The figures are printed as a table, or as one JSON object
with ``--json``.

``--variant`` replays the same stream once more per variant (each a list of ``--set``-style
overrides on top of the base options) and prints them side by side; variants that share the
featurizer options reuse the featurized messages, so comparing model options costs only the
model's time.

    streamnb evaluate ../shared/data/spamassassin --shuffle 1
    streamnb evaluate ../shared/data/sms-spam-collection/SMSSpamCollection --json
    streamnb evaluate ../shared/data/spambase --model gda
    streamnb evaluate ../shared/data/spamassassin --shuffle 1 \\
        --variant "model.alpha=0.1" --variant "model.kind=bernoulli"
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamnb.evaluation import options as options_module
from streamnb.evaluation.corpora import FORMATS, Corpus, CorpusError, read_corpus
from streamnb.evaluation.featurecache import cached_featurize
from streamnb.evaluation.options import OptionsError, Tables
from streamnb.evaluation.replay import Featurizations, ReplayResult, featurize_all, replay
from streamnb.evaluation.views import VIEWS

__all__ = ["EvaluationRun", "add_arguments", "evaluate_corpus", "format_table", "main"]

RECALL_KEY = "spam_recall_at_fpr_0.1pct"


@dataclass
class EvaluationRun:
    """One replay of one corpus under one set of options, with its figures and the model as
    it stands after learning the whole stream."""

    name: str
    tables: Tables
    result: ReplayResult
    figures: dict
    model: Any = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 3)[3]
    parser.add_argument(
        "path",
        metavar="PATH",
        help="a corpus folder (index + messages*.tar.gz), a label<TAB>text file, "
        "or a CSV of numbers with the label last",
    )
    parser.add_argument("--format", choices=FORMATS, help="corpus layout (default: detected)")
    options_module.add_arguments(parser)
    options_module.add_variant_argument(parser, "model.alpha=0.1 features.bigrams=true")
    order = parser.add_argument_group("stream")
    order.add_argument(
        "--shuffle", type=int, metavar="SEED", help="replay in a seeded random order"
    )
    order.add_argument(
        "--limit", type=int, metavar="N", help="only the first N messages (after --shuffle)"
    )
    order.add_argument(
        "--view",
        choices=VIEWS,
        default="original",
        help="replay the mail in the form public corpora come in: headers removed but "
        "Subject: (with or without the empty line after it), the body only, HTML as text",
    )
    order.add_argument(
        "--positive",
        metavar="LABEL",
        help="the class the two-class figures call spam (default: spam, or 1 for 0/1 labels)",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--plot", metavar="OUT.png", help="draw the ROC curve and accuracy over time")
    out.add_argument(
        "--scores",
        metavar="OUT.tsv",
        help="write id, label, predicted label and score of every message",
    )
    out.add_argument(
        "--save-model",
        metavar="OUT.json",
        type=Path,
        help="save the model learned from the whole stream (the base run), with the [features] "
        "it was fed with, for `streamnb explain --model`",
    )
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--feature-cache",
        metavar="DIR",
        type=Path,
        help="keep featurized messages in DIR and reuse them on later runs with the same corpus, "
        "order, [features] and featurizer code (for tuning model options; a folder only you "
        "write to)",
    )


def evaluate_corpus(
    corpus: Corpus,
    variants: list[tuple[str, Tables]],
    *,
    positive: str | None = None,
    progress: bool = False,
    feature_cache: Path | None = None,
) -> list[EvaluationRun]:
    """Replay ``corpus`` once per ``(name, tables)`` variant and compute the figures.

    With several variants, each distinct ``[features]`` table is featurized once and its
    inputs reused (the featurizer is stateless); a single variant featurizes inline, exactly as
    the daemon does. ``feature_cache`` also keeps them on disk between runs (see
    :mod:`~streamnb.evaluation.featurecache`).
    """
    runs = []
    cache: dict[str, Featurizations] = {}
    for name, tables in variants:
        pipeline = tables.build_pipeline()
        featurized = None
        if len(variants) > 1 or feature_cache is not None:
            key = json.dumps(tables.features, sort_keys=True, default=str) + str(pipeline.numeric)
            if key not in cache:
                if feature_cache is not None:
                    cache[key] = cached_featurize(
                        pipeline, corpus, tables.features, feature_cache
                    )
                else:
                    cache[key] = featurize_all(pipeline, corpus.messages)
            featurized = cache[key]
        result = replay(
            pipeline, corpus.messages, progress=progress, description=name, featurized=featurized
        )
        runs.append(EvaluationRun(name, tables, result, result.report(positive), pipeline.model))
    return runs


def _variants(args: argparse.Namespace, base: Tables) -> list[tuple[str, Tables]]:
    variants = [("base", base)]
    for number, spec in enumerate(args.variant, 1):
        assignments = []
        name = f"variant-{number}"
        for item in shlex.split(spec.replace(",", " ")):
            if item.startswith("name="):
                name = item[len("name="):]
            else:
                assignments.append(item)
        variants.append((name, base.with_overrides(assignments)))
    return variants


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def format_table(corpus: Corpus, runs: list[EvaluationRun], header: str) -> str:
    """A readable table: one row per figure, one column per run."""
    figures = [run.figures for run in runs]
    first = figures[0]
    classes = list(first["classes"])
    rows: list[tuple[str, list[str]]] = [
        ("messages", [f"{f['n']:,}" for f in figures]),
        ("accuracy", [_fmt(f["accuracy"]) for f in figures]),
        ("(1-ROCA)%", [_fmt(f.get("one_minus_auc_pct"), 3) for f in figures]),
    ]
    if "lam_pct" in first:
        rows += [
            ("lam%", [_fmt(f.get("lam_pct"), 3) for f in figures]),
            ("hm% (ham misclassified)", [_fmt(f.get("hm_pct"), 3) for f in figures]),
            ("sm% (spam misclassified)", [_fmt(f.get("sm_pct"), 3) for f in figures]),
            ("spam recall @ 0.1% FPR", [_fmt(f.get(RECALL_KEY)) for f in figures]),
        ]
    rows += [(f"recall {c}", [_fmt(f["recall"].get(c)) for f in figures]) for c in classes]
    rows += [
        ("log loss", [_fmt(f["log_loss"]) for f in figures]),
        ("Brier score", [_fmt(f.get("brier")) for f in figures]),
        ("messages/s", [f"{f['msgs_per_s']:,.0f}" for f in figures]),
        ("  featurize s / model s", [
            f"{f['seconds_featurize']:.2f} / {f['seconds_model']:.2f}" for f in figures
        ]),
    ]
    if any(f["skipped"] for f in figures):
        rows.append(("skipped", [json.dumps(f["skipped"]) for f in figures]))
    if any(f.get("truncated") for f in figures):
        rows.append(("truncated (messages)", [str(f["truncated"]) for f in figures]))
    for defect in sorted({d for f in figures for d in f.get("defects", {})}):
        rows.append((f"defect {defect}", [str(f["defects"].get(defect, 0)) for f in figures]))
    names = [run.name for run in runs]
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(n), *(len(values[i]) for _, values in rows)) for i, n in enumerate(names)]
    lines = [header]
    if len(runs) > 1:
        for run in runs:
            lines.append(f"{run.name}: {run.tables.describe()}")
        heading = "  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True))
        lines.append(" " * label_width + "  " + heading)
    for label, values in rows:
        cells = "  ".join(v.rjust(w) for v, w in zip(values, widths, strict=True))
        lines.append(f"{label.ljust(label_width)}  {cells}")
    return "\n".join(lines)


def _header(corpus: Corpus, args: argparse.Namespace, base: Tables) -> str:
    counts = ", ".join(f"{c} {n:,}" for c, n in corpus.label_counts().items())
    order = f"shuffle {args.shuffle}" if args.shuffle is not None else "corpus order"
    limit = f", first {args.limit:,}" if args.limit else ""
    view = f", view {corpus.view}" if corpus.view != "original" else ""
    return (
        f"corpus: {corpus.path} ({corpus.format}, {order}{limit}{view}): "
        f"{len(corpus):,} messages ({counts})\n"
        f"options ({base.source}): {base.describe()}"
    )


def _write_scores(path: str, run: EvaluationRun) -> None:
    from streamnb.evaluation.replay import class_scores

    positive = run.figures.get("positive")
    result = run.result
    with open(path, "w", encoding="utf-8") as handle:
        if positive is not None:
            scores = class_scores(result.log_proba, positive)
            handle.write(f"id\tlabel\tpredicted\tlog_odds_{positive}\n")
            for i in range(result.n):
                handle.write(
                    f"{result.ids[i]}\t{result.labels[i]}\t{result.predicted[i]}\t{scores[i]:.6g}\n"
                )
        else:
            handle.write("id\tlabel\tpredicted\n")
            for i in range(result.n):
                handle.write(f"{result.ids[i]}\t{result.labels[i]}\t{result.predicted[i]}\n")


def _json_ready(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return value


def main(args: argparse.Namespace) -> int:
    try:
        base = options_module.tables_from_args(args)
        variants = _variants(args, base)
        corpus = read_corpus(args.path, args.format, shuffle=args.shuffle, limit=args.limit)
        corpus = corpus.in_view(args.view)
        progress = not args.quiet and sys.stderr.isatty()
        runs = evaluate_corpus(
            corpus,
            variants,
            positive=args.positive,
            progress=progress,
            feature_cache=args.feature_cache,
        )
    except (CorpusError, OptionsError) as error:
        print(f"streamnb evaluate: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"streamnb evaluate: {error}", file=sys.stderr)
        return 2

    if args.scores:
        _write_scores(args.scores, runs[0])
    if args.save_model:
        from streamnb.explain import write_model_file

        write_model_file(args.save_model, runs[0].model, runs[0].tables.features)
    if args.plot:
        from streamnb.evaluation.plots import plot_replay

        plot_replay(args.plot, [(run.name, run.result, run.figures) for run in runs], corpus)
    if args.json:
        def describe(run: EvaluationRun) -> dict:
            return {
                "corpus": str(corpus.path),
                "format": corpus.format,
                "shuffle": args.shuffle,
                "limit": args.limit,
                "view": corpus.view,
                "name": run.name,
                "model": run.tables.model,
                "features": run.tables.features,
                **run.figures,
            }

        document = describe(runs[0]) if len(runs) == 1 else {"runs": [describe(r) for r in runs]}
        print(json.dumps(_json_ready(document), ensure_ascii=False))
    else:
        print(format_table(corpus, runs, _header(corpus, args, base)))
        if args.plot:
            print(f"plot: {Path(args.plot)}")
    return 0
