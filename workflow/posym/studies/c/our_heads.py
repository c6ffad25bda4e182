"""Posym's own question (no paper asks it): the QK fingerprint of paper A's trained heads beside their scores.

Paper A sorts its heads into *positional* (logits that depend on key positions only) and *symbolic* (on key
contents only) by swapping keys (spec §A6, ``posym.studies.a.head_scores``); paper C fingerprints a head by the
static bilinear form M = W_Q W_Kᵀ (spec §C1, §C2, §C4, ``posym.studies.c.qk_fingerprint``). Do paper A's positional heads
carry a directional fingerprint (high dir_frac and D_head, a large RoPE phase rope_imag_frac at high frequency)
and its symbolic heads not? :func:`fingerprint_run` measures every head of one run (task × seed) at every
checkpoint; the notebook ``our_heads`` draws them over training and judges, at convergence, posym's prediction
"positional heads have a higher rope_imag_frac than symbolic heads" (:func:`verdicts`), which can fail.

**LayerNorm folded in.** Paper A's block reads LN(x) = γ ⊙ n + β with n = (x − mean x)/σ, so with HF's (out, in)
weights and TransformerLens's W_Q = q_weightᵀ (d × d_head) the score of key j for query i is
(γ⊙n_i + β)ᵀ W_Q R W_Kᵀ (γ⊙n_j + β)/√d_head, R the relative rotation (RoPE). The model has no q/k bias
(``posym.nn.gptj``: GPT-J's q/k/v/out carry none), so the part that reads the residual stream on both sides is
n_iᵀ M_eff n_j with

    M_eff = C diag(γ) W_Q W_Kᵀ diag(γ) C,   C = I − 11ᵀ/d  (n is centred: C n = n),

which is TransformerLens's ``fold_ln`` + ``center_writing_weights`` convention (spec §C1). The terms with β are
ignored as ``fold_ln`` ignores them: it turns β into a q/k bias (β W_Q, β W_K), and the fingerprint reads
weights, not biases. :func:`fold_check` checks the convention on the model itself where RoPE cancels (query =
key position): the model's own score (hook ``blocks.l.attn.hook_attn_scores``) equals n M_eff n/√d_head plus
those β terms, and the job records how large a share of the score the β terms are (``ln_bias_share``).

**Head as wide as the model.** Paper A's single head of d_head = d = 128 makes M_eff 128 × 128 of rank 127
(C removes one direction); ``qk_fingerprint`` solves such a head on M itself, and its null draws orthonormal
frames of the centred subspace (d − 1 = 127 dimensions: orthogonal matrices there). With rank 127 out of 127
dimensions the null leaves the orientation, not the subspace, random. RoPE is GPT-J's *interleaved* pairing on
the checkpoint's ``rotary_dim`` (the whole head unless set), base ``rope_base`` (rotate-half for a model trained
with ``model.position: rope_rotate_half``). ``rope_imag_frac`` gets a
placebo beside it (spec §C4, placebo ii): the same head with its rotary columns permuted alike in W_Q and W_K,
which leaves M unchanged and scrambles which dims rotate together. A model without RoPE (``model.position``
nope, alibi) is fingerprinted with the pairing as a placebo over the whole head (spec §C4, placebo i; column
``rotary`` false).

**Paper B's deposit head** (studies [b, c]): :func:`fingerprint_b_run` fingerprints every head of a paper-B run's
analysed checkpoint (standard attention; MLA has no per-head W_Q W_Kᵀ of its own) beside its ablation drop (spec
§B4), the deposit head being claim B-3's as paper B's ablation table marks it (the layer-0 head whose ablation
costs the most, ≥ 40 points). Paper B's queries read LN₁(residual) and its keys the raw input embeddings
(``kv_source: embeddings``), so only the query side is folded and centred (:func:`b_folded_weights`) and the null
runs in all d dimensions.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from posym.pipeline import claims
from posym.studies.c import qk_fingerprint as qk

log = logging.getLogger("posym.c.our_heads")

PAIRING = "interleaved"  # GPT-J's rotate_every_two (posym.nn.positions.Rope), paper B's too
#: Position schemes that pair dims otherwise (posym.nn.positions.RopeRotateHalf: TransformerLens's pairing).
PAIRINGS = {"rope_rotate_half": "rotate_half"}
#: The spectral metrics of the table, with their null's mean and z-score.
METRICS = ("dir_frac", "D_head")
ROPE = ("rope_imag_frac", "freq_centroid", "hi_freq_dir")
COLUMNS = [
    "task", "seed", "step", "final", "layer", "head", "positional", "symbolic", "kind",
    "rank", "dir_frac", "dir_frac_null_mean", "dir_frac_z", "D_head", "D_head_null_mean", "D_head_z",
    "henrici", "content_pos_frac", "rope_imag_frac", "freq_centroid", "hi_freq_dir",
    "rope_imag_frac_placebo", "hi_freq_dir_placebo", "rotary", "rotary_dim", "fold_error", "ln_bias_share",
]  # fmt: skip
KINDS = ("positional", "symbolic", "mixed")
KIND_PALETTE = {"positional": "#c0392b", "symbolic": "#27ae60", "mixed": "#7f8c8d"}
QUESTION = "posym's question (no paper's claim)"
#: The significance the verdicts ask of "positional > symbolic".
ALPHA = 0.05


# --------------------------------------------------------------------------------------- the folding


def folded_weights(q_weight: np.ndarray, k_weight: np.ndarray, ln_weight: np.ndarray, n_head: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each head's C diag(γ) W_Q and C diag(γ) W_K (d × d_head, float64, TransformerLens's layout) from a block's
    HF (out, in) q/k weights (d × d) and its LayerNorm gain γ (d); head h owns output rows [h·d_head, (h+1)·d_head)."""
    q, k = np.asarray(q_weight, np.float64), np.asarray(k_weight, np.float64)
    gain = np.asarray(ln_weight, np.float64)[:, None]
    d = q.shape[1]
    centre, width = qk.centring(d), q.shape[0] // n_head
    rows = [slice(h * width, (h + 1) * width) for h in range(n_head)]
    return [(centre @ (gain * q[r].T), centre @ (gain * k[r].T)) for r in rows]


def block_weights(model, layer: int) -> dict[str, np.ndarray]:
    """A single-member posym model's q, k weights and LayerNorm gain and bias of block ``layer``, as float64 numpy."""
    block = model.blocks[layer]
    names = {"q": block.q_weight, "k": block.k_weight, "gain": block.ln_weight, "bias": block.ln_bias}
    return {name: value[0].detach().cpu().double().numpy() for name, value in names.items()}


def fold_check(model, ids) -> tuple[float, float]:
    """The folding against the model's own attention where RoPE cancels (query = key position), over every layer,
    head and position of the samples ``ids`` (B, T).

    Returns (error, bias share): the largest |model score − (n M_eff n + β terms)/√d_head| relative to the largest
    |score|, and the RMS of the β terms relative to the RMS of the score (what folding the gain alone leaves out).
    """
    import torch
    import torch.nn.functional as F

    c = model.config
    names = [f"blocks.{l}.{name}" for l in range(c.n_layer) for name in ("hook_resid_pre", "attn.hook_attn_scores")]
    cache = model.run_with_cache(torch.as_tensor(ids, dtype=torch.long), names)
    errors, shares = [], []
    for layer in range(c.n_layer):
        resid = cache[f"blocks.{layer}.hook_resid_pre"][0]
        n = F.layer_norm(resid, (resid.shape[-1],), eps=c.layer_norm_epsilon).double().numpy()  # (B, T, d)
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0].double().numpy()
        diagonal = np.diagonal(scores, axis1=-2, axis2=-1)  # (B, H, T)
        weights = block_weights(model, layer)
        for head, (W_Q, W_K) in enumerate(folded_weights(weights["q"], weights["k"], weights["gain"], c.n_head)):
            folded = np.einsum("btd,dk,btk->bt", n, W_Q, n @ W_K)
            bias_terms = _bias_terms(n, weights, head, c.n_head)
            scale = W_Q.shape[1] ** -0.5
            model_score = diagonal[:, head]
            errors.append(np.abs(model_score - scale * (folded + bias_terms)).max() / np.abs(model_score).max())
            shares.append(np.sqrt(np.mean(bias_terms**2) / np.mean((folded + bias_terms) ** 2)))
    return float(max(errors)), float(max(shares))


def _bias_terms(n: np.ndarray, weights: Mapping[str, np.ndarray], head: int, n_head: int) -> np.ndarray:
    """βᵀ W_Q W_Kᵀ (γ⊙n) + (γ⊙n)ᵀ W_Q W_Kᵀ β + βᵀ W_Q W_Kᵀ β at every position (the score's terms with the LN bias)."""
    width = weights["q"].shape[0] // n_head
    rows = slice(head * width, (head + 1) * width)
    W_Q, W_K = weights["q"][rows].T, weights["k"][rows].T
    beta, scaled = weights["bias"], n * weights["gain"]
    q_beta, k_beta = beta @ W_Q, beta @ W_K
    return scaled @ W_K @ q_beta + scaled @ W_Q @ k_beta + q_beta @ k_beta


# ------------------------------------------------------------------------------------- the fingerprint


def head_rows(
    weights: Mapping[str, np.ndarray], n_head: int, layer: int, rotary_dim: int, base: float, settings: Mapping, pairing: str = PAIRING
) -> list[dict]:
    """The fingerprint of every head of one block (:func:`block_weights`): the static metrics with their null
    (``null_draws`` draws, seed null_seed(layer, head, ``seed``)), the RoPE features and their placebo."""
    rows = []
    d = weights["q"].shape[1]
    centre = qk.centring(d)
    for head, (W_Q, W_K) in enumerate(folded_weights(weights["q"], weights["k"], weights["gain"], n_head)):
        row = qk.with_null(W_Q, W_K, qk.null_seed(layer, head, settings["seed"]), settings["null_draws"], centre)
        rope = qk.rope_features(W_Q, W_K, rotary_dim, pairing, base)
        placebo = _permuted_rope(W_Q, W_K, rotary_dim, base, settings["placebo_permutations"], qk.null_seed(layer, head, settings["seed"]), pairing)
        rows.append({"layer": layer, "head": head, **row, **rope, **placebo})
    return rows


def _permuted_rope(
    W_Q: np.ndarray, W_K: np.ndarray, rotary_dim: int, base: float, permutations: int, seed: int, pairing: str = PAIRING
) -> dict[str, float]:
    """Mean rope_imag_frac and hi_freq_dir with the rotary columns permuted alike in W_Q and W_K (M unchanged)."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(permutations):
        order = np.concatenate([rng.permutation(rotary_dim), np.arange(rotary_dim, W_Q.shape[1])])
        values.append(qk.rope_features(W_Q[:, order], W_K[:, order], rotary_dim, pairing, base))
    if not values:
        return {"rope_imag_frac_placebo": float("nan"), "hi_freq_dir_placebo": float("nan")}
    return {f"{name}_placebo": float(np.mean([v[name] for v in values])) for name in ("rope_imag_frac", "hi_freq_dir")}


def rotary_settings(config) -> tuple[bool, int, float, str]:
    """(whether the model rotates, the rotary dims, the base, the pairing) of a posym ModelConfig; a model without
    RoPE gets the whole head as its placebo pairing (interleaved)."""
    from posym.nn import positions

    rotary = positions.get(config.position).rotary
    dims = config.rotary_dim if rotary and config.rotary_dim is not None else config.head_dim
    return rotary, dims - dims % 2, float(config.rope_base), PAIRINGS.get(config.position, PAIRING)


def head_classes(purity: pd.DataFrame, gamma: float) -> pd.DataFrame:
    """Each head's class per checkpoint step from paper A's purity table (``posym a scores``: the pure positional
    and pure symbolic heads per step and γ, labelled ``layer`` or ``layer.head``): step, layer, head, kind, where a
    head in neither list is "mixed" (left to the caller's merge). Paper A's classification is read from its
    output, not recomputed, so both studies name the same heads; ``gamma`` must be one of a.scores.gammas."""
    at_gamma = purity[np.isclose(purity["gamma"].astype(float), gamma)]
    if at_gamma.empty:
        raise ValueError(f"γ = {gamma:g} is not among paper A's purity thresholds {sorted(purity['gamma'].unique())} (a.scores.gammas)")
    rows = []
    for _, r in at_gamma.iterrows():
        for label in str(r["heads"]).split():
            layer, _, head = label.partition(".")
            rows.append({"step": int(r["step"]), "layer": int(layer), "head": int(head or 0), "kind": r["kind"]})
    return pd.DataFrame(rows, columns=["step", "layer", "head", "kind"])


def fingerprint_run(
    index_path: Path, scores_path: Path, purity_path: Path, data_path: Path, settings: Mapping, task: str, seed: int
) -> pd.DataFrame:
    """The table of one paper-A run: every head at every checkpoint of its checkpoints.json (each verified), its
    fingerprint (:func:`head_rows`) beside its positional and symbolic score (paper A's scores.csv of the run) and
    its class at γ = ``gamma`` (paper A's purity.csv: :func:`head_classes`). The folding is checked on the first
    ``check_samples`` test samples at every checkpoint (:func:`fold_check`); a larger error than
    ``check_tolerance`` stops the job. Columns :data:`COLUMNS`."""
    from posym.data import datasets
    from posym.training.checkpoints import load_index, load_model

    index_path = Path(index_path)
    index = load_index(index_path)
    scores = pd.read_csv(scores_path)
    ids = datasets.load_split(data_path).tokens[: settings["check_samples"]]
    frames = []
    for entry in index["checkpoints"]:
        model, _ = load_model(index_path.parent / entry["path"])
        c = model.config
        rotary, rotary_dim, base, pairing = rotary_settings(c)
        error, share = fold_check(model, ids)
        if error > settings["check_tolerance"]:
            raise RuntimeError(f"step {entry['step']}: the folded M_eff misses the model's scores by {error:.2e} (relative)")
        rows = [r for layer in range(c.n_layer) for r in head_rows(block_weights(model, layer), c.n_head, layer, rotary_dim, base, settings, pairing)]
        frames.append(pd.DataFrame(rows).assign(step=entry["step"], rotary=rotary, rotary_dim=rotary_dim, fold_error=error, ln_bias_share=share))
        log.info("step %d: %d heads, fold error %.1e, LN-bias share %.3f", entry["step"], len(rows), error, share)
    table = pd.concat(frames, ignore_index=True)
    merged = table.merge(scores[["step", "final", "layer", "head", "positional", "symbolic"]], on=["step", "layer", "head"], how="left")
    if merged["positional"].isna().any():
        missing = sorted(merged.loc[merged["positional"].isna(), "step"].unique())
        raise ValueError(f"{scores_path} has no scores for steps {missing}")
    purity = pd.read_csv(purity_path, dtype={"heads": str}, keep_default_na=False)
    merged = merged.merge(head_classes(purity, settings["gamma"]), on=["step", "layer", "head"], how="left")
    merged["kind"] = merged["kind"].fillna("mixed")
    return merged.assign(task=task, seed=seed)[COLUMNS]


# ------------------------------------------------------------------------------------- notebook tables


def final_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Each run's analysed checkpoint (paper A's ``final``: the last or the best on validation)."""
    return frame[frame["final"].astype(bool)]


def _tasks(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["task"]))


def _task_groups(final: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(task, its rows) for each task, and ("both", every row) where there are several."""
    groups = [(task, final[final["task"] == task]) for task in _tasks(final)]
    return groups + [("both", final)] if len(groups) > 1 else groups


def convergence_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task (and both together) and head class at convergence: how many heads (seeds × layers × heads) and
    the medians of the fingerprint, beside the medians of the null and of the placebo."""
    final = final_rows(frame)
    groups = _task_groups(final)
    rows = []
    for task, part in groups:
        for kind in KINDS:
            heads = part[part["kind"] == kind]
            if heads.empty:
                continue
            median = heads.median(numeric_only=True)
            rows.append(
                {
                    "task": task,
                    "class": kind,
                    "heads": len(heads),
                    "layers": " ".join(f"L{layer}" for layer in sorted(heads["layer"].unique())),
                    "dir_frac": median["dir_frac"],
                    "dir_frac null": median["dir_frac_null_mean"],
                    "dir_frac z": median["dir_frac_z"],
                    "D_head": median["D_head"],
                    "D_head null": median["D_head_null_mean"],
                    "D_head z": median["D_head_z"],
                    "rope_imag_frac": median["rope_imag_frac"],
                    "rope_imag_frac placebo": median["rope_imag_frac_placebo"],
                    "hi_freq_dir": median["hi_freq_dir"],
                    "hi_freq_dir placebo": median["hi_freq_dir_placebo"],
                    "freq_centroid": median["freq_centroid"],
                }
            )
    return pd.DataFrame(rows)


#: The comparisons of the verdict table: the metric and whether it is the stated prediction (the others are
#: the rest of the question, reported the same way).
PREDICTIONS = (
    ("rope_imag_frac", "the prediction"),
    ("hi_freq_dir", "the question: RoPE phase at high frequency"),
    ("dir_frac", "the question: directional"),
    ("D_head", "the question: directional"),
)


def verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    """posym's prediction at convergence, "positional heads have a higher rope_imag_frac than symbolic heads", and
    the same comparison of hi_freq_dir, dir_frac and D_head: per task where both classes have heads, and over
    both tasks. Pass when the positional heads lie above the symbolic heads by a one-sided Mann-Whitney test at
    :data:`ALPHA` (a higher median alone is not enough: a handful of heads per class); the measured cell gives both
    medians, the counts and p. Not tested where a class has no head (Letter, where
    paper A finds no positional head). Rows in :mod:`posym.pipeline.claims`'s format (claim "our heads")."""
    from scipy.stats import mannwhitneyu

    final = final_rows(frame)
    groups = _task_groups(final)
    rows = []
    for metric, role in PREDICTIONS:
        for task, part in groups:
            positional = part.loc[part["kind"] == "positional", metric].dropna()
            symbolic = part.loc[part["kind"] == "symbolic", metric].dropna()
            check = f"{role}: {metric} of positional heads > of symbolic heads"
            if positional.empty or symbolic.empty:
                measured, passed = f"{len(positional)} positional, {len(symbolic)} symbolic heads", None
            else:
                p = mannwhitneyu(positional, symbolic, alternative="greater").pvalue
                measured = f"{positional.median():.3f} (n {len(positional)}) vs {symbolic.median():.3f} (n {len(symbolic)}); Mann-Whitney p {p:.3g}"
                passed = bool(p < ALPHA)
            expected = f"positional > symbolic (one-sided Mann-Whitney p < {ALPHA:g})"
            rows.append(claims.row("our heads", check, measured, expected, passed, source=QUESTION, task=task, seed="all", evidence="trained"))
    return pd.DataFrame(rows, columns=claims.COLUMNS)


def over_training_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Median dir_frac, D_head, rope_imag_frac and hi_freq_dir per task, step and head class at convergence."""
    labelled = with_final_kind(frame)
    table = labelled.groupby(["task", "final_kind", "step"], sort=False)[["dir_frac", "D_head", "rope_imag_frac", "hi_freq_dir"]].median()
    table["heads"] = labelled.groupby(["task", "final_kind", "step"], sort=False).size()
    return table.reset_index().rename(columns={"final_kind": "class at convergence"})


def with_final_kind(frame: pd.DataFrame) -> pd.DataFrame:
    """``final_kind``: each head's (task, seed, layer, head) class at its run's analysed checkpoint."""
    final = final_rows(frame)[["task", "seed", "layer", "head", "kind"]].rename(columns={"kind": "final_kind"})
    return frame.merge(final, on=["task", "seed", "layer", "head"], how="left")


def plot_over_training(frame: pd.DataFrame, metrics: Sequence[str] = ("dir_frac", "D_head", "rope_imag_frac")):
    """Each metric against training step (rows) per task (columns): one line per head of every seed, coloured by
    its class at convergence; the null's mean (dir_frac, D_head) and the placebo (rope_imag_frac) dashed, as
    medians over heads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labelled = with_final_kind(frame)
    tasks = _tasks(labelled)
    fig, axes = plt.subplots(len(metrics), len(tasks), figsize=(5.2 * len(tasks), 2.4 * len(metrics) + 0.6), squeeze=False, sharex="col")
    reference = {"dir_frac": "dir_frac_null_mean", "D_head": "D_head_null_mean", "rope_imag_frac": "rope_imag_frac_placebo", "hi_freq_dir": "hi_freq_dir_placebo"}
    for col, task in enumerate(tasks):
        part = labelled[labelled["task"] == task]
        for row, metric in enumerate(metrics):
            ax = axes[row][col]
            for (seed, layer, head), line in part.groupby(["seed", "layer", "head"]):
                kind = line["final_kind"].iloc[0]
                ax.plot(line["step"], line[metric], color=KIND_PALETTE[kind], lw=0.9, alpha=0.75)
            if metric in reference:
                null = part.groupby("step")[reference[metric]].median()
                label = "null mean" if metric in METRICS else "placebo (permuted pairs)"
                ax.plot(null.index, null.values, color="black", ls="--", lw=1.0, label=label)
                ax.legend(fontsize=6, loc="best")
            ax.set_title(f"{task.capitalize()} task: {metric}", fontsize=9)
            ax.set_xlabel("training step")
    handles = [plt.Line2D([], [], color=colour, label=f"{kind} at convergence") for kind, colour in KIND_PALETTE.items()]
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


# ----------------------------------------------------------------------------------- paper B's deposit head

B_COLUMNS = [
    "variant", "task", "seed", "step", "layer", "head", "drop", "role", "rank", "dir_frac", "dir_frac_null_mean",
    "dir_frac_z", "D_head", "D_head_null_mean", "D_head_z", "rope_imag_frac", "freq_centroid", "hi_freq_dir",
    "rope_imag_frac_placebo", "hi_freq_dir_placebo", "rotary", "key_side",
]  # fmt: skip


def b_folded_weights(model, layer: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each head's folded W_Q, W_K (d × d_head) of a paper-B encoder layer (standard attention). Queries read
    LN₁(residual), so the query side is C diag(γ₁) W_Q; keys read the input embeddings (``kv_source: embeddings``,
    paper B's quirk: no LayerNorm there), so W_K stays as it is, or LN₁(residual) like the queries for
    ``kv_source: residual``. The q/k biases (paper B's linears have them) are ignored, as for the LN bias."""
    block, c = model.blocks[layer], model.config
    q, k = (w[0].detach().cpu().double().numpy() for w in (block.q_weight, block.k_weight))
    gain = block.ln1_weight[0].detach().cpu().double().numpy()
    centre, width = qk.centring(c.d_model), c.head_dim
    heads = []
    for h in range(c.n_head):
        rows = slice(h * width, (h + 1) * width)
        W_Q = centre @ (gain[:, None] * q[rows].T)
        W_K = k[rows].T if c.kv_source == "embeddings" else centre @ (gain[:, None] * k[rows].T)
        heads.append((W_Q, W_K))
    return heads


def b_rotated(config, head: int) -> bool:
    """Whether a paper-B head rotates: every head for RoPE (``rope_sinusoid``, ``rope``), the first rope_heads for
    partial RoPE, none otherwise."""
    from posym.nn import positions

    if config.position == "partial_rope":
        return head < positions.PartialRope.rotated_heads(config.rope_heads, config.n_head)
    return positions.get(config.position).rotary


def deposit_roles(ablation: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Paper B's ablation table's layer, head, drop and role: "deposit" for claim B-3's deposit head as paper B's
    ablation job marks it (``posym.studies.b.deposit.with_roles``), "other" for every other head."""
    if "role" not in ablation.columns:
        raise ValueError(f"{path}: no role column (an ablation table from before paper B marked its deposit head); rerun its ablation job")
    return ablation[["layer", "head", "drop", "role"]]


def fingerprint_b_run(index_path: Path, ablation_path: Path, settings: Mapping, variant: str, task: str, seed: int) -> pd.DataFrame:
    """Every head of a paper-B run's analysed checkpoint: its fingerprint (interleaved RoPE pairs of the head, a
    placebo pairing on a head that does not rotate), its ablation drop and role (:func:`deposit_roles`)."""
    from posym.training.checkpoints import load_final_model

    model, _, entry = load_final_model(index_path)
    c = model.config
    if c.attention != "standard":
        raise ValueError(f"{index_path}: attention {c.attention!r} has no per-head W_Q W_Kᵀ of its own (MLA); only standard attention is fingerprinted")
    rows = []
    for layer in range(c.n_layer):
        for head, (W_Q, W_K) in enumerate(b_folded_weights(model, layer)):
            seed_ = qk.null_seed(layer, head, settings["seed"])
            row = qk.with_null(W_Q, W_K, seed_, settings["null_draws"])
            pairing = PAIRINGS.get(c.position, PAIRING)
            rope = qk.rope_features(W_Q, W_K, c.head_dim, pairing, c.rope_base)
            placebo = _permuted_rope(W_Q, W_K, c.head_dim, c.rope_base, settings["placebo_permutations"], seed_, pairing)
            rows.append({"layer": layer, "head": head, **row, **rope, **placebo, "rotary": b_rotated(c, head)})
    table = pd.DataFrame(rows).merge(deposit_roles(pd.read_csv(ablation_path), ablation_path), on=["layer", "head"], how="left")
    key_side = "embeddings (raw)" if c.kv_source == "embeddings" else "residual (LN-folded)"
    return table.assign(variant=variant, task=task, seed=seed, step=entry["step"], key_side=key_side)[B_COLUMNS]


def deposit_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per paper-B run: the deposit head (if any) beside the median of the run's other heads, and of its other
    layer-0 heads, on the fingerprint and the ablation drop."""
    metrics = ["drop", "dir_frac", "dir_frac_z", "D_head", "D_head_z", "rope_imag_frac", "rope_imag_frac_placebo", "hi_freq_dir"]
    rows = []
    for (variant, task, seed), run in frame.groupby(["variant", "task", "seed"], sort=False):
        deposit = run[run["role"] == "deposit"]
        groups = {
            "deposit head": deposit,
            "other layer-0 heads": run[(run["role"] != "deposit") & (run["layer"] == 0)],
            "every other head": run[run["role"] != "deposit"],
        }
        for name, heads in groups.items():
            label = f"L{int(deposit.iloc[0]['layer'])} H{int(deposit.iloc[0]['head'])}" if name == "deposit head" and len(deposit) else ""
            if heads.empty:
                rows.append({"variant": variant, "task": task, "seed": seed, "heads": name, "count": 0, "which": "none (paper B's ablation marks no deposit head)" if name == "deposit head" else ""})
                continue
            values = heads[metrics].median()
            rows.append({"variant": variant, "task": task, "seed": seed, "heads": name, "count": len(heads), "which": label, **values.to_dict()})
    return pd.DataFrame(rows)


def rank_sum_p(ranks: Sequence[int], sizes: Sequence[int]) -> float:
    """The exact one-sided p of a stratified rank test: the chance that the ranks' sum is at most the observed one
    when each run's head ranks uniformly among its run's ``sizes`` heads (rank 1 the highest), independently."""
    distribution = np.ones(1)  # of the sum of (rank - 1)
    for size in sizes:
        distribution = np.convolve(distribution, np.full(size, 1.0 / size))
    return float(distribution[: sum(rank - 1 for rank in ranks) + 1].sum())


def deposit_verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    """posym's question on paper B's heads: is the deposit head (claim B-3's, :func:`deposit_roles`) more
    directional than the other heads of its layer 0, with more of its RoPE phase imaginary and at high
    frequency? Per comparison of :data:`PREDICTIONS`: the deposit head's rank among its run's layer-0 heads, over
    every run that has one (per task, and over both), judged by :func:`rank_sum_p` at :data:`ALPHA`. One run of
    16 heads can reach p = 1/16 at best, so a pass needs the head at the top in several runs. RoPE's metrics
    compare only heads that rotate. Not tested where no run has a deposit head (or none that rotates), or where
    the runs that have one could not reach p < ALPHA even with the head at the top of each."""
    rows = []
    for metric, role in PREDICTIONS:
        rotating = metric in ROPE
        for task, part in _task_groups(frame):
            ranks, sizes, labels = [], [], []
            for (variant, _, seed), run in part.groupby(["variant", "task", "seed"], sort=False):
                layer0 = run[(run["layer"] == 0) & run[metric].notna()]
                if rotating:
                    layer0 = layer0[layer0["rotary"].astype(bool)]
                deposit = layer0[layer0["role"] == "deposit"]
                if deposit.empty:
                    continue
                ranks.append(int((layer0[metric] > deposit[metric].iloc[0]).sum()) + 1)
                sizes.append(len(layer0))
                labels.append(f"{variant} seed {seed}: {ranks[-1]}/{sizes[-1]}")
            check = f"{role}: {metric} of the deposit head > of its layer's other heads"
            best = rank_sum_p([1] * len(sizes), sizes)
            if ranks and best < ALPHA:
                p = rank_sum_p(ranks, sizes)
                measured, passed = f"rank {', '.join(labels)}; rank-sum p {p:.3g}", bool(p < ALPHA)
            elif ranks:
                measured, passed = f"rank {', '.join(labels)}; too few runs: at the top of each, p would be {best:.3g}", None
            else:
                measured, passed = "no run has a deposit head" + (" that rotates" if rotating else ""), None
            expected = f"the top of its layer 0 (stratified rank-sum p < {ALPHA:g})"
            rows.append(claims.row("our heads, paper B", check, measured, expected, passed, source=QUESTION, task=task, seed="all", evidence="trained"))
    return pd.DataFrame(rows, columns=claims.COLUMNS)
