"""Figures and tables of the report, shared by the notebooks.

Every figure is written as PNG and SVG; every table as CSV and Markdown. With several seeds,
curves show the mean with a ±1 sd band (seaborn's ``errorbar="sd"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from . import claims, paper  # noqa: E402
from .evaluate import first_crossing  # noqa: E402
from .files import atomic_path, write_csv, write_text  # noqa: E402

HOP_PALETTE = {"1": "#1b9e77", "2": "#d95f02", "3": "#7570b3", "4": "#e7298a", "all": "#222222"}
TASK_PALETTE = {"number": "#c0392b", "letter": "#2471a3"}


def save_figure(fig: plt.Figure, png: str | Path, svg: str | Path) -> None:
    for path, fmt in ((png, "png"), (svg, "svg")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
    plt.close(fig)


def save_table(frame: pd.DataFrame, csv: str | Path, markdown: str | Path, floatfmt: str = ".3f") -> None:
    write_csv(csv, frame)
    write_text(markdown, to_markdown(frame, floatfmt) + "\n")


def to_markdown(frame: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A GitHub-style Markdown table (no extra dependency)."""

    def cell(value) -> str:
        if isinstance(value, (float, np.floating)):
            return "" if np.isnan(value) else format(value, floatfmt)
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def read_runs(paths: Iterable[str | Path], tasks: Iterable[str], seeds: Iterable[int]) -> pd.DataFrame:
    """Concatenate per-run tables given in task-major order, adding ``task`` and ``seed`` columns."""
    pairs = [(t, s) for t in tasks for s in seeds]
    paths = list(paths)
    if len(paths) != len(pairs):
        raise ValueError(f"{len(paths)} tables for {len(pairs)} task x seed runs")
    frames = [pd.read_csv(p, dtype={"hop": str}).assign(task=t, seed=s) for p, (t, s) in zip(paths, pairs)]
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- Fig 2A


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


# ----------------------------------------------------------------------------- Fig 5B


def plot_length(length: pd.DataFrame) -> plt.Figure:
    """Fig 5B: accuracy against prepended tokens, ours (solid) and the paper's digitised curve (dashed)."""
    overall = length[length["hop"] == "all"]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    sns.lineplot(data=overall, x="extra_tokens", y="accuracy", hue="task", palette=TASK_PALETTE, errorbar="sd", marker="o", ax=ax)
    reach = overall["extra_tokens"].max()
    for task in overall["task"].unique():
        ref = paper.LENGTH_CURVE[(paper.LENGTH_CURVE["task"] == task) & (paper.LENGTH_CURVE["extra_tokens"] <= max(reach, 1))]
        ax.plot(ref["extra_tokens"], ref["accuracy"], ls="--", c=TASK_PALETTE[task], alpha=0.7, label=f"{task} (paper)")
    ax.set_xlabel("tokens prepended before the target window")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def length_table(length: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per prepended length: ours (mean and sd over seeds) beside the paper's where digitised."""
    overall = length[length["hop"] == "all"]
    table = overall.groupby(["task", "extra_tokens"])["accuracy"].agg(["mean", "std", "count"]).reset_index()
    table = table.rename(columns={"mean": "ours", "std": "ours sd", "count": "seeds"})
    reference = paper.LENGTH_CURVE.rename(columns={"accuracy": "paper"})
    return table.merge(reference, on=["task", "extra_tokens"], how="left")


def final_accuracy_table(final: pd.DataFrame) -> pd.DataFrame:
    """Accuracy of the last checkpoint on the whole test split, by hop (claim A-1: paper ≥ 0.999)."""
    table = final.pivot_table(index=["task", "seed"], columns="hop", values="accuracy").reset_index()
    table.columns = [c if c in ("task", "seed", "all") else (f"hop {c}" if c.isdigit() else c) for c in table.columns]
    table["paper"] = "≥ 0.999 every hop"
    return table


def claims_a1(final: pd.DataFrame) -> pd.DataFrame:
    """Claim A-1 (spec §A12): every hop of both tasks reaches ≥ 0.99 on the whole test split."""
    rows = []
    for (task, seed), run in final.groupby(["task", "seed"], sort=False):
        hops = run[run["hop"] != "all"].sort_values("hop")
        measured = ", ".join(f"hop {h} {a:.4f}" for h, a in zip(hops["hop"], hops["accuracy"]))
        rows.append(claims.row("A-1", "test accuracy ≥ 0.99 on every hop", measured, "≥ 0.99 (paper ≥ 0.999)", bool((hops["accuracy"] >= 0.99).all()), task=task, seed=seed))
    return claims.with_seed_summary(rows)


# ----------------------------------------------------------------------------- Table 4

# Which rules' wall times make up each stage of Table 4.
COMPUTE_STAGES = {
    "train": "training",
    "evaluate_test": "evaluation",
    "evaluate_length": "evaluation",
    "scores": "scores",
    "frequency": "analyses",
    "geometry": "analyses",
    "discrepancy": "analyses",
    "flow": "analyses",
    "theory": "theory",
    "llm_probe": "LLM probes",
}


def read_benchmarks(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Wall seconds of Snakemake ``benchmark:`` files named ``<rule>/<task>-seed<seed>.tsv`` or ``<rule>.tsv``."""
    rows = []
    for path in map(Path, paths):
        seconds = float(pd.read_csv(path, sep="\t")["s"].iloc[-1])
        if path.parent.name == "benchmarks":
            rule, task, seed = path.stem, "all", None
        else:
            rule = path.parent.name
            task, _, seed = path.stem.rpartition("-seed")
        rows.append({"rule": rule, "stage": COMPUTE_STAGES.get(rule, rule), "task": task, "seed": seed, "seconds": seconds})
    return pd.DataFrame(rows, columns=["rule", "stage", "task", "seed", "seconds"])


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else (f"{minutes} min {secs} s" if minutes else f"{secs} s")


def compute_table(benchmarks: pd.DataFrame, hardware: str) -> pd.DataFrame:
    """Table 4: wall time per stage and task of this run (mean over seeds) beside the paper's."""
    per_run = benchmarks.groupby(["stage", "task", "seed"], dropna=False)["seconds"].sum().reset_index()
    ours = per_run.groupby(["stage", "task"], sort=False)["seconds"].agg(["mean", "count"]).reset_index()
    published = {("training", r.task): r.duration for r in paper.COMPUTE.itertuples() if r.stage == "training"}
    scores = " + ".join(r.duration for r in paper.COMPUTE.itertuples() if r.stage.startswith("scores"))
    rows = []
    for r in ours.itertuples():
        reference = published.get((r.stage, r.task), f"{scores} per model" if r.stage == "scores" else "")
        rows.append(
            {
                "stage": r.stage,
                "task": r.task,
                "ours (per run)": _duration(r.mean),
                "runs": int(r.count),
                "ours: hardware": hardware,
                "paper": reference,
                "paper: hardware": paper.COMPUTE_HARDWARE if reference else "",
            }
        )
    return pd.DataFrame(rows)


def hardware_description(devices: Iterable[str]) -> str:
    """This machine's processor and the devices the training runs used."""
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores; training on {', '.join(sorted(set(devices)))}"
