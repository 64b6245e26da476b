"""PNG figures for ``streamnb evaluate --plot`` and ``streamnb crossval --plot`` (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from streamnb.evaluation import scoring
from streamnb.evaluation.replay import ReplayResult, class_scores

__all__ = ["plot_crossval", "plot_replay"]

# Accuracy over the most recent messages, to show learning and drift beside the running mean.
WINDOW = 500


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_replay(path: str, runs: Sequence[tuple[str, ReplayResult, dict]], corpus) -> None:
    """ROC curve(s) on a log false-positive axis, and accuracy against messages seen."""
    plt = _pyplot()
    fig, (roc_ax, acc_ax) = plt.subplots(1, 2, figsize=(12, 5))
    for name, result, figures in runs:
        positive = figures.get("positive")
        targets = [positive] if positive is not None else result.classes()
        for target in targets:
            y = np.array([label == target for label in result.labels])
            if y.all() or not y.any():
                continue
            fpr, tpr, _ = scoring.roc_curve(y, class_scores(result.log_proba, target))
            auc_pct = 100 * (1 - scoring.roc_auc(y, class_scores(result.log_proba, target)))
            label = f"{name}: {target} (1-ROCA)% = {auc_pct:.3f}"
            # A log axis cannot show fpr = 0; start the curve at the smallest visible rate.
            floor = 0.5 / max(1, int((~y).sum()))
            roc_ax.step(np.maximum(fpr, floor), tpr, where="post", label=label)
        correct = result.correct().astype(float)
        seen = np.arange(1, correct.size + 1)
        acc_ax.plot(seen, np.cumsum(correct) / seen, label=f"{name}: running accuracy")
        if correct.size > WINDOW:
            window = np.convolve(correct, np.ones(WINDOW) / WINDOW, mode="valid")
            acc_ax.plot(
                np.arange(WINDOW, correct.size + 1), window, alpha=0.6,
                label=f"{name}: last {WINDOW}",
            )
    # Zoom on the learned regime: the first few messages' accuracy says little.
    lows = [
        float((np.cumsum(r.correct()) / np.arange(1, r.n + 1))[min(r.n - 1, 100):].min())
        for _, r, _ in runs
    ]
    acc_ax.set_ylim(max(0.0, min(lows) - 0.05), 1.0)
    roc_ax.set_xscale("log")
    roc_ax.axvline(0.001, color="grey", linestyle=":", linewidth=1)
    roc_ax.set_xlabel("false-positive rate (log scale; dotted: 0.1%)")
    roc_ax.set_ylabel("true-positive rate")
    roc_ax.set_title("ROC, prequential scores")
    roc_ax.legend(fontsize=8, loc="lower right")
    roc_ax.grid(True, which="both", alpha=0.3)
    acc_ax.set_xlabel("messages seen")
    acc_ax.set_ylabel("accuracy (scored before learning)")
    acc_ax.set_title("accuracy vs messages seen")
    acc_ax.legend(fontsize=8, loc="lower right")
    acc_ax.grid(True, alpha=0.3)
    fig.suptitle(f"{corpus.path.name}: {len(corpus):,} messages")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_crossval(path: str, rows: Sequence[dict], title: str) -> None:
    """Mean k-fold accuracy (± one standard deviation) against k, one line per model."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = list(dict.fromkeys(row["name"] for row in rows))
    for name in names:
        mine = [row for row in rows if row["name"] == name]
        ks = [row["k"] for row in mine]
        means = np.array([row["accuracy_mean"] for row in mine])
        sds = np.array([row["accuracy_sd"] for row in mine])
        ax.errorbar(ks, means, yerr=sds, marker="o", capsize=3, label=name)
    ax.set_xlabel("k (folds)")
    ax.set_ylabel("mean accuracy over the k test folds")
    ax.set_title(title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
