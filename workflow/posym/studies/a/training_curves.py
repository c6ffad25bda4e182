"""Fig 2A of paper A (test accuracy per hop over training), the final test accuracy and claim A-1 (spec §A4, §A5)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from posym.pipeline import claims  # noqa: E402

from . import paper  # noqa: E402

HOP_PALETTE = {"1": "#1b9e77", "2": "#d95f02", "3": "#7570b3", "4": "#e7298a", "all": "#222222"}


def first_crossing(metrics: pd.DataFrame, threshold: float, hop: str) -> float:
    """First step at which the accuracy of ``hop`` reaches ``threshold`` (NaN if never)."""
    rows = metrics[(metrics["hop"].astype(str) == hop) & (metrics["accuracy"] >= threshold)]
    return float(rows["step"].min()) if len(rows) else float("nan")


def plot_accuracy_over_training(metrics: pd.DataFrame) -> plt.Figure:
    """Fig 2A: test accuracy per hop and overall against training step, one panel per task."""
    tasks = list(dict.fromkeys(metrics["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.6), squeeze=False, sharey=True)
    for ax, task in zip(axes[0], tasks):
        frame = metrics[metrics["task"] == task]
        sns.lineplot(data=frame, x="step", y="accuracy", hue="hop", palette=HOP_PALETTE, errorbar="sd", ax=ax)
        paper_step = paper.MAX_ACCURACY_STEP.get(task)
        if paper_step is not None and paper_step <= frame["step"].max():
            ax.axvline(paper_step, ls="--", c="grey", lw=1, label="paper: max accuracy")
        ax.set_title(f"{task.capitalize()} task")
        ax.set_xlabel("training step")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(title="hop", fontsize=8)
    axes[0][0].set_ylabel("test accuracy")
    fig.tight_layout()
    return fig


def crossing_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Steps at which each hop first reaches 0.9 (and overall 0.99), ours per seed beside the paper's."""
    curves = [("hop 1 ≥ 0.9", "1", 0.9), ("hop 2 ≥ 0.9", "2", 0.9), ("hop 3 ≥ 0.9", "3", 0.9), ("hop 4 ≥ 0.9", "4", 0.9), ("all ≥ 0.99", "all", 0.99)]
    rows = []
    for task, frame in metrics.groupby("task", sort=False):
        for name, hop, threshold in curves:
            per_seed = [first_crossing(f, threshold, hop) for _, f in frame.groupby("seed")]
            reference = paper.HOP_CROSSINGS.query("task == @task and curve == @name")["step"]
            rows.append(
                {
                    "task": task,
                    "curve": name,
                    "ours (mean)": float(np.nanmean(per_seed)) if not all(np.isnan(per_seed)) else float("nan"),
                    "ours (per seed)": ", ".join("never" if np.isnan(s) else str(int(s)) for s in per_seed),
                    "paper": float(reference.iloc[0]) if len(reference) else float("nan"),
                }
            )
    return pd.DataFrame(rows)


def final_accuracy_table(final: pd.DataFrame) -> pd.DataFrame:
    """Accuracy of the last checkpoint on the whole test split, by hop (claim A-1: paper ≥ 0.999)."""
    table = final.pivot_table(index=["task", "seed"], columns="hop", values="accuracy").reset_index()
    table.columns = [c if c in ("task", "seed", "all") else (f"hop {c}" if c.isdigit() else c) for c in table.columns]
    table["paper"] = "≥ 0.999 every hop"
    return table


#: Where claim A-1's threshold comes from.
A1_SOURCE = "spec §A12 A-1; spec §A5 (final accuracy ≥ 0.999 on every hop, Fig 2A)"


def claims_a1(final: pd.DataFrame) -> pd.DataFrame:
    """Claim A-1 (spec §A12): every hop of both tasks reaches ≥ 0.99 on the whole test split."""
    rows = []
    for (task, seed), run in final.groupby(["task", "seed"], sort=False):
        hops = run[run["hop"] != "all"].sort_values("hop")
        measured = ", ".join(f"hop {h} {a:.4f}" for h, a in zip(hops["hop"], hops["accuracy"]))
        passed = bool((hops["accuracy"] >= 0.99).all())
        rows.append(
            claims.row(
                "A-1", "test accuracy ≥ 0.99 on every hop", measured, "≥ 0.99 (paper ≥ 0.999)", passed, source=A1_SOURCE, task=task, seed=seed
            )
        )
    return claims.with_seed_summary(rows)
