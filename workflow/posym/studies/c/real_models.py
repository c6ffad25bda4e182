"""Paper C on real pretrained language models (spec §C2-§C4; the substitute for claim C-6, whose GPT-2 and Pythia
weights are not on disk here): every head's static fingerprint with its null, the RoPE features, the head detectors
and the induction CE under the Im(M_t) ablation (and optionally the sym / anti ablations), then the paper's
statistics on them - Table 1's Spearman ρ, Table 2's ρ_dir, ρ_D, partial and top-5 percentile, the Im(M_t)
ablation's head and its prev rank, and the K-composition rank of the prev head for the top induction heads.

The model is a directory converted by :mod:`posym.lm.pretrained` (config ``models:``), loaded into TransformerLens
offline by :func:`posym.lm.lens.pretrained_lens_model`; the detectors are :mod:`posym.studies.c.qk_detectors`. The statistics
are those of :mod:`.published` (the same estimators run on the authors' cache).
"""

from __future__ import annotations

import logging
import time
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from posym.pipeline import claims as verdicts
from posym.studies.c import qk_detectors as detectors

from . import paper, published

log = logging.getLogger("posym.c.real_models")

#: Table 1's metrics and the head scores they are correlated with (Table 1 / Table 2's ρ columns).
METRICS = ("dir_frac", "D_head", "content_pos_frac", "imag_mass")
SCORES = ("prev", "dup", "ind", "copying")


def measure(model, section: Mapping) -> tuple[pd.DataFrame, dict]:
    """The per-head table of a loaded HookedTransformer, and what the run measured besides (clean induction CEs,
    wall times per stage). The static metrics read the weights as loaded (in float64); the forward passes of the
    detectors and ablations run on a copy in ``section["dtype"]`` where that is bfloat16."""
    import copy

    import torch

    times, started = {}, time.perf_counter()

    def lap(name):
        nonlocal started
        times[f"seconds_{name}"] = round(time.perf_counter() - started, 1)
        log.info("%s: %.1f s", name, times[f"seconds_{name}"])
        started = time.perf_counter()

    table = detectors.static_table(model, section["null_draws"], section["null_seed"])
    lap("static")
    table = table.merge(detectors.copying_scores(model), on=["layer", "head"])
    lap("copying")
    bos = detectors.bos_token(model)
    if section["dtype"] == "bfloat16":
        model = copy.deepcopy(model).to(torch.bfloat16)
    scores_settings, ablation = section["scores"], section["ablation"]
    tokens = detectors.repeated_tokens(model.cfg.d_vocab, bos, scores_settings["sequences"], scores_settings["length"], scores_settings["seed"])
    scores, clean = detectors.head_scores(model, tokens, scores_settings["length"], section["batch_size"])
    table = table.merge(scores, on=["layer", "head"])
    lap("scores")
    info = {"bos": bos, "induction_ce_scores": clean, "dtype": section["dtype"]}
    modes = [mode for mode in ablation["modes"] if mode != "rope" or detectors.Geometry.of(model).rotary]
    if modes != list(ablation["modes"]):
        log.info("no rotary dims: the Im(M_t) ablation does not apply")
    if modes:
        tokens = detectors.repeated_tokens(model.cfg.d_vocab, bos, ablation["sequences"], scores_settings["length"], scores_settings["seed"])
        chosen = table if ablation["heads"] == "all" else table.nlargest(ablation["heads"], "prev")
        heads = [(int(l), int(h)) for l, h in zip(chosen["layer"], chosen["head"])]
        with torch.no_grad():
            ablated, clean = detectors.ablated_induction(model, tokens, modes, scores_settings["length"], section["batch_size"], heads)
        info["ablated_heads"] = len(heads)
        table = table.merge(ablated, on=["layer", "head"], how="left")
        info["induction_ce"] = clean
        lap("ablation")
    return table, {**info, **times}


def k_composition_ranks(model, heads: pd.DataFrame, induction_heads: int) -> pd.DataFrame:
    """For each of the ``induction_heads`` heads with the highest ind score: the prev head of the layers below it
    (highest prev), its K-composition rank among all earlier heads, and the head that ranks first."""
    rows = []
    for _, target in heads.nlargest(induction_heads, "ind").iterrows():
        layer, head = int(target["layer"]), int(target["head"])
        earlier = heads[heads["layer"] < layer]
        if earlier.empty:
            continue
        prev_head = earlier.loc[earlier["prev"].idxmax()]
        ranks = detectors.k_composition(model, layer, head)
        match = ranks[(ranks["layer"] == prev_head["layer"]) & (ranks["head"] == prev_head["head"])].iloc[0]
        first = ranks.loc[ranks["k_composition"].idxmax()]
        rows.append(
            {
                "induction_head": f"{layer}.{head}",
                "ind": float(target["ind"]),
                "prev_head": f"{int(prev_head['layer'])}.{int(prev_head['head'])}",
                "prev": float(prev_head["prev"]),
                "k_composition": float(match["k_composition"]),
                "rank": int(match["rank"]),
                "earlier_heads": len(ranks),
                "first": f"{int(first['layer'])}.{int(first['head'])}",
            }
        )
    return pd.DataFrame(rows, columns=["induction_head", "ind", "prev_head", "prev", "k_composition", "rank", "earlier_heads", "first"])


def correlations(heads: pd.DataFrame) -> pd.DataFrame:
    """Table 1 on one model (D_head besides the paper's three metrics): Spearman ρ, BH-FDR over the cells."""
    return published.spearman_table(heads, METRICS, SCORES)


def summary(name: str, heads: pd.DataFrame, info: Mapping, kcomp: pd.DataFrame, section: Mapping) -> pd.DataFrame:
    """One row: Table 2's columns (ρ_dir, ρ_D, partial with its layer-clustered CI, the top-k percentile) and the
    Im(M_t) ablation's row (head, prev rank, induction CE before → after, share of heads with |ΔInd| < 0.01)."""
    k = section["top_k"]
    median, top = published.top_k_percentile(heads, k)
    low, high = published.layer_bootstrap(heads, section["bootstrap_draws"], section["seed"])
    rho_dir = stats.spearmanr(heads["dir_frac"], heads["prev"])
    row = {
        "model": name,
        "heads": len(heads),
        "d_k": int(heads["rank"].max()),
        "rho_dir": float(rho_dir.statistic),
        "rho_dir_p": float(rho_dir.pvalue),
        "rho_D": float(stats.spearmanr(heads["D_head"], heads["prev"]).statistic),
        "partial": published.partial(heads, "D_head", "prev")[0],
        "ci_low": low,
        "ci_high": high,
        "top_k": k,
        "top_k_percentile": median,
        "top_k_heads": " ".join(top),
        "median_dir_frac": float(heads["dir_frac"].median()),
        "median_D_head": float(heads["D_head"].median()),
        "induction_ce": info.get("induction_ce", info["induction_ce_scores"]),
    }
    if "rope_imag_frac" in heads:
        row["rope_imag_frac_vs_prev"] = float(stats.spearmanr(heads["rope_imag_frac"], heads["prev"]).statistic)
        row["with_phase"] = published.partial(heads, "D_head", "prev", ("dir_frac", *published.PHASE_CONTROLS))[0]
    if "dInd_rope" in heads:
        top_head = heads["dInd_rope"].idxmax()
        prev_rank = int(stats.rankdata(-heads["prev"].to_numpy(), method="min")[heads.index.get_loc(top_head)])
        row |= {
            "im_head": published.head_names(heads)[top_head],
            "im_prev_rank": prev_rank,
            "im_prev": float(heads.loc[top_head, "prev"]),
            "im_D_head": float(heads.loc[top_head, "D_head"]),
            "im_ce_before": info["induction_ce"],
            "im_ce_after": float(heads.loc[top_head, "ce_rope"]),
            "im_p": prev_rank / len(heads),
            "im_small_share": float((heads["dInd_rope"].dropna().abs() < 0.01).mean()),
            "ablated_heads": int(heads["dInd_rope"].notna().sum()),
        }
    if "dInd_sym" in heads:
        top_head = heads["dInd_sym"].idxmax()
        row |= {"sym_head": published.head_names(heads)[top_head], "sym_ce_after": float(heads.loc[top_head, "ce_sym"])}
    if len(kcomp):
        row["kcomp_ranks"] = " ".join(f"{r.induction_head}:{r.prev_head}={r.rank}/{r.earlier_heads}" for r in kcomp.itertuples())
    kept = ("rotary_dim", "d_head", "pairing", "dtype")
    return pd.DataFrame([{**row, **{key: value for key, value in info.items() if key.startswith("seconds_") or key in kept}}])


def run(model_dir, name: str, section: Mapping, device: str = "cpu") -> dict[str, pd.DataFrame]:
    """Load the converted model ``model_dir`` and measure it: {"heads", "summary", "correlations", "kcomp"}, each
    with a ``model`` column (``name``)."""
    from posym.lm.lens import pretrained_lens_model

    started = time.perf_counter()
    model, _ = pretrained_lens_model(model_dir, device)
    loaded = round(time.perf_counter() - started, 1)
    log.info("%s: %d layers × %d heads loaded in %.1f s", name, model.cfg.n_layers, model.cfg.n_heads, loaded)
    heads, info = measure(model, section)
    kcomp = k_composition_ranks(model, heads, section["induction_heads"])
    info["seconds_load"] = loaded
    heads.insert(0, "model", name)
    geometry = detectors.Geometry.of(model)
    info |= {"rotary_dim": geometry.rotary_dim, "d_head": geometry.d_head, "pairing": geometry.pairing if geometry.rotary else "none"}
    tables = {"heads": heads, "summary": summary(name, heads, info, kcomp, section), "correlations": correlations(heads), "kcomp": kcomp}
    for key in ("correlations", "kcomp"):
        tables[key].insert(0, "model", name)
    return tables


# ---------------------------------------------------------------------------------- beside the paper


def table1(correlations_table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 per model (ρ and its BH significance per metric x score), beside the paper's GPT-2 values (its
    Table 1 has no D_head row)."""
    rows = []
    for _, r in correlations_table.iterrows():
        key = (r["metric"], r["score"])
        rows.append({
            "model": r["model"], "metric": r["metric"], "score": r["score"], "rho": r["rho"], "q": r["q"],
            "significant": bool(r["significant"]), "GPT-2 (paper)": paper.TABLE1.get(key),
            "GPT-2 significant (paper)": (key not in paper.TABLE1_NS) if key in paper.TABLE1 else None,
        })  # fmt: skip
    return pd.DataFrame(rows)


def table2(summaries: pd.DataFrame) -> pd.DataFrame:
    """Table 2's columns for each measured model, then the paper's rows of its RoPE models (other models)."""
    rows = []
    for _, r in summaries.iterrows():
        positions = f"RoPE {r['rotary_dim'] / r['d_head']:.0%}".replace("%", " %") if r["pairing"] != "none" else "none"
        rows.append({
            "model": r["model"], "source": "ours (dequantised 4-bit weights)", "heads": int(r["heads"]), "positions": positions,
            "rho_dir": r["rho_dir"], "rho_D": r["rho_D"], "partial": r["partial"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
            "top_k": int(r["top_k"]), "top_k_percentile": r["top_k_percentile"], "top_heads": r["top_k_heads"],
        })  # fmt: skip
    for key in paper.ROPE_MODELS:
        label, d_k, positions, _ = paper.MODELS[key]
        rho_dir, rho_d, part, (low, high), top = paper.TABLE2[key]
        rows.append({
            "model": label, "source": "paper", "heads": None, "positions": positions, "rho_dir": rho_dir, "rho_D": rho_d,
            "partial": part, "ci_low": low, "ci_high": high, "top_k": 5, "top_k_percentile": top, "top_heads": " ".join(paper.TOP5_HEADS.get(key, [])),
        })  # fmt: skip
    return pd.DataFrame(rows)


def ablation(summaries: pd.DataFrame) -> pd.DataFrame:
    """The Im(M_t) ablation's row per measured model (the head with the largest induction-CE rise, its prev rank,
    CE before -> after, the share of heads with |ΔInd| < 0.01), then the paper's rows."""
    rows = []
    for _, r in summaries.iterrows():
        if pd.isna(r.get("im_head", np.nan)):
            continue
        rows.append({
            "model": r["model"], "source": "ours", "head": r["im_head"], "prev_rank": f"{int(r['im_prev_rank'])}/{int(r['heads'])}",
            "prev": r["im_prev"], "D_head": r["im_D_head"], "ce_before": r["im_ce_before"], "ce_after": r["im_ce_after"],
            "ratio": r["im_ce_after"] / r["im_ce_before"], "small_effect_share": r["im_small_share"], "ablated_heads": int(r["ablated_heads"]),
        })  # fmt: skip
    for key, (head, rank, before, after) in paper.ABLATION.items():
        label, heads = paper.MODELS[key][0], {"llama-3-8b": 1024}.get(key, 384)
        rows.append({
            "model": label, "source": "paper", "head": head, "prev_rank": f"{rank}/{heads}", "prev": None, "D_head": None,
            "ce_before": before, "ce_after": after, "ratio": after / before,
            "small_effect_share": f"{paper.SMALL_EFFECT_SHARE[0]}-{paper.SMALL_EFFECT_SHARE[1]}", "ablated_heads": heads,
        })  # fmt: skip
    return pd.DataFrame(rows)


def plot_plane(heads: pd.DataFrame, top_k: int = 5):
    """Fig 1 for each model of ``heads``: every head in the (dir_frac, D_head) plane, the top-k prev heads marked, the
    null's lines (0.707, 0.608) and, where measured, each head's own null mean."""
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(heads["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.8), squeeze=False)
    dir_null, d_null = NULL_LINES
    for ax, name in zip(axes[0], models):
        part = heads[heads["model"] == name].sort_values("prev")  # the prev heads drawn last, on top
        top = part.nlargest(top_k, "prev")
        points = ax.scatter(part["dir_frac"], part["D_head"], c=part["prev"], cmap="viridis", s=14, vmin=0, vmax=1)
        ax.scatter(top["dir_frac"], top["D_head"], facecolors="none", edgecolors="#c0392b", s=90, lw=1.5, label=f"top-{top_k} prev heads")
        if "dir_frac_null_mean" in part:  # measured here; the authors' cache does not have them
            ax.scatter(part["dir_frac_null_mean"], part["D_head_null_mean"], marker="x", color="grey", s=10, alpha=0.5, label="each head's null mean")
        ax.axvline(dir_null, color="k", ls="--", lw=1)
        ax.axhline(d_null, color="k", ls="--", lw=1, label=f"paper's null ({dir_null:.3f}, {d_null})")
        ax.set(xlabel="dir_frac", ylabel="D_head", title=f"{name}: {len(part)} heads")
        ax.legend(fontsize=8, loc="lower right")
        fig.colorbar(points, ax=ax, label="prev score")
    fig.tight_layout()
    return fig


SOURCE = "spec §C7.6 (substitute models; paper Tables 1-2 and the Im(M_t) ablation)"


def claim_c6(summaries: pd.DataFrame, thresholds: Mapping) -> pd.DataFrame:
    """Claim C-6 on the measured models, marked as substitutes for GPT-2 / Pythia: ρ(dir_frac, prev) shown (an
    observation: the paper finds it positive in absolute-position models too, so it does not test RoPE); the top-k
    prev heads' median D_head percentile high (RoPE models; supporting: a random model passes it half the time); the
    Im(M_t) ablation's largest induction effect on a top prev head, raising the induction CE by a factor, which
    decide; not tested where not measured."""
    rows = []
    for _, r in summaries.iterrows():
        name, rope = r["model"], r["pairing"] != "none"

        def add(check, measured, expected, passed, observation=False, supporting=""):
            rows.append(verdicts.row("C-6", f"{name} (substitute): {check}", measured, expected, passed, source=SOURCE, observation=observation,
                                     supporting=supporting))  # fmt: skip

        # The paper finds ρ_dir > 0 in all seven of its models, the absolute-position ones too: it cannot tell RoPE
        # from absolute positions, so it is shown beside the RoPE checks and judges nothing.
        add("Spearman ρ(dir_frac, prev) (not RoPE-specific: positive in the paper's absolute-position models too)",
            f"{r['rho_dir']:+.3f} (p = {r['rho_dir_p']:.2g}; {'positive' if r['rho_dir'] > 0 else 'not positive'})",
            f"> 0 with p < {thresholds['alpha']:g} (paper: GPT-2 +0.47; +0.08 … +0.57 in all seven models)",
            None, observation=True)  # fmt: skip
        k = int(r["top_k"])
        add(f"top-{k} prev heads' median D_head percentile", f"{r['top_k_percentile']:.2f} ({r['top_k_heads']})",
            f"≥ {thresholds['top_k_percentile']:g} for a RoPE model (paper: RoPE 0.79 … 0.89, the rest 0.14 … 0.26)",
            bool(r["top_k_percentile"] >= thresholds["top_k_percentile"]) if rope else None, supporting=TOP_K_SUPPORTING)  # fmt: skip
        measured = pd.notna(r.get("im_head", np.nan))
        rank, total = (int(r["im_prev_rank"]), int(r["heads"])) if measured else (None, None)
        add("Im(M_t) ablation: prev rank of the head with the largest induction-CE rise",
            f"{r['im_head']}: rank {rank}/{total}" if measured else "not measured (no RoPE, or the rope ablation is off)",
            f"≤ {thresholds['prev_rank']} (paper: 1/384, 1/384, 2/1024)", bool(rank <= thresholds["prev_rank"]) if measured else None)  # fmt: skip
        ratio = r["im_ce_after"] / r["im_ce_before"] if measured else None
        add("Im(M_t) ablation: induction CE after / before on that head",
            f"{ratio:.2f} ({r['im_ce_before']:.3f} → {r['im_ce_after']:.3f})" if measured else "not measured",
            f"≥ {thresholds['ce_ratio']:g} (paper: Pythia-410m head 5.2 0.52 → 2.24)", bool(ratio >= thresholds["ce_ratio"]) if measured else None)  # fmt: skip
    return pd.DataFrame(rows, columns=verdicts.COLUMNS)


#: Why the top-k percentile check supports C-6 and does not decide it: it fails for no model that learned nothing.
TOP_K_SUPPORTING = (
    "a model with random weights has a median percentile of about 0.5, so it passes about half the time (the tests'"
    " random GGUF Llama does); the Im(M_t) ablation decides"
)

#: The random-orientation null's values the paper draws (dir_frac 1/√2, D_head 0.608).
NULL_LINES = (float(1 / np.sqrt(2)), 0.608)
