"""Which RoPE frequencies each layer uses (spec §A7: Fig 4C, Fig 8, Table 1; claim A-4).

RoPE plane k (1-indexed, as paper A counts) is the interleaved pair of head dimensions (2k − 2, 2k − 1); it turns
by g_k = base^(−2(k − 1)/rotary_dim) per position (paper A: 10000^(−2(k − 1)/128), so ID 1 is 1 rad/token).

* **Frequency use** (PROPOSED, consistent with the paper's axis label "Max. logit per Frequency"): for the last
  query n of an input, plane k's logit contribution to key j is λ_k(j) = q_n[2k−2:2k] · k_j[2k−2:2k], on the
  post-RoPE query and key and without the 1/√d scale; u_k = max_{j ≤ n} λ_k(j), averaged over inputs.
* **Weighted ID** (DERIVED: it reproduces Table 1 to ±0.5 from the digitised Fig 8 curves): ID* = Σ_k k softmax(u)_k,
  temperature 1. Table 1 reports round(ID*) and g at that ID. The result depends on the scale of u.
* **The null of a flat curve** (posym's, for claim A-4): a head with no frequency preference gives ID* = 32.5 on a
  flat curve, and near it whenever its logits are small, so "ID ≥ 30" alone says nothing. :func:`flat_curve_null`
  gives the ID* such a head would show at this head's own logit scale and number of inputs; a check counts an ID*
  as separated from the flat curve only outside that null (see its docstring for why the planes are shuffled
  within each input and not on the mean curve).

The evaluation inputs are the first ``samples`` test sequences (PROPOSED: the score sample set of §A6, 100).
Besides that mean, the curves are computed for the paper's Fig 3 input (each task's ``fig3_input``), which is the
input of Fig 4C.

Plotting functions import matplotlib lazily: the ``posym a frequency`` job runs in the training environment.
"""

from __future__ import annotations

import logging
from typing import Mapping

import numpy as np
import pandas as pd
import torch

from posym.pipeline import claims
from posym.nn.gptj import PosymModel
from posym.nn.positions import Rope

from . import paper
from .tasks import get, palette

log = logging.getLogger("posym.a.frequency")

TEMPERATURE = 1.0  # of the softmax over planes (DERIVED, on unscaled logits)
BATCH = 256

#: The null of a flat curve (:func:`flat_curve_null`): shuffles drawn, the one-sided level of a separation check
#: (ID* beyond the null's 1st or 99th percentile), and the generator's seed (fixed, so a verdict is reproducible).
NULL_PERMUTATIONS = 2000
NULL_LEVEL = 0.01
NULL_SEED = 0
NULL_CHUNK_VALUES = 4_000_000  # values shuffled at a time (32 MB): memory stays flat whatever the number of inputs


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


def _weighted_ids(use: np.ndarray, temperature: float = TEMPERATURE) -> np.ndarray:
    """ID* of every curve along the last axis (planes k = 1..P)."""
    scaled = np.asarray(use, dtype=np.float64) / temperature
    weights = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    return (weights * np.arange(1, scaled.shape[-1] + 1)).sum(axis=-1) / weights.sum(axis=-1)


def flat_curve_null(
    per_input_use: np.ndarray,
    permutations: int = NULL_PERMUTATIONS,
    seed: int = NULL_SEED,
    temperature: float = TEMPERATURE,
) -> np.ndarray:
    """ID* of ``permutations`` mean curves of a head with no frequency preference, from its u values per input.

    ``per_input_use`` is (inputs, planes): u_k(x) of one layer and head. No frequency preference means that the
    plane labels carry no information: for every input, its 64 values are exchangeable across planes. Each draw
    shuffles every input's values independently, averages over inputs as :func:`frequency_use` does, and takes
    ID*. The null keeps the head's logit scale and the number of inputs. Small logits give a narrow null about
    32.5, and an inert head's ID* lies in it unless its small logits favour the same planes on input after input;
    a flat curve gives the single value 32.5, which no ID* can lie beyond. Large logits widen it: at temperature 1,
    the noise of a mean over few inputs moves ID* far (a one-plane head of u = 60 on 100 inputs: about 25–39).

    Why within each input, not the 64 values of the mean curve: the inputs are the replicates. Shuffling the mean
    curve asks where its peak lands among 64 places, so a head whose every input peaks on plane 2 would be at the
    null's 2/64 ≈ 3 % quantile at best and never separated at 1 %; shuffled within inputs, the peaks land on
    different planes, the null's mean curve is flat, and a consistent peak stands out as it should.

    The cost is ``permutations`` × inputs × planes shuffled values: about 0.3 s for 100 inputs on one core.
    """
    values = np.asarray(per_input_use, dtype=np.float64)
    rng = np.random.default_rng(seed)
    chunk = max(1, NULL_CHUNK_VALUES // values.size)
    stars = []
    for start in range(0, permutations, chunk):
        count = min(chunk, permutations - start)
        shuffled = rng.permuted(np.broadcast_to(values, (count, *values.shape)), axis=-1)
        stars.append(_weighted_ids(shuffled.mean(axis=1), temperature))
    return np.concatenate(stars)


def null_interval(null: np.ndarray, level: float = NULL_LEVEL) -> tuple[float, float]:
    """The ``level`` and 1 − ``level`` quantiles of a null's ID* values (each a one-sided bound)."""
    return float(np.quantile(null, level)), float(np.quantile(null, 1 - level))


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
    """Mean u_k over ``tokens``: one row per layer, head and plane ID (1-indexed), labelled ``inputs``
    (:func:`use_table` of :func:`max_plane_logits`)."""
    return use_table(max_plane_logits(model, tokens), rope_of(model).frequencies.numpy(), inputs)


def use_table(per_input: np.ndarray, frequencies: np.ndarray, inputs: str) -> pd.DataFrame:
    """The frequency-use rows of u values per input, shape (N, layers, heads, planes): the mean over inputs per
    layer, head and plane, and ``null_low``, ``null_high`` (the same on every plane of a layer and head): the
    :data:`NULL_LEVEL` and 1 − :data:`NULL_LEVEL` quantiles of :func:`flat_curve_null`, computed here because the
    null needs the values per input, which only the frequency job has."""
    use = per_input.mean(axis=0)  # (L, H, P)
    nulls = np.array(
        [[null_interval(flat_curve_null(per_input[:, l, h])) for h in range(use.shape[1])] for l in range(use.shape[0])]
    )  # (L, H, 2)
    layers, heads, planes = np.meshgrid(*map(np.arange, use.shape), indexing="ij")
    layers, heads, planes = layers.ravel(), heads.ravel(), planes.ravel()
    return pd.DataFrame(
        {
            "inputs": inputs,
            "layer": layers,
            "head": heads,
            "id": planes + 1,
            "frequency": frequencies[planes],
            "use": use.ravel(),
            "null_low": nulls[layers, heads, 0],
            "null_high": nulls[layers, heads, 1],
        }
    )


def weighted_id(use: np.ndarray, temperature: float = TEMPERATURE) -> float:
    """ID* = Σ_k k softmax(u / temperature)_k, with k = 1..len(u)."""
    return float(_weighted_ids(use, temperature))


def weighted_ids(use: pd.DataFrame, inputs: str = "test") -> pd.DataFrame:
    """Table 1's quantities per run, layer and head: ID*, its rounding and the frequency of that plane; beside
    them the plane of the largest u (``peak_id``), that u (``max_use``: the logit scale that decides how far ID*
    can move from 32.5) and the flat-curve null's bounds on ID* (NaN in a table written without them)."""
    keys = [key for key in ("task", "seed", "layer", "head") if key in use.columns]
    rows = []
    for values, curve in use[use["inputs"] == inputs].groupby(keys, sort=False):
        curve = curve.sort_values("id")
        star = weighted_id(curve["use"].to_numpy())
        plane = int(round(star))
        peak = curve.loc[curve["use"].idxmax()]
        rows.append(
            {
                **dict(zip(keys, values)),
                "weighted_id": star,
                "id": plane,
                "frequency": float(curve.loc[curve["id"] == plane, "frequency"].iloc[0]),
                "peak_id": int(peak["id"]),
                "max_use": float(peak["use"]),
                "null_low": float(curve["null_low"].iloc[0]) if "null_low" in curve else np.nan,
                "null_high": float(curve["null_high"].iloc[0]) if "null_high" in curve else np.nan,
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

def a4_checks(thresholds: Mapping) -> tuple:
    """Claim A-4's checks (spec §A12) with the bands of ``thresholds`` (the study's ``claims.a4``): (task, layers,
    lowest allowed ID, highest allowed ID, the side of the flat-curve null the ID* must lie on, where the thresholds
    come from), the band on round(ID*). The side is "above" for the low-frequency band (ID ≥ 30 holds for a flat
    curve, 32.5, so only an ID* above the null says the head prefers slow planes); "below" for ID ≤ 3 and for the
    intermediate 10–30, both of which lie under 32.5. Table 1's own Letter L1 (ID* 32.4, spec §A7) sits at the flat
    value, so the paper's curve for that layer could not pass the separation either: the spec's claim is kept as
    written, and the per-layer table shows which layer fails."""
    slow = thresholds["symbolic_min_id"]
    low, high = thresholds["letter_layer0_ids"]
    return (
        (
            "number",
            range(0, 4),
            None,
            thresholds["positional_max_id"],
            "below",
            "spec §A12 A-4; Table 1 (Number L0–L3: ID 1, 2, 2, 2)",
        ),
        (
            "number",
            range(5, 12),
            slow,
            None,
            "above",
            "spec §A12 A-4 (a flat curve gives 32.5, so ID ≥ 30 must be separated from it); Table 1 (Number L5–L11: ID 37–39)",
        ),
        (
            "letter",
            range(1, 12),
            slow,
            None,
            "above",
            "spec §A12 A-4 (a flat curve gives 32.5, so ID ≥ 30 must be separated from it); Table 1 (Letter L1–L11: ID 32–42)",
        ),
        ("letter", range(0, 1), low, high, "below", "spec §A12 A-4; Table 1 (Letter L0: ID 18)"),
    )


def _bounds_text(low: int | None, high: int | None) -> str:
    if low is None:
        return f"ID ≤ {high}"
    return f"ID ≥ {low}" if high is None else f"{low} ≤ ID ≤ {high}"


def _null_text(side: str) -> str:
    quantile = 1 - NULL_LEVEL if side == "above" else NULL_LEVEL
    return f"ID* {'>' if side == 'above' else '<'} the flat-curve null's {100 * quantile:g} % quantile"


def side_of_null(star: float, low: float, high: float) -> str:
    """Where ID* lies against the flat-curve null's one-sided bounds: "above", "below", "within" or "no null"."""
    if np.isnan(low) or np.isnan(high):
        return "no null"
    return "above" if star > high else ("below" if star < low else "within")


def separation_table(use: pd.DataFrame) -> pd.DataFrame:
    """Per run and layer (head 0): ID*, round(ID*), the plane of the largest u, that u (the logit scale), the
    flat-curve null's bounds and the side of them ID* lies on: what claim A-4's verdicts are made of."""
    ids = weighted_ids(use)
    ids = ids[ids["head"] == 0]
    sides = [side_of_null(*values) for values in zip(ids["weighted_id"], ids["null_low"], ids["null_high"])]
    return pd.DataFrame(
        {
            "task": ids["task"],
            "seed": ids["seed"],
            "layer": ids["layer"],
            "ID*": ids["weighted_id"],
            "round(ID*)": ids["id"],
            "peak ID": ids["peak_id"],
            "max u": ids["max_use"],
            f"null {100 * NULL_LEVEL:g} %": ids["null_low"],
            f"null {100 * (1 - NULL_LEVEL):g} %": ids["null_high"],
            "ID* vs flat-curve null": sides,
        }
    ).reset_index(drop=True)


def _a4_verdict(found: pd.DataFrame, low: int | None, high: int | None, side: str) -> tuple[str, bool | None]:
    """(measured, passed) of one seed's layers: each round(ID*) in the band and each ID* on ``side`` of its null.
    Without a null (a table from before it) a layer out of the band still fails; one in it is not tested."""
    if found.empty:
        return "—", None
    inside = found["id"].between(low if low is not None else -np.inf, high if high is not None else np.inf)
    sides = pd.Series(
        [side_of_null(*v) for v in zip(found["weighted_id"], found["null_low"], found["null_high"])], index=found.index
    )
    shown = ", ".join(f"L{layer} {plane}" for layer, plane in zip(found["layer"], found["id"]))
    if (sides == "no null").any():
        return f"{shown}; no flat-curve null in frequency.csv (rerun posym a frequency)", (False if not inside.all() else None)
    apart = sides == side
    lacking = ", ".join(
        f"L{r.layer} (ID* {r.weighted_id:.1f}, null {r.null_low:.1f}–{r.null_high:.1f})" for r in found[~apart].itertuples()
    )
    shown += f"; not separated from a flat curve: {lacking}" if lacking else "; all separated from a flat curve"
    return shown, bool(inside.all() and apart.all())


def _a4_distance(found: pd.DataFrame, task: str) -> tuple[float | None, float | None]:
    """How far a check's layers are from Table 1: our mean ID* over them and the paper's mean ID over the same layers."""
    if found.empty:
        return None, None
    table = paper.TABLE1[(paper.TABLE1["task"] == task) & paper.TABLE1["layer"].isin(found["layer"])]
    return float(found["weighted_id"].mean()), float(table["id"].mean())


def claim_a4(use: pd.DataFrame, seeds: list[int], thresholds: Mapping) -> pd.DataFrame:
    """Claim A-4 per seed and check, plus a "k of n seeds pass" row per check. A check passes when every layer's
    round(ID*) is in the band and its ID* is separated from a flat curve on the side the band lies (see
    :func:`a4_checks`, its bands from ``thresholds``, the study's ``claims.a4``; the per-layer numbers are
    :func:`separation_table`). Layers the models lack are left out of a check; a check with none of its layers, or a
    task not run, is "not tested"."""
    ids = weighted_ids(use)
    ids = ids[ids["head"] == 0]
    rows = []
    for task, layers, low, high, side, source in a4_checks(thresholds):
        named = f"layer {layers.start}" if len(layers) == 1 else f"layers {layers.start}–{layers.stop - 1}"
        check = f"{task} {named}: {_bounds_text(low, high)}, {side} a flat curve"
        expected = f"{_bounds_text(low, high)}; {_null_text(side)}"
        for seed in seeds:
            found = ids[(ids["task"] == task) & (ids["seed"] == seed) & ids["layer"].isin(layers)]
            measured, passed = _a4_verdict(found, low, high, side)
            ours, published = _a4_distance(found, task)
            rows.append(claims.row("A-4", check, measured, expected, passed, source=source, task=task, seed=seed, ours=ours, paper=published))
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
