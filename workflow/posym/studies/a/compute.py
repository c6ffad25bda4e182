"""Table 4 of paper A: the compute this run used, per stage and task, beside the paper's (App. I)."""

from __future__ import annotations

import pandas as pd

from posym.wall_times import duration

from . import paper

#: Which rules' wall times make up each stage of Table 4 (benchmark folders are named after the rules).
STAGES = {
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
                "ours (per run)": duration(r.mean),
                "runs": int(r.count),
                "ours: hardware": hardware,
                "paper": reference,
                "paper: hardware": paper.COMPUTE_HARDWARE if reference else "",
            }
        )
    return pd.DataFrame(rows)
