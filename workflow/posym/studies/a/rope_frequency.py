"""Which RoPE frequencies each layer uses (spec §A7: Fig 4C, Fig 8, Table 1; claim A-4).

RoPE plane k (1-indexed, as paper A counts) is the interleaved pair of head dimensions (2k − 2, 2k − 1); it turns
by g_k = base^(−2(k − 1)/rotary_dim) per position (paper A: 10000^(−2(k − 1)/128), so ID 1 is 1 rad/token).

* **Frequency use** (PROPOSED, consistent with the paper's axis label "Max. logit per Frequency"): for the last
  query n of an input, plane k's logit contribution to key j is λ_k(j) = q_n[2k−2:2k] · k_j[2k−2:2k], on the
  post-RoPE query and key and without the 1/√d scale; u_k = max_{j ≤ n} λ_k(j), averaged over inputs.
* **Weighted ID** (DERIVED: it reproduces Table 1 to ±0.5 from the digitised Fig 8 curves): ID* = Σ_k k softmax(u)_k,
  temperature 1. Table 1 reports round(ID*) and g at that ID. The result depends on the scale of u.

The evaluation inputs are the first ``samples`` test sequences (PROPOSED: the score sample set of §A6, 100).
Besides that mean, the curves are computed for the paper's Fig 3 input (each task's ``fig3_input``), which is the
input of Fig 4C.

Plotting functions import matplotlib lazily: the ``posym a frequency`` job runs in the training environment.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from posym import claims
from posym.model import PosymModel
from posym.positions import Rope

from . import paper
from .tasks import get, palette

log = logging.getLogger("posym.a.frequency")

TEMPERATURE = 1.0  # of the softmax over planes (DERIVED, on unscaled logits)
BATCH = 256


def example_tokens(task: str) -> np.ndarray:
    """The Fig 3 input of ``task`` as ids, shape (1, 17)."""
    task = get(task)
    return np.array([[task.vocabulary.index(token) for token in task.fig3_input.split()]], dtype=np.int64)


def rope_of(model: PosymModel) -> Rope:
    if not isinstance(model.position, Rope):
        raise ValueError(f"frequency use needs a RoPE model; this one uses {model.config.position!r}")
    return model.position


def id_frequency(plane_id: int | np.ndarray, rotary_dim: int = 128, base: float = 10000.0) -> np.ndarray:
    """g_ID = base^(−2(ID − 1)/rotary_dim), ID 1-indexed (paper A's Table 1 and Fig 8)."""
    return base ** (-2.0 * (np.asarray(plane_id, dtype=float) - 1) / rotary_dim)


@torch.no_grad()
def max_plane_logits(model: PosymModel, tokens: np.ndarray) -> np.ndarray:
    """u_k per input, layer, head and plane, shape (N, layers, heads, planes): the largest over keys j ≤ n of
    plane k's unscaled post-RoPE logit contribution for the last query n."""
    model.eval()
    planes = rope_of(model).rotary_dim // 2
    layers = range(model.config.n_layer)
    names = [f"blocks.{layer}.attn.{hook}" for layer in layers for hook in ("hook_rot_q", "hook_rot_k")]
    out = []
    for start in range(0, len(tokens), BATCH):
        ids = torch.as_tensor(np.asarray(tokens[start : start + BATCH]), dtype=torch.long)
        cache = model.run_with_cache(ids, names)
        per_layer = []
        for layer in layers:
            q = cache[f"blocks.{layer}.attn.hook_rot_q"][0, :, :, -1, : 2 * planes]  # (B, H, 2P)
            k = cache[f"blocks.{layer}.attn.hook_rot_k"][0, :, :, :, : 2 * planes]  # (B, H, T, 2P)
            q, k = q.unflatten(-1, (planes, 2)), k.unflatten(-1, (planes, 2))
            per_layer.append((q[:, :, None] * k).sum(-1).amax(dim=2))  # (B, H, P)
        out.append(torch.stack(per_layer, dim=1))
    return torch.cat(out).numpy()


def frequency_use(model: PosymModel, tokens: np.ndarray, inputs: str) -> pd.DataFrame:
    """Mean u_k over ``tokens``: one row per layer, head and plane ID (1-indexed), labelled ``inputs``."""
    use = max_plane_logits(model, tokens).mean(axis=0)  # (L, H, P)
    frequencies = rope_of(model).frequencies.numpy()
    layers, heads, planes = np.meshgrid(*map(np.arange, use.shape), indexing="ij")
    return pd.DataFrame(
        {
            "inputs": inputs,
            "layer": layers.ravel(),
            "head": heads.ravel(),
            "id": planes.ravel() + 1,
            "frequency": frequencies[planes.ravel()],
            "use": use.ravel(),
        }
    )


def weighted_id(use: np.ndarray, temperature: float = TEMPERATURE) -> float:
    """ID* = Σ_k k softmax(u / temperature)_k, with k = 1..len(u)."""
    scaled = np.asarray(use, dtype=np.float64) / temperature
    weights = np.exp(scaled - scaled.max())
    return float(np.sum(np.arange(1, len(weights) + 1) * weights) / weights.sum())


def weighted_ids(use: pd.DataFrame, inputs: str = "test") -> pd.DataFrame:
    """Table 1's quantities per run, layer and head: ID*, its rounding and the frequency of that plane."""
    keys = [key for key in ("task", "seed", "layer", "head") if key in use.columns]
    rows = []
    for values, curve in use[use["inputs"] == inputs].groupby(keys, sort=False):
        curve = curve.sort_values("id")
        star = weighted_id(curve["use"].to_numpy())
        plane = int(round(star))
        rows.append(
            {
                **dict(zip(keys, values)),
                "weighted_id": star,
                "id": plane,
                "frequency": float(curve.loc[curve["id"] == plane, "frequency"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)


def table1(use: pd.DataFrame) -> pd.DataFrame:
    """Table 1: per task and layer, our weighted ID (mean ID* over seeds, and round(ID*) per seed) and frequency
    beside the paper's. ``use`` holds the frequency-use rows of every run, with ``task`` and ``seed`` columns."""
    ids = weighted_ids(use)
    ids = ids[ids["head"] == 0]  # paper A's models have one head per layer
    frequency_of = use.drop_duplicates("id").set_index("id")["frequency"]
    rows = []
    for (task, layer), frame in ids.groupby(["task", "layer"], sort=False):
        reference = paper.TABLE1[(paper.TABLE1["task"] == task) & (paper.TABLE1["layer"] == layer)]
        mean_star = frame["weighted_id"].mean()
        rows.append(
            {
                "task": task,
                "layer": layer,
                "ID* (mean)": mean_star,
                "ID (per seed)": ", ".join(str(i) for i in frame["id"]),
                "frequency": float(frequency_of[round(mean_star)]),
                "paper ID": int(reference["id"].iloc[0]) if len(reference) else np.nan,
                "paper frequency": float(reference["frequency"].iloc[0]) if len(reference) else np.nan,
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------ claim A-4

#: Claim A-4 (spec §A12): (task, layers, lowest allowed ID, highest allowed ID), on round(ID*).
A4_CHECKS = (
    ("number", range(0, 4), None, 3),
    ("number", range(5, 12), 30, None),
    ("letter", range(1, 12), 30, None),
    ("letter", range(0, 1), 10, 30),
)


def _bounds_text(low: int | None, high: int | None) -> str:
    if low is None:
        return f"ID ≤ {high}"
    return f"ID ≥ {low}" if high is None else f"{low} ≤ ID ≤ {high}"


def claims_a4(use: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    """Claim A-4 per seed and check, plus a "k of n seeds pass" row per check. Layers the models lack are left
    out of a check; a check with none of its layers, or a task not run, is "not tested"."""
    ids = weighted_ids(use)
    ids = ids[ids["head"] == 0]
    rows = []
    for task, layers, low, high in A4_CHECKS:
        named = f"layer {layers.start}" if len(layers) == 1 else f"layers {layers.start}–{layers.stop - 1}"
        check = f"{task} {named}: {_bounds_text(low, high)}"
        for seed in seeds:
            found = ids[(ids["task"] == task) & (ids["seed"] == seed) & ids["layer"].isin(layers)]
            inside = found["id"].between(low if low is not None else -np.inf, high if high is not None else np.inf)
            measured = ", ".join(f"L{layer} {plane}" for layer, plane in zip(found["layer"], found["id"]))
            passed = None if found.empty else bool(inside.all())
            rows.append(claims.row("A-4", check, measured or "—", _bounds_text(low, high), passed, task=task, seed=seed))
    return claims.with_seed_summary(rows)


def plot_frequency_use(use: pd.DataFrame):
    """Fig 8: frequency use against plane ID (1..64), one panel per layer, one line per task (mean ±1 sd over seeds)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    curves = use[(use["inputs"] == "test") & (use["head"] == 0)]
    layers = sorted(curves["layer"].unique())
    columns = min(4, len(layers))
    rows = -(-len(layers) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.4 * rows), squeeze=False, sharex=True)
    for ax, layer in zip(axes.flat, layers):
        sns.lineplot(
            data=curves[curves["layer"] == layer],
            x="id",
            y="use",
            hue="task",
            palette=palette(),
            errorbar="sd",
            ax=ax,
            legend=ax is axes.flat[0],
        )
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("frequency ID")
        ax.set_ylabel("frequency use")
    for ax in list(axes.flat)[len(layers) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_layer_frequency(use: pd.DataFrame, task: str = "number", layer: int = 1):
    """Fig 4C: max logit per frequency at one layer, x axis 0-indexed as in the paper, for the Fig 3 input (solid)
    and the mean over test inputs (dashed); the peak of the Fig 3 curve is labelled."""
    import matplotlib.pyplot as plt

    curves = use[(use["task"] == task) & (use["layer"] == layer) & (use["head"] == 0)]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for inputs, style, label in (("example", "-", "Fig 3 input"), ("test", "--", "mean over test inputs")):
        curve = curves[curves["inputs"] == inputs].groupby("id")["use"].mean()
        ax.plot(curve.index - 1, curve.to_numpy(), ls=style, label=label)
        if inputs == "example" and len(curve):
            peak = int(curve.idxmax()) - 1
            ax.annotate(f"ID: {peak}", (peak, curve.max()), textcoords="offset points", xytext=(6, -4))
    ax.set_xlabel("frequency ID (0-indexed)")
    ax.set_ylabel("max. logit")
    ax.set_title(f"{task.capitalize()} model, layer {layer}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
