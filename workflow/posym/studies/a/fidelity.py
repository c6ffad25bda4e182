"""Why our models differ from the paper's: a factor study of the training recipe (issue "paper A fidelity").

Three choices in the authors' recipe are ambiguous or were misread (spec §A3), and each may move the verdicts:

* ``embd_pdrop``: 0.0 is what they trained with (their ``embed_pdrop=0.1`` is not a ``GPTJConfig`` field), 0.1
  what the spec first said;
* ``batch_size``: 6750 steps are one epoch at batch 64, or three epochs at an effective batch of 192 (their
  per-device batch of 64 on three GPUs); the steps stay the config's, so the epochs follow from the batch;
* ``final_checkpoint``: the last checkpoint, or the best on validation (their ``load_best_model_at_end``).

``a.fidelity`` lists the levels of each factor; each combination is a variant of paper A's run grid
(posym.studies.a.variants), trained for every task and ``fidelity.seeds`` seed with paper A's own rules; the
choices of one (embd_pdrop, batch_size) *recipe* share its training (choosing costs none). :func:`verdicts` runs
claims A-2 to A-5 on every variant with the study's own claim code, and :func:`factor_effects` says, check by
check, which factor moves the verdict.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from posym.pipeline import claims

from . import head_dynamics, length_generalisation, rope_frequency, training_curves
from .variants import recipe_name

#: The factors, in the order a variant's name lists them.
FACTORS = ("embd_pdrop", "batch_size", "final_checkpoint")
#: The claims the study compares, and the kind of table each is computed from.
CLAIMS = ("A-2", "A-3", "A-4", "A-5")


def recipes(section: dict) -> dict[str, dict]:
    """Each training recipe of the study by name: its factor levels."""
    fidelity = section["fidelity"]
    return {
        recipe_name(p, b): {"embd_pdrop": p, "batch_size": b}
        for p, b in itertools.product(fidelity["embd_pdrop"], fidelity["batch_size"])
    }


def variant_levels(recipe: str, choice: str, section: dict) -> dict:
    return {**recipes(section)[recipe], "final_checkpoint": choice}


# ------------------------------------------------------------------------------------------- verdicts


def verdicts(
    section: dict, metrics: pd.DataFrame, scores: pd.DataFrame, purity: pd.DataFrame, frequency: pd.DataFrame,
    length: pd.DataFrame,
) -> pd.DataFrame:
    """Claims A-2 to A-5 per variant, from the per-run tables (each with recipe, choice, task and seed columns):
    the claim rows of every check (per seed and "all seeds"), with the variant's factor levels beside them. The
    thresholds are the section's ``claims`` (``a2`` … ``a5``), as the study's own notebooks judge them."""
    seeds = list(section["fidelity"]["seeds"])
    thresholds = section["claims"]
    frames = []
    for (recipe, choice), _ in metrics.groupby(["recipe", "choice"], sort=False):
        pick = lambda t: t[(t["recipe"] == recipe) & (t["choice"] == choice)].drop(columns=["recipe", "choice"])  # noqa: E731
        rows = [
            training_curves.claim_a2(pick(metrics), thresholds["a2"]),
            head_dynamics.claim_a3(pick(scores), pick(purity), thresholds["a3"]),
            rope_frequency.claim_a4(pick(frequency), seeds, thresholds["a4"]),
            length_generalisation.claim_a5(pick(length), seeds, thresholds["a5"]),
        ]
        table = pd.concat([r[claims.COLUMNS] for r in rows], ignore_index=True)
        for factor, level in variant_levels(recipe, choice, section).items():
            table.insert(FACTORS.index(factor), factor, level)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def verdict_grid(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim check, one column per variant: the "k of n seeds pass" of the check (its only row when
    a single seed ran)."""
    summary = table[table["seed"] == claims.ALL_SEEDS]
    if summary.empty:
        summary = table
    summary = summary.assign(
        variant=[variant_label(recipe_name(p, b), c) for p, b, c in summary[list(FACTORS)].itertuples(index=False)],
        cell=[_cell(m, v) for m, v in zip(summary["measured"], summary["verdict"])],
        check=summary["claim"] + " " + summary["task"].where(summary["task"] != "", "both") + ": " + summary["check"],
    )
    grid = summary.pivot_table(index="check", columns="variant", values="cell", aggfunc="first", sort=False)
    return grid.reset_index()


def variant_label(recipe: str, choice: str) -> str:
    """A variant's name in tables and legends: its recipe and its choice ("pdrop0.1-batch192, best validation")."""
    return f"{recipe}, {choice.replace('_', ' ')}"


def _cell(measured: str, verdict: str) -> str:
    return f"{verdict} ({measured})" if "seeds pass" in measured else verdict


def factor_effects(table: pd.DataFrame) -> pd.DataFrame:
    """Per claim check and factor: the share of seeds that pass at each level of the factor (over the other
    factors' levels), and the difference, highest level minus lowest. A factor that moves a check has a difference
    far from 0; one that does not, 0."""
    per_seed = table[table["seed"] != claims.ALL_SEEDS].copy()
    per_seed = per_seed[per_seed["verdict"] != "not tested"]
    per_seed["passes"] = (per_seed["verdict"] == "pass").astype(float)
    per_seed["check"] = per_seed["claim"] + " " + per_seed["task"].where(per_seed["task"] != "", "both") + ": " + per_seed["check"]
    rows = []
    for factor in FACTORS:
        shares = per_seed.groupby(["check", factor], sort=False)["passes"].mean().unstack(factor)
        levels = list(shares.columns)
        for check, row in shares.iterrows():
            rows.append(
                {
                    "check": check,
                    "factor": factor,
                    **{f"{factor} = {level}": row[level] for level in levels},
                    "effect": row[levels[-1]] - row[levels[0]] if len(levels) > 1 else np.nan,
                }
            )
    effects = pd.DataFrame(rows)
    return effects


def effect_summary(effects: pd.DataFrame) -> pd.DataFrame:
    """One row per check: the pass-share effect of each factor (high level minus low level)."""
    return effects.pivot_table(index="check", columns="factor", values="effect", sort=False).reindex(columns=list(FACTORS)).reset_index()


#: The A-5 points whose accuracy :func:`measures` reports (task, prepended tokens).
LENGTH_POINTS = (("number", 100), ("number", 300), ("letter", 500), ("letter", 850))


def measures(metrics: pd.DataFrame, purity: pd.DataFrame, frequency: pd.DataFrame, length: pd.DataFrame) -> pd.DataFrame:
    """What the verdicts are made of, per variant and task: mean and sd over seeds of the first step each hop
    reaches 0.9 (A-2), the pure positional and symbolic heads at the analysed checkpoint (A-3, γ = 0.1), ID* of
    each layer (A-4) and the accuracy at claim A-5's points, with the paper's value beside each where it has one."""
    from . import paper

    rows = []
    for (recipe, choice, task, seed), run in metrics.groupby(["recipe", "choice", "task", "seed"], sort=False):
        key = {"recipe": recipe, "choice": choice, "task": task, "seed": seed}
        for hop in (1, 2, 3, 4):
            reference = paper.HOP_CROSSINGS[(paper.HOP_CROSSINGS["task"] == task) & (paper.HOP_CROSSINGS["curve"] == f"hop {hop} ≥ 0.9")]
            rows.append({**key, "measure": f"A-2: first step hop {hop} ≥ 0.9", "value": training_curves.first_crossing(run, 0.9, str(hop)), "paper": _only(reference["step"])})
    final = head_dynamics.final_rows(purity[np.isclose(purity["gamma"], head_dynamics.CLAIM_GAMMA)])
    for row in final.itertuples(index=False):
        reference = paper.PURITY_FINAL[(paper.PURITY_FINAL["task"] == row.task) & (paper.PURITY_FINAL["kind"] == row.kind)]
        rows.append({"recipe": row.recipe, "choice": row.choice, "task": row.task, "seed": row.seed, "measure": f"A-3: pure {row.kind} heads", "value": row.count, "paper": _only(reference["count"])})
    ids = pd.concat(
        [rope_frequency.weighted_ids(f).assign(recipe=r, choice=c) for (r, c), f in frequency.groupby(["recipe", "choice"], sort=False)]
    )
    for row in ids[ids["head"] == 0].itertuples(index=False):
        reference = paper.TABLE1[(paper.TABLE1["task"] == row.task) & (paper.TABLE1["layer"] == row.layer)]
        rows.append({"recipe": row.recipe, "choice": row.choice, "task": row.task, "seed": row.seed, "measure": f"A-4: ID* layer {row.layer}", "value": row.weighted_id, "paper": _only(reference["id"])})
    overall = length[length["hop"].astype(str) == "all"]
    for (recipe, choice, task, seed), run in overall.groupby(["recipe", "choice", "task", "seed"], sort=False):
        curve = run.set_index("extra_tokens")["accuracy"].sort_index()
        for point_task, extra in LENGTH_POINTS:
            if point_task == task:
                value, _ = length_generalisation.accuracy_at(curve, extra)
                rows.append({"recipe": recipe, "choice": choice, "task": task, "seed": seed, "measure": f"A-5: accuracy at +{extra}", "value": value, "paper": float(length_generalisation.paper_accuracy(task, [extra])[0])})
    frame = pd.DataFrame(rows)
    table = frame.groupby(["measure", "task", "recipe", "choice"], sort=False).agg(mean=("value", "mean"), sd=("value", "std"), seeds=("value", "count"), paper=("paper", "first"))
    return table.reset_index()


def _only(values: pd.Series) -> float:
    return float(values.iloc[0]) if len(values) else np.nan


def measure_grid(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`measures` with one column per variant ("mean ± sd") and the paper's value."""
    table = table.assign(
        variant=[variant_label(r, c) for r, c in zip(table["recipe"], table["choice"])],
        cell=[f"{m:.3g}" + ("" if np.isnan(s) else f" ± {s:.2g}") for m, s in zip(table["mean"], table["sd"])],
    )
    grid = table.pivot_table(index=["measure", "task"], columns="variant", values="cell", aggfunc="first", sort=False)
    paper_values = table.groupby(["measure", "task"], sort=False)["paper"].first()
    return grid.assign(paper=paper_values).reset_index()


def length_curves(length: pd.DataFrame) -> pd.DataFrame:
    """Overall accuracy (hop "all") against prepended tokens per variant and task: mean and sd over seeds."""
    overall = length[length["hop"].astype(str) == "all"]
    keys = ["recipe", "choice", "task", "extra_tokens"]
    return overall.groupby(keys, sort=False)["accuracy"].agg(["mean", "std", "count"]).reset_index()


def plot_length(length: pd.DataFrame):
    """Accuracy against prepended tokens per variant (mean ±1 sd over seeds), one panel per task: colour = recipe,
    solid = best on validation, dotted = last checkpoint; the paper's digitised Fig 5B dashed."""
    import matplotlib.pyplot as plt

    from . import paper

    curves = length_curves(length)
    tasks = list(dict.fromkeys(curves["task"]))
    recipes_seen = list(dict.fromkeys(curves["recipe"]))
    colours = dict(zip(recipes_seen, plt.get_cmap("tab10").colors))
    styles = {"best_validation": "-", "last": ":"}
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.8), squeeze=False, sharey=True)
    for ax, task in zip(axes[0], tasks):
        for (recipe, choice), curve in curves[curves["task"] == task].groupby(["recipe", "choice"], sort=False):
            ax.plot(curve["extra_tokens"], curve["mean"], ls=styles.get(choice, "-"), c=colours[recipe], marker="o", ms=3, label=variant_label(recipe, choice))
            ax.fill_between(curve["extra_tokens"], curve["mean"] - curve["std"].fillna(0), curve["mean"] + curve["std"].fillna(0), color=colours[recipe], alpha=0.1)
        reach = curves["extra_tokens"].max()
        reference = paper.LENGTH_CURVE[(paper.LENGTH_CURVE["task"] == task) & (paper.LENGTH_CURVE["extra_tokens"] <= max(reach, 1))]
        ax.plot(reference["extra_tokens"], reference["accuracy"], ls="--", c="k", alpha=0.6, label="paper (Fig 5B)")
        ax.set_title(f"{task.capitalize()} task")
        ax.set_xlabel("tokens prepended before the target window")
        ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel("accuracy")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def length_table(length: pd.DataFrame) -> pd.DataFrame:
    """The curves of :func:`plot_length` as a table, with the paper's value where digitised."""
    from . import paper

    table = length_curves(length).rename(columns={"mean": "ours", "std": "ours sd", "count": "seeds"})
    reference = paper.LENGTH_CURVE.rename(columns={"accuracy": "paper"})
    return table.merge(reference, on=["task", "extra_tokens"], how="left")
