"""Paper C on real pretrained language models (spec §C2-§C4; the substitute for claim C-6, whose GPT-2 and Pythia
weights are not on disk here): every head's static fingerprint with its null, the RoPE features, the head detectors
and the induction CE under the Im(M_t) ablation (and optionally the sym / anti ablations), then the paper's
statistics on them - Table 1's Spearman ρ, Table 2's ρ_dir, ρ_D, partial and top-5 percentile, the Im(M_t)
ablation's head and its prev rank, and the K-composition rank of the prev head for the top induction heads.

The model is a directory converted by :mod:`posym.pretrained` (config ``models:``), loaded into TransformerLens
offline by :func:`posym.lens.pretrained_lens_model`; the detectors are :mod:`posym.qk_detectors`. The statistics
are those of :mod:`.published` (the same estimators run on the authors' cache).
"""

from __future__ import annotations

import logging
import time
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from posym import qk_detectors as detectors

from . import published

log = logging.getLogger("posym.c.real_models")

#: Table 1's metrics and the head scores they are correlated with (Table 1 / Table 2's ρ columns).
METRICS = ("dir_frac", "D_head", "content_pos_frac", "imag_mass")
SCORES = ("prev", "dup", "ind", "copying")


def measure(model, section: Mapping) -> tuple[pd.DataFrame, dict]:
    """The per-head table of a loaded HookedTransformer, and what the run measured besides (clean induction CEs,
    wall times per stage)."""
    import torch

    times, started = {}, time.perf_counter()

    def lap(name):
        nonlocal started
        times[f"seconds_{name}"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()

    table = detectors.static_table(model, section["null_draws"], section["null_seed"])
    lap("static")
    table = table.merge(detectors.copying_scores(model), on=["layer", "head"])
    lap("copying")
    bos = detectors.bos_token(model)
    scores_settings, ablation = section["scores"], section["ablation"]
    tokens = detectors.repeated_tokens(model.cfg.d_vocab, bos, scores_settings["sequences"], scores_settings["length"], scores_settings["seed"])
    scores, clean = detectors.head_scores(model, tokens, scores_settings["length"], section["batch_size"])
    table = table.merge(scores, on=["layer", "head"])
    lap("scores")
    info = {"bos": bos, "induction_ce_scores": clean}
    if ablation["modes"]:
        tokens = detectors.repeated_tokens(model.cfg.d_vocab, bos, ablation["sequences"], scores_settings["length"], scores_settings["seed"])
        chosen = table if ablation["heads"] == "all" else table.nlargest(ablation["heads"], "prev")
        heads = [(int(l), int(h)) for l, h in zip(chosen["layer"], chosen["head"])]
        with torch.no_grad():
            ablated, clean = detectors.ablated_induction(model, tokens, ablation["modes"], scores_settings["length"], section["batch_size"], heads)
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
    """Table 1 on one model: Spearman ρ of each metric with each head score, BH-FDR over the cells."""
    rows = []
    for metric in METRICS:
        for score in SCORES:
            result = stats.spearmanr(heads[metric], heads[score])
            rows.append({"metric": metric, "score": score, "rho": float(result.statistic), "p": float(result.pvalue)})
    table = pd.DataFrame(rows)
    table["q"], table["significant"] = multipletests(table["p"], alpha=0.05, method="fdr_bh")[1], None
    table["significant"] = table["q"] < 0.05
    return table


def summary(name: str, heads: pd.DataFrame, info: Mapping, kcomp: pd.DataFrame, section: Mapping) -> pd.DataFrame:
    """One row: Table 2's columns (ρ_dir, ρ_D, partial with its layer-clustered CI, the top-k percentile) and the
    Im(M_t) ablation's row (head, prev rank, induction CE before → after, share of heads with |ΔInd| < 0.01)."""
    k = section["top_k"]
    median, top = published.top_k_percentile(heads, k)
    low, high = published.layer_bootstrap(heads, section["bootstrap_draws"], section["seed"])
    row = {
        "model": name,
        "heads": len(heads),
        "d_k": int(heads["rank"].max()),
        "rho_dir": float(stats.spearmanr(heads["dir_frac"], heads["prev"]).statistic),
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
    return pd.DataFrame([{**row, **{key: value for key, value in info.items() if key.startswith("seconds_")}}])


def run(model_dir, name: str, section: Mapping, device: str = "cpu") -> dict[str, pd.DataFrame]:
    """Load the converted model ``model_dir`` and measure it: {"heads", "summary", "correlations", "kcomp"}."""
    from posym.lens import pretrained_lens_model

    started = time.perf_counter()
    model, _ = pretrained_lens_model(model_dir, device)
    loaded = round(time.perf_counter() - started, 1)
    log.info("%s: %d layers × %d heads loaded in %.1f s", name, model.cfg.n_layers, model.cfg.n_heads, loaded)
    heads, info = measure(model, section)
    kcomp = k_composition_ranks(model, heads, section["induction_heads"])
    info["seconds_load"] = loaded
    heads.insert(0, "model", name)
    return {"heads": heads, "summary": summary(name, heads, info, kcomp, section), "correlations": correlations(heads), "kcomp": kcomp}


def gather(summaries: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(summaries, ignore_index=True) if summaries else pd.DataFrame()


def null_lines() -> tuple[float, float]:
    """The random-orientation null's values the paper draws (dir_frac 1/√2, D_head 0.608)."""
    return float(1 / np.sqrt(2)), 0.608
