"""The Toeplitz view of attention logits (spec §B1), checked on a model's first layer.

Each input is content plus position, x_i = c_i + p_i (token embedding plus the additive encoding; p = 0 without
one). A LayerNorm divides each token by its own σ_i after centring (C = I − 11ᵀ/d), so it stays linear in the two
parts: LN(x_i) = γ ⊙ C c_i / σ_i + γ ⊙ C p_i / σ_i + β. Queries and keys therefore split as q_i = q^c_i + q^p_i
and k_j = k^c_j + k^p_j (constant terms go with the content; keys read x itself under the authors' kv_source).

* Additive schemes (NoPE, sinusoidal, learned, T5, ALiBi): L = s·(G_{qc,kc} + G_{qc,kp} + G_{qp,kc} + G_{qp,kp}) + B,
  G_{a,b}[i, j] = a_i·b_j and B the scheme's bias (Toeplitz: B_ij = b(i − j)).
* Rotary schemes (RoPE + sinusoid, partial RoPE): pairing dimensions (2t, 2t+1) into complex numbers q̃, k̃,
  L = s·Re Σ_t (G_t ∘ E_t), G_t = the same four Gram terms of q̃_t, k̃_t (conjugate-linear in k), and the Toeplitz
  kernel (E_t)[i, j] = e^{i(i−j)θ_t}; heads a scheme does not rotate have E = 1.

:func:`check` rebuilds layer 0's logits this way from the model's weights, in float64, and compares them with the
logits the model's own forward pass computes (the hook point ``blocks.0.attn.hook_attn_scores``) on a float64 copy of
the model: each within tolerance × max(1, |logit|). Both sides in float64, so the check tests the algebra and not
float32 rounding: a float32 logit near 0 that comes out of large queries and keys carries an error of their size
(1.3e-5 on a 6-layer RoPE model whose logits reach 117), which no tolerance relative to the logit itself bounds.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from posym.nn import positions as position_schemes

TERMS = ("content-content", "content-position", "position-content", "position-position")


def _layer_norm_parts(x_parts: tuple[torch.Tensor, torch.Tensor], weight, bias, eps) -> tuple[torch.Tensor, torch.Tensor]:
    """LN(c + p) as (γ⊙Cc/σ + β, γ⊙Cp/σ), σ computed on c + p per token (one member: weight, bias (d,))."""
    c, p = x_parts
    x = c + p
    sigma = torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + eps)
    centre = lambda t: t - t.mean(dim=-1, keepdim=True)  # noqa: E731
    return weight * centre(c) / sigma + bias, weight * centre(p) / sigma


def _project(parts, weight, bias, n_head):
    """(content, position) → their projections by (weight, bias), split into heads (B, H, T, dh); the bias goes with the content."""
    content, position = parts
    heads = lambda t: t.view(*t.shape[:-1], n_head, -1).transpose(-2, -3)  # noqa: E731
    return heads(F.linear(content, weight, bias)), heads(F.linear(position, weight))


def _rotated_planes(scheme, n_head: int, head_dim: int) -> list[int]:
    """How many leading dimension pairs of each head the scheme rotates."""
    if not scheme.rotary:
        return [0] * n_head
    planes = scheme.rotary_dim // 2
    if isinstance(scheme, position_schemes.PartialRope):
        return [planes if h < scheme.heads else 0 for h in range(n_head)]
    return [planes] * n_head


@torch.no_grad()
def decompose(model, ids: torch.Tensor) -> dict:
    """Layer 0's logits rebuilt from the decomposition, for a single-member model and ids (B, T): the terms
    (each (B, H, T, T), scaled, before any rotation kernel is applied to them), the bias, the kernel check and
    the rebuilt logits."""
    config = model.config
    if config.attention != "standard":
        raise ValueError("the Toeplitz decomposition is defined for the standard attention, not MLA")
    block = model.blocks[0]
    T = ids.shape[-1]
    positions = torch.arange(T)
    wide = lambda t: t.detach().to(torch.float64)  # noqa: E731  (the reference is computed in float64)
    content = F.embedding(ids, wide(model.wte[0]))
    absolute = model.position.embedding(positions)
    position = torch.zeros_like(content) if absolute is None else wide(absolute.reshape(-1, T, config.d_model)[0]).expand_as(content)
    eps = config.layer_norm_epsilon
    query_in = _layer_norm_parts((content, position), wide(block.ln1_weight[0]), wide(block.ln1_bias[0]), eps)
    key_in = (content, position) if config.kv_source == "embeddings" else query_in
    qc, qp = _project(query_in, wide(block.q_weight[0]), wide(block.q_bias[0]), config.n_head)
    kc, kp = _project(key_in, wide(block.k_weight[0]), wide(block.k_bias[0]), config.n_head)

    scheme = block.position
    planes = _rotated_planes(scheme, config.n_head, config.head_dim)
    scale = config.scale
    terms, kernel_error = {}, 0.0
    rebuilt = torch.zeros(ids.shape[0], config.n_head, T, T, dtype=torch.float64)
    for name, (a, b) in zip(TERMS, ((qc, kc), (qc, kp), (qp, kc), (qp, kp))):
        term = torch.zeros_like(rebuilt)
        modulated = torch.zeros_like(rebuilt)
        for h, rotated in enumerate(planes):
            qa, kb = a[:, h], b[:, h]  # (B, T, dh)
            width = 2 * rotated
            if rotated:
                qz = torch.view_as_complex(qa[..., :width].reshape(*qa.shape[:-1], rotated, 2).contiguous())
                kz = torch.view_as_complex(kb[..., :width].reshape(*kb.shape[:-1], rotated, 2).contiguous())
                gram = torch.einsum("bit,bjt->bijt", qz, kz.conj())  # G_t[i, j] per plane t
                theta = scheme.frequencies[:rotated].to(torch.float64)
                offset = (positions[:, None] - positions[None, :]).to(torch.float64)
                kernel = torch.polar(torch.ones_like(offset[..., None].expand(T, T, rotated)), offset[..., None] * theta)
                kernel_error = max(kernel_error, float((kernel[1:, 1:] - kernel[:-1, :-1]).abs().max()))
                modulated[:, h] += (gram * kernel).real.sum(-1)
                term[:, h] += gram.real.sum(-1)
            rest_q, rest_k = qa[..., width:], kb[..., width:]
            plain = rest_q @ rest_k.transpose(-1, -2)
            modulated[:, h] += plain
            term[:, h] += plain
        terms[name] = scale * term
        rebuilt += scale * modulated
    bias = scheme.score_bias(positions, positions)
    if bias is not None:
        bias = wide(bias.reshape(-1, config.n_head, T, T)[0])
        rebuilt = rebuilt + bias
    return {"terms": terms, "bias": bias, "rebuilt": rebuilt, "kernel_error": kernel_error, "rotary": any(planes)}


@torch.no_grad()
def model_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Layer 0's attention logits as the model computes them, (B, H, T, T)."""
    cache = model.run_with_cache(ids, ["blocks.0.attn.hook_attn_scores"])
    return cache["blocks.0.attn.hook_attn_scores"][0]


def check(model, ids: np.ndarray | torch.Tensor, tolerance: float) -> pd.DataFrame:
    """One row: which form applies, the largest difference between rebuilt and computed logits (the model's
    forward in float64), the largest logit, whether the kernel is Toeplitz, the RMS of each term and of the bias,
    and the verdict."""
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    if model.config.attention != "standard":
        return pd.DataFrame([{"form": "not applicable (MLA: latent attention)", "verdict": "not applicable"}])
    model = copy.deepcopy(model).to(torch.float64)  # the position schemes' own tables (ALiBi's slopes) too
    parts = decompose(model, ids)
    computed = model_logits(model, ids)
    difference = (parts["rebuilt"] - computed).abs()
    error = float(difference.max())
    # Logits reach 100 and more (ALiBi's, NoPE's on Task 2): a logit passes within tolerance × max(1, |logit|).
    scaled = float((difference / computed.abs().clamp_min(1.0)).max())
    row = {
        "form": "multiplicative: Re Σ_t G_t ∘ E_t" + (" + B" if parts["bias"] is not None else "")
        if parts["rotary"]
        else "additive: ΣG" + (" + B" if parts["bias"] is not None else ""),
        "samples": int(ids.shape[0]),
        "max_abs_error": error,
        "max_scaled_error": scaled,
        "max_abs_logit": float(computed.abs().max()),
        "kernel_toeplitz_error": parts["kernel_error"],
        **{f"rms {name}": float(t.pow(2).mean().sqrt()) for name, t in parts["terms"].items()},
        "rms bias": float(parts["bias"].pow(2).mean().sqrt()) if parts["bias"] is not None else 0.0,
        "tolerance": tolerance,
        "verdict": "pass" if scaled <= tolerance else "fail",
    }
    return pd.DataFrame([row])
