"""Positional and symbolic scores, attention entropy and head purity over training (spec §A6).

Paper A calls a head *positional* when its logits depend on key positions only and *symbolic*
when they depend on key contents only. The authors measure this by swapping two keys: for each
checkpoint, layer ℓ and sample x (17 tokens, the query last), with h the residual input to
block ℓ (``hidden_states[ℓ]``, the embeddings for ℓ = 0) and D its last-query attention row,

* every transposition π = (i, j), 0 ≤ i < j < 16, exchanges rows i and j of h while position
  ids stay 0..16 (120 swaps; the query never moves), and D^π is the block's new attention row;
* v = (D_i, D_j) and v^π = (D^π_i, D^π_j) give s_pos(π) = cos(v^π, v) (the weights stayed with
  the positions) and s_sym(π) = cos(v^π, (D_j, D_i)) (they followed the contents);
* α = softmax_π(|D_i − D_j| / τ), τ = 1e-4, weighs the swaps that can tell the two apart, and
  s_POS(x) = Σ α s_pos, s_SYM(x) = Σ α s_sym, averaged over the first 100 test samples.

Uniform attention scores 1 on both (the exclusion principle: only uniform heads are both).

**Why 120 swaps cost one forward pass here.** LayerNorm acts row by row, so swapping rows i and j
of h only swaps the rows of LN(h) and of the pre-rotation keys k_b, and leaves the last query
q (rotated at the query position) unchanged. With G[a, b] = q · R_a k_b / √d_head (+ the
slot's score bias), the logit of "content b at slot a", the unpermuted logits are G[a, a] and the
swap (i, j) changes only slots i and j, to G[i, j] and G[j, i]. Since R_a is a rotation,
q · R_a k_b = R_{−a} q · k_b: one 17 × 17 matrix per sample and head gives all 120 swaps.
:func:`literal_swapped_attention` runs the authors' procedure (permute h, rerun the block) for
the tests and the benchmark, which check the two agree.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from posym.data import datasets, tasks
from posym.training.checkpoints import final_entry, load_index, load_model
from posym.data.files import IntegrityError
from posym.nn.gptj import PosymModel
from posym.nn.positions import PositionScheme

log = logging.getLogger("posym.a.scores")

#: ``F.cosine_similarity``'s default, which the authors' metrics.py uses: each vector's norm is
#: clamped to at least this, so a swap of two keys that both get (nearly) no attention has cosine
#: ≈ 0 rather than NaN. Such swaps also get weight α ≈ 0 unless no swap moves any attention.
COSINE_EPS = 1e-8
#: Tolerance (relative and absolute) of the check that the shortcut's unpermuted logits are the
#: model's own; float32 rounding stays near 1e-6, a wrong position map is off by order one.
SELF_CHECK_TOLERANCE = 1e-4

#: ``final``: the row is of the checkpoint the run's analyses read (checkpoints.json's ``final``): "at convergence".
SCORE_COLUMNS = ["step", "final", "layer", "head", "positional", "symbolic", "entropy", "entropy_norm"]
PURITY_COLUMNS = ["step", "final", "gamma", "kind", "count", "heads"]


# --------------------------------------------------------------------------------------- the metric


def key_swaps(n_keys: int) -> torch.Tensor:
    """All transpositions (i, j), i < j < n_keys, in the authors' order ((0,1), (0,2), …): (n_swaps, 2)."""
    return torch.combinations(torch.arange(n_keys), r=2)


def swap_logits(
    q: torch.Tensor, k: torch.Tensor, scheme: PositionScheme, swaps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The last query's pre-softmax logits, unpermuted and under every key swap, from one pass.

    ``q`` and ``k`` are one layer's queries and keys after the position map (hooks
    ``attn.hook_rot_q`` / ``attn.hook_rot_k``), shape (B, H, T, d_head). Returns the unpermuted logits
    (B, H, T) and the logits after each swap (B, H, n_swaps, T); see the module docstring. Assumes
    the position scheme rotates by orthogonal maps with R_p⁻¹ = R_{−p} (RoPE) or not at all
    (NoPE, ALiBi); :func:`checkpoint_scores` checks the unpermuted logits against the model's.
    """
    n_positions, d_head = q.shape[-2:]
    positions = torch.arange(n_positions, device=q.device)
    content_keys = scheme.rotate(k, -positions)  # undo each key's own rotation: k_b before RoPE
    slot_queries = scheme.rotate(q[..., -1:, :].expand_as(q), -positions)  # R_{−a} q for every slot a
    logits = torch.matmul(slot_queries, content_keys.transpose(-1, -2)) / d_head**0.5  # G[a, b]
    bias = scheme.score_bias(positions[-1:], positions)  # (H, 1, T): depends on the slot only
    if bias is not None:
        logits = logits + bias[..., 0, :, None]

    unpermuted = logits.diagonal(dim1=-2, dim2=-1)
    swap = torch.arange(len(swaps), device=q.device)
    i, j = swaps[:, 0].to(q.device), swaps[:, 1].to(q.device)
    permuted = unpermuted[..., None, :].repeat_interleave(len(swaps), dim=-2)
    permuted[..., swap, i] = logits[..., i, j]  # slot i now holds content j
    permuted[..., swap, j] = logits[..., j, i]
    return unpermuted, permuted


@torch.no_grad()
def literal_swapped_attention(
    model: PosymModel, layer: int, resid: torch.Tensor, swaps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The authors' procedure, for reference: permute the block input and rerun the block per swap.

    ``resid`` is the residual input to block ``layer`` of a single-member model, (1, B, T, D).
    Returns the attention rows (B, H, T) and (B, H, n_swaps, T): the softmax of
    :func:`swap_logits`, computed about a hundred times more slowly.
    """
    n_positions = resid.shape[2]
    orders = torch.arange(n_positions).repeat(len(swaps) + 1, 1)  # row 0: unpermuted
    rows = torch.arange(1, len(swaps) + 1)
    orders[rows, swaps[:, 0]], orders[rows, swaps[:, 1]] = swaps[:, 1], swaps[:, 0]
    permuted = resid[0][:, orders]  # (B, 1 + n_swaps, T, D)
    batch = permuted.shape[0]
    pattern = model.attention_pattern(layer, permuted.flatten(0, 1)[None])[0]  # (B·(1+P), H, T, T)
    last_row = pattern[..., -1, :].unflatten(0, (batch, len(swaps) + 1)).transpose(1, 2)  # (B, H, 1+P, T)
    return last_row[:, :, 0], last_row[:, :, 1:]


def swap_scores(
    unpermuted: torch.Tensor, permuted: torch.Tensor, swaps: torch.Tensor, tau: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample s_POS and s_SYM (spec §A6 steps 5–7) from the attention rows D (B, H, T) and D^π (B, H, n_swaps, T).

    α is a softmax over swaps of |D_i − D_j| / τ; with τ = 1e-4 the argument reaches 1e4, and
    ``torch.softmax`` subtracts the maximum before exponentiating, so it stays finite.
    Returns two tensors of shape (B, H).
    """
    i, j = swaps[:, 0], swaps[:, 1]
    swap = torch.arange(len(swaps))
    before = torch.stack([unpermuted[..., i], unpermuted[..., j]], dim=-1)  # v = (D_i, D_j)
    after = torch.stack([permuted[..., swap, i], permuted[..., swap, j]], dim=-1)  # v^π
    positional = F.cosine_similarity(after, before, dim=-1, eps=COSINE_EPS)
    symbolic = F.cosine_similarity(after, before.flip(-1), dim=-1, eps=COSINE_EPS)
    weights = torch.softmax((before[..., 0] - before[..., 1]).abs() / tau, dim=-1)
    return (weights * positional).sum(-1), (weights * symbolic).sum(-1)


def attention_entropy(row: torch.Tensor) -> torch.Tensor:
    """H = −Σ_j D_j log D_j of attention rows (…, T), with 0 log 0 = 0 (spec §A6, paper App. E)."""
    return -torch.special.xlogy(row, row).sum(-1)


@torch.no_grad()
def checkpoint_scores(model: PosymModel, ids: torch.Tensor, tau: float) -> pd.DataFrame:
    """Sample means of s_POS, s_SYM and the last query's attention entropy for every head of a model.

    ``ids`` are the samples, (B, T), the query last; keys 0..T−2 are swapped. One row per
    (layer, head): layer, head, positional, symbolic, entropy.
    """
    if model.members != 1:
        raise ValueError(f"scores need a single-member model, got {model.members} members")
    model.eval()
    n_layer = model.config.n_layer
    hooks = ("hook_rot_q", "hook_rot_k", "hook_attn_scores")
    cache = model.run_with_cache(ids, [f"blocks.{layer}.attn.{name}" for layer in range(n_layer) for name in hooks])
    swaps = key_swaps(ids.shape[-1] - 1)
    rows = []
    for layer in range(n_layer):
        q, k, model_logits = (cache[f"blocks.{layer}.attn.{name}"][0] for name in hooks)
        unpermuted_logits, permuted_logits = swap_logits(q, k, model.position, swaps)
        _check_against_model(unpermuted_logits, model_logits[..., -1, :], layer)
        unpermuted, permuted = torch.softmax(unpermuted_logits, dim=-1), torch.softmax(permuted_logits, dim=-1)
        positional, symbolic = swap_scores(unpermuted, permuted, swaps, tau)
        entropy = attention_entropy(unpermuted)
        for head in range(model.config.n_head):
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "positional": positional[:, head].mean().item(),
                    "symbolic": symbolic[:, head].mean().item(),
                    "entropy": entropy[:, head].mean().item(),
                }
            )
    return pd.DataFrame(rows)


def _check_against_model(shortcut: torch.Tensor, model_logits: torch.Tensor, layer: int) -> None:
    """Refuse to score if the shortcut's unpermuted logits are not the model's own (e.g. a new position scheme)."""
    if not torch.allclose(shortcut, model_logits, rtol=SELF_CHECK_TOLERANCE, atol=SELF_CHECK_TOLERANCE):
        error = (shortcut - model_logits).abs().max().item()
        raise RuntimeError(
            f"layer {layer}: the swap shortcut's logits differ from the model's by up to {error:.2e}; "
            "does the position scheme rotate queries and keys orthogonally?"
        )


def normalise_entropy(scores: pd.DataFrame) -> pd.DataFrame:
    """Add ``entropy_norm``: entropy min–max scaled per layer and head across checkpoints (paper App. E).

    A head whose entropy never changes (e.g. a run with a single checkpoint) has no scale: NaN.
    """
    by_head = scores.groupby(["layer", "head"])["entropy"]
    low, high = by_head.transform("min"), by_head.transform("max")
    span = (high - low).where(high > low)
    return scores.assign(entropy_norm=(scores["entropy"] - low) / span)


# ------------------------------------------------------------------------------------------ purity


def classify(positional, symbolic, gamma: float) -> np.ndarray:
    """'positional', 'symbolic' or 'mixed' per head (spec §A6, PROPOSED).

    Pure positional ⇔ s_POS ≥ 1 − γ and s_SYM ≤ γ; pure symbolic ⇔ s_SYM ≥ 1 − γ and s_POS ≤ γ.
    """
    positional, symbolic = np.asarray(positional), np.asarray(symbolic)
    kind = np.full(positional.shape, "mixed", dtype=object)
    kind[(positional >= 1 - gamma) & (symbolic <= gamma)] = "positional"
    kind[(symbolic >= 1 - gamma) & (positional <= gamma)] = "symbolic"
    return kind


def head_label(layer: int, head: int, n_head: int) -> str:
    """How a head is named in the purity table: its layer id, plus the head for multi-head models."""
    return str(layer) if n_head == 1 else f"{layer}.{head}"


def purity_counts(scores: pd.DataFrame, gammas: Sequence[float]) -> pd.DataFrame:
    """Pure positional and pure symbolic heads per checkpoint and γ: count and which heads (Fig 2C, Fig 7).

    Columns step, gamma, kind ('positional' or 'symbolic'), count, heads (space-separated layer ids,
    ascending; ``layer.head`` for multi-head models).
    """
    n_head = scores["head"].nunique()
    rows = []
    for gamma in gammas:
        kinds = classify(scores["positional"], scores["symbolic"], gamma)
        for (step, final), at_step in scores.assign(kind=kinds).groupby(["step", "final"]):
            for kind in ("positional", "symbolic"):
                pure = at_step[at_step["kind"] == kind].sort_values(["layer", "head"])
                labels = [head_label(layer, head, n_head) for layer, head in zip(pure["layer"], pure["head"])]
                rows.append({"step": step, "final": final, "gamma": gamma, "kind": kind, "count": len(pure), "heads": " ".join(labels)})
    return pd.DataFrame(rows, columns=PURITY_COLUMNS)


# ------------------------------------------------------------------------------------- per-run job


def score_run(index_path: Path, data_path: Path, samples: int, tau: float) -> pd.DataFrame:
    """Scores and entropy of every head at every checkpoint of one training run (Fig 2B, Fig 6).

    ``index_path`` is the run's checkpoints.json (each checkpoint is verified against it),
    ``data_path`` its test split, of which the first ``samples`` are scored. Columns as
    :data:`SCORE_COLUMNS`.
    """
    index_path = Path(index_path)
    index = load_index(index_path)
    data = datasets.load_split(data_path)
    if len(data) < samples:
        raise ValueError(f"{data_path} has {len(data)} samples, fewer than the {samples} to score")
    ids = torch.as_tensor(data.tokens[:samples], dtype=torch.long)
    expected_vocab = list(tasks.get(data.task).vocabulary.tokens)
    final_step = final_entry(index)["step"]
    frames = []
    for entry in index["checkpoints"]:
        model, vocab = load_model(index_path.parent / entry["path"])
        if vocab != expected_vocab:
            raise IntegrityError(
                index_path.parent / entry["path"], f"the model's vocabulary is not the {data.task} task's"
            )
        frames.append(checkpoint_scores(model, ids, tau).assign(step=entry["step"], final=entry["step"] == final_step))
        log.info("step %d scored", entry["step"])
    return normalise_entropy(pd.concat(frames, ignore_index=True))[SCORE_COLUMNS]
