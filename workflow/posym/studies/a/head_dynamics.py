"""Figures and tables of the scores notebook: Fig 2B, 2C, 6, 7 and the verdicts on claim A-3.

Inputs are the per-run tables of ``posym a scores`` (``scores.csv``, ``purity.csv``), concatenated with
:func:`posym.pipeline.figures.read_runs`, which adds ``task`` and ``seed``. Curves show the mean over seeds with a
±1 sd band; tables put ours beside the paper's values of spec §A5. Claim A-3 is that of spec §A12, its thresholds
the study's ``claims.a3`` settings, its rows in :mod:`posym.pipeline.claims`'s format. (The scores notebook also
judges claim A-2, on the training curves: :func:`posym.studies.a.training_curves.claim_a2`.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from posym.pipeline import claims  # noqa: E402

from . import paper  # noqa: E402

#: Fig 2B's layers (the paper's 0-indexed L1, L5, L11).
FIG2B_LAYERS = (1, 5, 11)
#: Claim A-3 and Fig 2C are stated for γ = 0.1 (spec §A6, §A12).
CLAIM_GAMMA = 0.1

MEASURES = {"positional": "positional score", "symbolic": "symbolic score", "entropy_norm": "normalised entropy"}
MEASURE_PALETTE = {"positional score": "#c0392b", "symbolic score": "#27ae60", "normalised entropy": "#8e44ad"}
KIND_PALETTE = {"positional": "#c0392b", "symbolic": "#27ae60"}


def read_purity(paths: Iterable[str | Path], tasks: Iterable[str], seeds: Iterable[int]) -> pd.DataFrame:
    """Concatenate per-run purity tables (task-major) like :func:`posym.pipeline.figures.read_runs`, reading
    ``heads`` as text: '1' names layer 1, and an empty entry means no head."""
    pairs = [(t, s) for t in tasks for s in seeds]
    paths = list(paths)
    if len(paths) != len(pairs):
        raise ValueError(f"{len(paths)} tables for {len(pairs)} task x seed runs")
    frames = [
        pd.read_csv(p, dtype={"heads": str}, keep_default_na=False).assign(task=t, seed=s)
        for p, (t, s) in zip(paths, pairs)
    ]
    return pd.concat(frames, ignore_index=True)


def final_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of each run's (task, seed) analysed checkpoint (column ``final``: the last or the best on validation,
    as the study's final_checkpoint chose)."""
    return frame[frame["final"].astype(bool)]


def _tasks(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["task"]))


def _sorted(frame: pd.DataFrame, columns: list[str], listed: dict[str, list], ascending=True) -> pd.DataFrame:
    """Sort by ``columns``, those in ``listed`` in the listed order (e.g. tasks as configured) rather than A–Z."""

    def key(column: pd.Series) -> pd.Series:
        return (
            column.map({value: i for i, value in enumerate(listed[column.name])}) if column.name in listed else column
        )

    return frame.sort_values(columns, ascending=ascending, key=key, kind="stable")


def _layer_ids(heads: str) -> list[int]:
    """Layer ids of a purity table's ``heads`` entry ('0 1 3' or, for multi-head models, '0.1 3.0')."""
    return [int(label.split(".")[0]) for label in heads.split()]


def _layer_names(heads: str) -> str:
    """'0 1 3' -> 'L0 L1 L3'; no head -> 'none'."""
    return " ".join(f"L{label}" for label in heads.split()) or "none"


# --------------------------------------------------------------------------------- Fig 2B and Fig 6


def plot_scores(scores: pd.DataFrame, layers: Sequence[int]) -> plt.Figure:
    """Positional score, symbolic score and normalised entropy against training step; one row per layer.

    Fig 2B with ``layers`` = (1, 5, 11), Fig 6 with every layer. Layers the model lacks are skipped.
    """
    layers = [layer for layer in layers if layer in set(scores["layer"])]
    long = scores[scores["layer"].isin(layers)].melt(
        id_vars=["task", "seed", "step", "layer", "head"],
        value_vars=list(MEASURES),
        var_name="measure",
        value_name="value",
    )
    long["measure"] = long["measure"].map(MEASURES)
    tasks = _tasks(scores)
    fig, axes = plt.subplots(
        len(layers),
        len(tasks),
        figsize=(5.5 * len(tasks), 1.9 * len(layers) + 0.8),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    multi_head = scores["head"].nunique() > 1
    for row, layer in enumerate(layers):
        for col, task in enumerate(tasks):
            ax = axes[row][col]
            frame = long[(long["task"] == task) & (long["layer"] == layer)]
            sns.lineplot(
                data=frame,
                x="step",
                y="value",
                hue="measure",
                style="head" if multi_head else None,
                palette=MEASURE_PALETTE,
                errorbar="sd",
                ax=ax,
                legend=row == 0 and col == 0,
            )
            ax.set_title(f"{task.capitalize()} task, L{layer}", fontsize=9)
            ax.set_ylim(-0.05, 1.05)
            ax.set_ylabel("")
            ax.set_xlabel("training step")
    if axes[0][0].get_legend() is not None:
        sns.move_legend(axes[0][0], "lower left", fontsize=7, title=None)
    fig.tight_layout()
    return fig


def final_scores_table(scores: pd.DataFrame, layers: Sequence[int]) -> pd.DataFrame:
    """Last-checkpoint scores of ``layers``: ours (mean and sd over seeds) beside the paper's (Fig 2B)."""
    final = final_rows(scores)
    final = final[final["layer"].isin(layers)]
    table = final.groupby(["task", "layer", "head"], sort=False)[list(MEASURES)].agg(["mean", "std"])
    table.columns = [name if stat == "mean" else f"{name} sd" for name, stat in table.columns]
    table = table.reset_index()
    table["seeds"] = final.groupby(["task", "layer", "head"], sort=False)["seed"].nunique().to_numpy()
    reference = paper.SCORES_FINAL.rename(columns={m: f"paper {m}" for m in list(MEASURES) + ["note"]})
    return table.merge(reference, on=["task", "layer"], how="left")


def initial_final_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Every head's scores at the first and the last checkpoint (means over seeds), with the paper's words (Fig 6)."""
    first = scores[scores["step"] == scores.groupby(["task", "seed"])["step"].transform("min")].assign(stage="initial")
    stages = pd.concat([first, final_rows(scores).assign(stage="final")])
    table = (
        stages.groupby(["task", "layer", "head", "stage"], sort=False)
        .agg(step=("step", "max"), **{m: (m, "mean") for m in MEASURES})
        .reset_index()
    )
    table = _sorted(table, ["task", "layer", "head", "stage"], {"task": _tasks(scores), "stage": ["initial", "final"]})
    table["paper"] = [
        _paper_words(task, layer, stage) for task, layer, stage in zip(table["task"], table["layer"], table["stage"])
    ]
    return table


def _paper_words(task: str, layer: int, stage: str) -> str:
    """What spec §A5 says about a layer's scores at initialisation or at the end."""
    if stage == "initial":
        low, high = paper.SCORES_INITIAL["low"], paper.SCORES_INITIAL["high"]
        return f"pos, sym {low:.2f}–{high:.2f}; H_norm ≈ {paper.SCORES_INITIAL['entropy_norm']:.0f}"
    reference = paper.SCORES_FINAL[(paper.SCORES_FINAL["task"] == task) & (paper.SCORES_FINAL["layer"] == layer)]
    if reference.empty:
        return ""
    r = reference.iloc[0]
    return f"pos {r['positional']:.2f}, sym {r['symbolic']:.2f}, H_norm {r['entropy_norm']:.2f}"


# --------------------------------------------------------------------------------- Fig 2C and Fig 7


def plot_purity(purity: pd.DataFrame, gammas: Sequence[float]) -> plt.Figure:
    """Pure positional (red) and pure symbolic (green) head counts against step; one row per γ.

    Each head is annotated where it first becomes pure (first seed's run).
    """
    tasks = _tasks(purity)
    fig, axes = plt.subplots(
        len(gammas), len(tasks), figsize=(5.5 * len(tasks), 3.0 * len(gammas)), squeeze=False, sharex=True, sharey=True
    )
    top = purity["count"].max()
    for row, gamma in enumerate(gammas):
        for col, task in enumerate(tasks):
            ax = axes[row][col]
            frame = purity[(purity["task"] == task) & np.isclose(purity["gamma"], gamma)]
            sns.lineplot(
                data=frame,
                x="step",
                y="count",
                hue="kind",
                palette=KIND_PALETTE,
                errorbar="sd",
                drawstyle="steps-post",
                ax=ax,
                legend=row == 0 and col == 0,
            )
            _annotate_first_pure(ax, frame[frame["seed"] == frame["seed"].min()])
            ax.set_title(f"{task.capitalize()} task, γ = {gamma:g}", fontsize=9)
            ax.set_ylim(-0.3, top + 1.2)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("pure heads")
            ax.set_xlabel("training step")
    if axes[0][0].get_legend() is not None:
        sns.move_legend(axes[0][0], "upper left", fontsize=7, title=None)
    fig.tight_layout()
    return fig


def _annotate_first_pure(ax: plt.Axes, run: pd.DataFrame) -> None:
    seen: dict[str, set] = {"positional": set(), "symbolic": set()}
    for _, r in run.sort_values("step").iterrows():
        new = set(r["heads"].split()) - seen[r["kind"]]
        if new:
            label = " ".join(f"L{h}" for h in sorted(new, key=lambda h: float(h)))
            ax.annotate(
                label,
                (r["step"], r["count"]),
                xytext=(2, 3),
                textcoords="offset points",
                fontsize=6,
                color=KIND_PALETTE[r["kind"]],
            )
            seen[r["kind"]] |= new


def purity_steps_table(purity: pd.DataFrame, gamma: float) -> pd.DataFrame:
    """First step at which each of the paper's Fig 2C counts is reached at threshold ``gamma``: ours per seed
    and mean, and the paper's."""
    frame = purity[np.isclose(purity["gamma"], gamma)]
    rows = []
    for _, ref in paper.PURITY_STEPS[paper.PURITY_STEPS["task"].isin(_tasks(frame))].iterrows():
        curve = frame[(frame["task"] == ref["task"]) & (frame["kind"] == ref["kind"])]
        per_seed = [_first_step(run, ref["count"]) for _, run in curve.groupby("seed")]
        reached = [s for s in per_seed if not np.isnan(s)]
        rows.append(
            {
                "task": ref["task"],
                "kind": ref["kind"],
                "count": ref["count"],
                "ours (mean)": float(np.mean(reached)) if reached else float("nan"),
                "ours (per seed)": ", ".join("never" if np.isnan(s) else str(int(s)) for s in per_seed),
                "paper": ref["step"],
                "paper layer": "" if pd.isna(ref["layer"]) else f"L{ref['layer']}",
            }
        )
    return pd.DataFrame(rows)


def _first_step(run: pd.DataFrame, count: int) -> float:
    reached = run.loc[run["count"] >= count, "step"]
    return float(reached.min()) if len(reached) else float("nan")


def purity_final_table(purity: pd.DataFrame) -> pd.DataFrame:
    """Pure heads at the last checkpoint, per task, γ, kind and seed, beside the paper's (Fig 2C, Fig 7)."""
    final = _sorted(
        final_rows(purity),
        ["task", "gamma", "kind", "seed"],
        {"task": _tasks(purity)},
        ascending=[True, False, True, True],
    )
    table = final[["task", "gamma", "kind", "seed", "step", "count", "heads"]].assign(
        heads=lambda f: f["heads"].map(_layer_names)
    )
    reference = paper.PURITY_FINAL.assign(heads=paper.PURITY_FINAL["heads"].map(_layer_names))
    reference = reference.rename(columns={"count": "paper count", "heads": "paper heads"})
    return table.merge(reference, on=["task", "kind"], how="left")


# ------------------------------------------------------------------------------------------ claims

#: check, measured, expected, passed, source of the threshold, and (optional) our number and the paper's
Check = tuple

#: Where claim A-3's thresholds come from.
A3_SOURCE = "spec §A12 A-3; Fig 2C / Fig 7 (spec §A5: Number L0–L3 positional, L4–L11 symbolic; Letter L1–L11 symbolic)"
A3_START_SOURCE = "spec §A12 A-3; Fig 2B / Fig 6 (spec §A5: positional ≈ symbolic ≈ 0.98–0.99 at initialisation)"


#: A-3's checks that a model which learned nothing passes, and why they cannot decide the claim.
A3_SUPPORTING = {
    "uniform start": "a property of initialisation: every untrained model passes it; the checks at convergence decide",
    "few positional": "one-sided (at most): a model with no pure head, one that learned nothing, passes it; the symbolic count decides",
}


def _rows(claim: str, task: str, seed, checks: list[Check], supporting: Mapping[str, str] = {}) -> list[dict]:
    """Check rows; ``supporting``: the reason, by check name, why a check cannot decide (posym.pipeline.claims)."""
    rows = []
    for check, measured, expected, passed, source, *numbers in checks:
        ours, paper = numbers or (None, None)
        rows.append(claims.row(claim, check, measured, expected, passed, source=source, task=task, seed=seed, ours=ours, paper=paper,
                               supporting=supporting.get(check, "")))  # fmt: skip
    return rows


def claim_a3(scores: pd.DataFrame, purity: pd.DataFrame, thresholds: Mapping, gamma: float = CLAIM_GAMMA) -> pd.DataFrame:
    """Claim A-3 (spec §A12): pure heads at the analysed checkpoint (γ = 0.1), and uniform heads at step 0.

    With the spec's thresholds (``thresholds``, the study's ``claims.a3``): Number ≥ 3 pure positional heads, all in
    layers 0–4, and ≥ 7 pure symbolic heads, all in layers ≥ 4 (paper 4 and 8). Letter: no pure positional head
    and ≥ 10 pure symbolic ones (paper 11). Both: at step 0 every head has s_POS, s_SYM ≥ 0.9.
    """
    final = final_rows(purity[np.isclose(purity["gamma"], gamma)])
    if final.empty:
        untested = f"purity not computed for γ = {gamma:g} (scores.gammas)"
        return claims.with_seed_summary(
            [
                claims.row("A-3", "pure heads at convergence", untested, "", None, source=A3_SOURCE, task=t)
                for t in _tasks(purity)
            ]
        )
    rows = []
    for (task, seed), run in final.groupby(["task", "seed"], sort=False):
        heads = dict(zip(run["kind"], run["heads"]))
        initial = scores[(scores["task"] == task) & (scores["seed"] == seed) & (scores["step"] == 0)]
        checks = _pure_head_checks(task, heads, thresholds)
        start = _uniform_start_check(initial, thresholds)
        supporting = {start[0]: A3_SUPPORTING["uniform start"]}
        if task != "number":  # Letter's "no pure positional head": an upper bound
            supporting[checks[0][0]] = A3_SUPPORTING["few positional"]
        rows += _rows("A-3", task, seed, [*checks, start], supporting)
    return claims.with_seed_summary(rows)


def _pure_head_checks(task: str, heads: dict[str, str], thresholds: Mapping) -> list[Check]:
    positional, symbolic = _layer_ids(heads["positional"]), _layer_ids(heads["symbolic"])
    shown = {kind: f"{len(_layer_ids(heads[kind]))}: {_layer_names(heads[kind])}" for kind in heads}
    if task == "number":
        n_pos, last = thresholds["number_positional"], thresholds["number_positional_last_layer"]
        n_sym, first = thresholds["number_symbolic"], thresholds["number_symbolic_first_layer"]
        return [
            (
                f"≥ {n_pos} pure positional heads, all in layers 0–{last}",
                shown["positional"],
                f"≥ {n_pos} in L0–L{last} (paper 4: L0–L3)",
                len(positional) >= n_pos and max(positional) <= last,
                A3_SOURCE,
                len(positional),
                4,
            ),
            (
                f"≥ {n_sym} pure symbolic heads, all in layers ≥ {first}",
                shown["symbolic"],
                f"≥ {n_sym} in L{first}+ (paper 8: L4–L11)",
                len(symbolic) >= n_sym and min(symbolic) >= first,
                A3_SOURCE,
                len(symbolic),
                8,
            ),
        ]
    most, n_sym = thresholds["letter_positional"], thresholds["letter_symbolic"]
    return [
        (
            "no pure positional head" if most == 0 else f"≤ {most} pure positional heads",
            shown["positional"],
            f"{'' if most == 0 else '≤ '}{most} (paper 0)",
            len(positional) <= most,
            A3_SOURCE,
            len(positional),
            0,
        ),
        (f"≥ {n_sym} pure symbolic heads", shown["symbolic"], f"≥ {n_sym} (paper 11: L1–L11)", len(symbolic) >= n_sym, A3_SOURCE, len(symbolic), 11),
    ]


def _uniform_start_check(initial: pd.DataFrame, thresholds: Mapping) -> Check:
    least = thresholds["initial_score"]
    check, expected = f"at step 0 every head has s_POS, s_SYM ≥ {least:g}", f"≥ {least:g} (paper 0.98–0.99)"
    if initial.empty:
        return check, "no step-0 checkpoint", expected, False, A3_START_SOURCE
    low_positional, low_symbolic = initial["positional"].min(), initial["symbolic"].min()
    measured = f"min s_POS {low_positional:.3f}, min s_SYM {low_symbolic:.3f}"
    return check, measured, expected, low_positional >= least and low_symbolic >= least, A3_START_SOURCE
