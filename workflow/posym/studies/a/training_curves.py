"""Fig 2A of paper A (test accuracy per hop over training), the final test accuracy and the verdicts of claims A-1
(final accuracy) and A-2 (the hop crossings) (spec §A4, §A5, §A12).

The claims' thresholds are the study's ``claims.a1`` and ``claims.a2`` settings (schema.yaml), given by the
notebooks that judge them; rows in :mod:`posym.pipeline.claims`'s format.
"""

from __future__ import annotations

from typing import Mapping

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


def claim_a1(final: pd.DataFrame, thresholds: Mapping) -> pd.DataFrame:
    """Claim A-1 (spec §A12): every hop of both tasks reaches ``thresholds["accuracy"]`` (the spec's 0.99) on the
    whole test split."""
    accuracy = thresholds["accuracy"]
    rows = []
    for (task, seed), run in final.groupby(["task", "seed"], sort=False):
        hops = run[run["hop"] != "all"].sort_values("hop")
        measured = ", ".join(f"hop {h} {a:.4f}" for h, a in zip(hops["hop"], hops["accuracy"]))
        passed = bool((hops["accuracy"] >= accuracy).all())
        rows.append(
            claims.row(
                "A-1",
                f"test accuracy ≥ {accuracy:g} on every hop",
                measured,
                f"≥ {accuracy:g} (paper ≥ 0.999)",
                passed,
                source=A1_SOURCE,
                task=task,
                seed=seed,
                ours=float(hops["accuracy"].min()),  # the weakest hop, against the paper's floor
                paper=0.999,
            )
        )
    return claims.with_seed_summary(rows)


#: Where claim A-2's thresholds come from.
A2_SOURCE = {
    "number": "spec §A12 A-2; Fig 2A (spec §A5: hop crossings ≈ 2050, 2750, 3250, 3400)",
    "letter": "spec §A12 A-2; Fig 2A (spec §A5: hop crossings ≈ 2700–2750)",
}


def claim_a2(metrics: pd.DataFrame, thresholds: Mapping) -> pd.DataFrame:
    """Claim A-2 (spec §A12): hop-wise learning dynamics, from the per-hop test accuracy over training.

    Number: the first step each hop reaches 0.9 is strictly increasing in the hop count, and hop 4 comes at least
    ``thresholds["number_spread"]`` steps after hop 1 (spec 1000; paper 2050, 2750, 3250, 3400). Letter: the four
    crossings lie within ``thresholds["letter_spread"]`` steps (spec 300; paper 2700–2750).
    """
    rows = []
    for task, frame in metrics.groupby("task", sort=False):
        for seed, run in frame.groupby("seed"):
            crossings = np.array([first_crossing(run, 0.9, str(hop)) for hop in (1, 2, 3, 4)])
            checks = _hop_order_checks(task, crossings, thresholds)
            for check, measured, expected, passed, source, *numbers in checks:
                ours, paper = numbers or (None, None)
                rows.append(claims.row("A-2", check, measured, expected, passed, source=source, task=task, seed=seed, ours=ours, paper=paper))
    return claims.with_seed_summary(rows)


def _hop_order_checks(task: str, crossings: np.ndarray, thresholds: Mapping) -> list[tuple]:
    """(check, measured, expected, passed, source[, ours, paper]) of one run's hop crossings: the spreads with the
    paper's (Number 1350, Letter 50 steps), so the report says how far we are."""
    crossed = not np.isnan(crossings).any()
    shown = ", ".join("never" if np.isnan(s) else str(int(s)) for s in crossings)
    spread = crossings.max() - crossings.min() if crossed else float("nan")
    if task == "number":
        least = thresholds["number_spread"]
        return [
            (
                "first steps at 0.9 strictly increasing from hop 1 to hop 4",
                shown,
                "increasing (paper 2050, 2750, 3250, 3400)",
                crossed and bool(np.all(np.diff(crossings) > 0)),
                A2_SOURCE["number"],
            ),
            (
                f"hop 4 reaches 0.9 ≥ {least} steps after hop 1",
                f"{crossings[3] - crossings[0]:.0f}" if crossed else shown,
                f"≥ {least} (paper 1350)",
                crossed and crossings[3] - crossings[0] >= least,
                A2_SOURCE["number"],
                crossings[3] - crossings[0] if crossed else None,
                1350,
            ),
        ]
    most = thresholds["letter_spread"]
    return [
        (
            f"all four hops reach 0.9 within {most} steps",
            f"{shown} (spread {spread:.0f})" if crossed else shown,
            f"≤ {most} (paper 50)",
            crossed and spread <= most,
            A2_SOURCE["letter"],
            spread if crossed else None,
            50,
        )
    ]
