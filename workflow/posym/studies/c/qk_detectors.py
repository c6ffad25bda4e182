"""Paper C's head detectors and causal ablations (arXiv 2607.06621, spec §C3, §C4) on any TransformerLens
``HookedTransformer`` (posym's own checkpoints through :mod:`posym.lm.lens`, real language models through
:func:`posym.lm.lens.pretrained_lens_model`).

* **Head scores** (:func:`head_scores`): on [BOS, r, r] with r ~ U(vocab)^L (L = 64, 200 sequences, a torch
  generator seeded 0), the mean attention of the queries p of the second copy (p = L+1 … 2L) on key p−1 (``prev``),
  p−L (``dup``: the same token earlier) and p−L+1 (``ind``: the token after it). The same pass gives the
  *induction CE*: the NLL at positions L+1 … 2L−1 of the next token (known from the first copy).
* **Copying** (:func:`copying_scores`): the share of eigenvalues of W_O W_U W_E W_V (d_head × d_head, the nonzero
  spectrum of the V × V OV circuit) with a positive real part; a GQA head h reads KV head h // rep.
* **K-composition** (:func:`k_composition`): ‖M_{l2,h2} OV_{l1,h1}ᵀ‖_F / (‖M‖_F ‖OV‖_F) of every earlier head,
  M = C W_Q W_Kᵀ C, OV = W_V W_O, through d_head × d_head Gram matrices (no d × d product).
* **Ablations** (:func:`ablation_hooks`), all at ``blocks.l.attn.hook_attn_scores`` through hook points:
  ``"sym"`` subtracts n_iᵀ M_A n_j / attn_scale (M_A = (M − Mᵀ)/2: the head keeps M_S), ``"anti"`` subtracts
  n_iᵀ M_S n_j / attn_scale (keeps M_A), ``"rope"`` subtracts Σ_t n_iᵀ Im(M_t) n_j sin((j − i)θ_t) / attn_scale,
  which leaves the cos-only, even relative-position kernel. n is ``blocks.l.ln1.hook_normalized``, the
  normalised residual the folded W_Q and W_K see (load with ``fold_ln=True``); biases are untouched. The angles
  are the model's own rotary tables (``attn.rotary_cos`` / ``rotary_sin``, so any base, per-layer base or
  scaling is the model's), read at the pairing ``cfg.rotary_adjacent_pairs`` says: rotate-half (t, t + r/2) for
  TransformerLens's Llama-style models, interleaved (2t, 2t+1) for GPT-J.
* **QK norm** (Gemma-3): the queries and keys are RMS-normalised per head after W_Q / W_K, so the score is not the
  bilinear form nᵀMn. For such a model the operands of the ablations are the normalised q and k themselves
  (``hook_q`` / ``hook_k`` passed through the layer's own ``q_norm`` / ``k_norm``: exactly the vectors RoPE
  rotates), and :func:`head_weights` returns W_Q diag(g_q), W_K diag(g_k) (g: the norms' gains), whose bilinear
  form is the score up to a positive factor per query-key pair: the static metrics describe that direction, not
  the score's scale.

Everything that reads weights works in float64; forward passes run in the model's dtype.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from posym.studies.c import qk_fingerprint as qk

log = logging.getLogger("posym.c.detectors")

#: The ablation modes (spec §C4): "sym" kills M_A, "anti" kills M_S, "rope" kills Σ_t Im(M_t).
ABLATIONS = ("sym", "anti", "rope")
SEQUENCES, LENGTH, SEED = 200, 64, 0


# ------------------------------------------------------------------------------------------------ geometry


@dataclass(frozen=True)
class Geometry:
    """What the detectors need to know of a model's attention: heads, GQA, RoPE pairing and the norm."""

    n_layers: int
    n_heads: int
    rep: int  # query heads per KV head
    d_model: int
    d_head: int
    rotary: bool
    rotary_dim: int
    pairing: str  # "rotate_half" or "interleaved"
    bases: tuple[float, ...]  # RoPE base per layer
    qk_norm: bool
    layer_norm: bool  # LN (centred) rather than RMSNorm

    @classmethod
    def of(cls, model) -> "Geometry":
        cfg = model.cfg
        rotary = cfg.positional_embedding_type == "rotary"
        kv = cfg.n_key_value_heads or cfg.n_heads
        bases = tuple(float(block.attn._rotary_base()) if rotary else float("nan") for block in model.blocks)
        return cls(
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            rep=cfg.n_heads // kv,
            d_model=cfg.d_model,
            d_head=cfg.d_head,
            rotary=rotary,
            rotary_dim=int(cfg.rotary_dim or 0) if rotary else 0,
            pairing="interleaved" if cfg.rotary_adjacent_pairs else "rotate_half",
            bases=bases,
            qk_norm=bool(cfg.use_qk_norm),
            layer_norm=cfg.normalization_type in ("LN", "LNPre"),
        )


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


def head_weights(model, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """(W_Q, W_K) of a head, d_model × d_head in float64, the KV head h // rep for a GQA model; for a QK-norm model
    with the norms' gains folded in (module docstring)."""
    attn = model.blocks[layer].attn
    W_Q, W_K = _numpy(attn.W_Q[head]), _numpy(attn.W_K[head])  # attn.W_K repeats the KV heads
    if Geometry.of(model).qk_norm:
        W_Q, W_K = W_Q * _numpy(attn.q_norm.w)[None], W_K * _numpy(attn.k_norm.w)[None]
    return W_Q, W_K


def static_table(model, draws: int = 300, null_base: int = 0) -> pd.DataFrame:
    """Every head's static metrics (:func:`posym.studies.c.qk_fingerprint.with_null`, R = ``draws``, seed null_base + 1000·l
    + h), self_match over the embedding, and the RoPE features at the layer's base (rotary models)."""
    geo = Geometry.of(model)
    centre = qk.centring(geo.d_model) if geo.layer_norm else None
    embedding = qk.EmbeddingMoments.of(model.W_E.detach().cpu().numpy())
    rows = []
    for layer in range(geo.n_layers):
        for head in range(geo.n_heads):
            W_Q, W_K = head_weights(model, layer, head)
            row = {"layer": layer, "head": head, **qk.with_null(W_Q, W_K, qk.null_seed(layer, head, null_base), draws, centre)}
            row["self_match"] = qk.self_match(qk.LowRank.of(W_Q, W_K, centre), embedding)
            if geo.rotary:
                row |= qk.rope_features(W_Q, W_K, geo.rotary_dim, geo.pairing, geo.bases[layer])
            rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------- sequences


def repeated_tokens(d_vocab: int, bos: int, sequences: int = SEQUENCES, length: int = LENGTH, seed: int = SEED) -> torch.Tensor:
    """[BOS, r, r] with r ~ U(d_vocab)^length drawn by a torch generator seeded ``seed`` (sequences × 2·length+1)."""
    generator = torch.Generator().manual_seed(seed)
    r = torch.randint(0, d_vocab, (sequences, length), generator=generator)
    return torch.cat([torch.full((sequences, 1), bos, dtype=torch.long), r, r], dim=1)


def bos_token(model) -> int:
    """The tokenizer's BOS id, else its EOS id, else 0."""
    tokenizer = getattr(model, "tokenizer", None)
    for name in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None) if tokenizer is not None else None
        if value is not None:
            return int(value)
    return 0


def _batches(tokens: torch.Tensor, batch_size: int) -> Iterable[torch.Tensor]:
    for start in range(0, len(tokens), batch_size):
        yield tokens[start : start + batch_size]


def _next_token_nll(model, residual: torch.Tensor, tokens: torch.Tensor, length: int) -> torch.Tensor:
    """Summed NLL at positions length+1 … 2·length−1 of the next token, from the final residual (only those
    positions are unembedded: the vocabulary is the largest matrix)."""
    positions = slice(length + 1, 2 * length)
    logits = model.unembed(model.ln_final(residual[:, positions])).float()
    targets = tokens[:, length + 2 : 2 * length + 1].to(logits.device)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")


def head_scores(model, tokens: torch.Tensor, length: int = LENGTH, batch_size: int = 20) -> tuple[pd.DataFrame, float]:
    """(prev, dup and ind of every head on ``tokens`` (from :func:`repeated_tokens`), the induction CE in nats)."""
    geo = Geometry.of(model)
    queries = torch.arange(length + 1, 2 * length + 1)
    sums = {name: torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64) for name in ("prev", "dup", "ind")}
    offsets = {"prev": 1, "dup": length, "ind": length - 1}

    def collect(pattern, hook):
        layer = hook.layer()
        for name, offset in offsets.items():
            sums[name][layer] += pattern[:, :, queries, queries - offset].to(torch.float64).sum((0, 2)).cpu()

    nll, count = 0.0, 0
    with torch.no_grad():
        for batch in _batches(tokens, batch_size):
            batch = batch.to(model.cfg.device)
            residual = model.run_with_hooks(
                batch, stop_at_layer=geo.n_layers, fwd_hooks=[(lambda name: name.endswith("attn.hook_pattern"), collect)]
            )
            nll += float(_next_token_nll(model, residual, batch, length))
            count += len(batch) * (length - 1)
    n = len(tokens) * length
    rows = [
        {"layer": l, "head": h, **{name: float(sums[name][l, h] / n) for name in sums}}
        for l in range(geo.n_layers) for h in range(geo.n_heads)
    ]  # fmt: skip
    return pd.DataFrame(rows), nll / count


# ------------------------------------------------------------------------------------------------- OV / K


def copying_scores(model) -> pd.DataFrame:
    """Every head's share of eigenvalues of W_O W_U W_E W_V with Re λ > 0 (float64)."""
    geo = Geometry.of(model)
    gram = _numpy(model.W_U) @ _numpy(model.W_E)  # W_U W_E: d_model × d_model (W_U is d_model × V)
    rows = []
    for layer in range(geo.n_layers):
        attn = model.blocks[layer].attn
        W_O, W_V = attn.W_O, attn.W_V  # W_V repeats the KV heads
        for head in range(geo.n_heads):
            core = _numpy(W_O[head]) @ gram @ _numpy(W_V[head])
            eigenvalues = np.linalg.eigvals(core)
            rows.append({"layer": layer, "head": head, "copying": float((eigenvalues.real > 0).mean())})
    return pd.DataFrame(rows)


def _gram_factors(model, layer: int, head: int, centre: bool) -> dict[str, np.ndarray]:
    W_Q, W_K = head_weights(model, layer, head)
    attn = model.blocks[layer].attn
    W_V, W_O = _numpy(attn.W_V[head]), _numpy(attn.W_O[head])
    if centre:  # C W (C: the centring I − 11ᵀ/d) and W_O C
        W_Q, W_K, W_V = (w - w.mean(0, keepdims=True) for w in (W_Q, W_K, W_V))
        W_O = W_O - W_O.mean(1, keepdims=True)
    return {"W_Q": W_Q, "W_K": W_K, "W_V": W_V, "W_O": W_O}


def k_composition(model, layer: int, head: int) -> pd.DataFrame:
    """K-composition of every head of layers < ``layer`` into head (layer, head), with its rank (1 = strongest).

    ‖M OVᵀ‖_F² = tr(Xᵀ (W_QᵀW_Q) X (W_VᵀW_V)) with X = W_Kᵀ W_Oᵀ, since M OVᵀ = W_Q W_Kᵀ W_Oᵀ W_Vᵀ."""
    geo = Geometry.of(model)
    target = _gram_factors(model, layer, head, geo.layer_norm)
    qq, kk = target["W_Q"].T @ target["W_Q"], target["W_K"].T @ target["W_K"]
    m_norm = math.sqrt(max(float(np.sum(qq * kk)), 0.0))
    rows = []
    for source_layer in range(layer):
        for source_head in range(geo.n_heads):
            source = _gram_factors(model, source_layer, source_head, geo.layer_norm)
            vv, oo = source["W_V"].T @ source["W_V"], source["W_O"] @ source["W_O"].T
            X = target["W_K"].T @ source["W_O"].T
            product = float(np.sum((X.T @ qq @ X) * vv))
            ov_norm = math.sqrt(max(float(np.sum(vv * oo)), 0.0))
            rows.append({"layer": source_layer, "head": source_head, "k_composition": math.sqrt(max(product, 0.0)) / (m_norm * ov_norm)})
    table = pd.DataFrame(rows, columns=["layer", "head", "k_composition"])
    table["rank"] = table["k_composition"].rank(ascending=False, method="min").astype(int)
    return table


# ------------------------------------------------------------------------------------------------ ablations


def _pair_tables(model, layer: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos(p·θ_t) and sin(p·θ_t) (positions × r/2) from the layer's own rotary tables."""
    geo = Geometry.of(model)
    attn = model.blocks[layer].attn
    first, _ = qk.pair_dims(geo.rotary_dim, geo.pairing)
    if positions > attn.rotary_cos.shape[0]:
        raise ValueError(f"{positions} positions exceed the rotary table's {attn.rotary_cos.shape[0]}")
    return attn.rotary_cos[:positions, first], attn.rotary_sin[:positions, first]


def score_delta(q: torch.Tensor, k: torch.Tensor, mode: str, attn_scale: float, tables=None, rotary_dim=0, pairing="rotate_half") -> torch.Tensor:
    """The term an ablation subtracts from one head's scores (batch × query × key): q, k (batch × pos × d_head) are
    n W_Q and n W_K before RoPE (for a QK-norm model, the normalised ones)."""
    if mode in ("sym", "anti"):
        forward = q @ k.transpose(-1, -2)  # n_iᵀ M n_j
        backward = forward.transpose(-1, -2)  # n_iᵀ Mᵀ n_j = n_jᵀ M n_i
        return (forward - backward if mode == "sym" else forward + backward) / (2 * attn_scale)
    if mode != "rope":
        raise ValueError(f"mode={mode!r}: expected one of {ABLATIONS}")
    first, second = (torch.as_tensor(d) for d in qk.pair_dims(rotary_dim, pairing))
    cos, sin = tables
    qa, qb, ka, kb = q[..., first], q[..., second], k[..., first], k[..., second]
    # Σ_t Im(q_t conj k_t) sin(φ_j − φ_i), Im(q_t conj k_t) = qb ka − qa kb, sin(φ_j − φ_i) = s_j c_i − c_j s_i
    left = torch.cat([qb * cos, -qb * sin, -qa * cos, qa * sin], dim=-1)
    right = torch.cat([ka * sin, ka * cos, kb * sin, kb * cos], dim=-1)
    return left @ right.transpose(-1, -2) / attn_scale


def ablation_hooks(model, layer: int, heads: int | Sequence[int], mode: str) -> list[tuple[str, Callable]]:
    """Forward hooks that ablate ``mode`` on head(s) ``heads`` of ``layer`` (run_with_hooks / hooks(...))."""
    geo = Geometry.of(model)
    heads = [heads] if isinstance(heads, int) else list(heads)
    attn = model.blocks[layer].attn
    if mode == "rope" and not geo.rotary:
        raise ValueError("the Im(M_t) ablation needs a rotary model")
    stored: dict[str, torch.Tensor] = {}
    prefix = f"blocks.{layer}"

    def keep(name):
        def hook(value, hook):
            stored[name] = value
        return hook

    def ablate(scores, hook):
        # The term is computed in float32 whatever the model's dtype (a bfloat16 model's norms hand on float32).
        if geo.qk_norm:  # the normalised queries and keys RoPE rotates
            q = attn._apply_qk_norm(stored["q"], attn.q_norm).float()
            k = attn._apply_qk_norm(stored["k"], attn.k_norm).float()
        else:
            n = stored["n"].float()
            q = torch.einsum("bpd,hde->bphe", n, attn.W_Q[heads].float())  # no bias: biases are untouched
            k = torch.einsum("bpd,hde->bphe", n, attn.W_K[heads].float())
        positions = scores.shape[-1]
        tables = tuple(t.float() for t in _pair_tables(model, layer, positions)) if mode == "rope" else None
        mask = torch.ones(positions, positions, dtype=torch.bool, device=scores.device).tril()
        scores = scores.clone()
        for index, head in enumerate(heads):
            if geo.qk_norm:
                qh, kh = q[:, :, head], k[:, :, head // geo.rep]
            else:
                qh, kh = q[:, :, index], k[:, :, index]
            delta = score_delta(qh, kh, mode, float(attn.attn_scale), tables, geo.rotary_dim, geo.pairing)
            scores[:, head] = torch.where(mask, scores[:, head] - delta.to(scores.dtype), scores[:, head])
        return scores

    if geo.qk_norm:
        hooks = [(f"{prefix}.attn.hook_q", keep("q")), (f"{prefix}.attn.hook_k", keep("k"))]
    else:
        hooks = [(f"{prefix}.ln1.hook_normalized", keep("n"))]
    return [*hooks, (f"{prefix}.attn.hook_attn_scores", ablate)]


def ablated_induction(
    model, tokens: torch.Tensor, modes: Sequence[str], length: int = LENGTH, batch_size: int = 20,
    heads: Iterable[tuple[int, int]] | None = None,
) -> tuple[pd.DataFrame, float]:
    """Induction CE with each head ablated in each mode, one head at a time: (table layer, head, ce_<mode>,
    dInd_<mode> = ablated − clean, the clean CE). Each ablated pass starts at the head's layer from the clean
    residual stream there (the layers below it are unchanged)."""  # fmt: skip
    geo = Geometry.of(model)
    heads = list(heads) if heads is not None else [(l, h) for l in range(geo.n_layers) for h in range(geo.n_heads)]
    batches = list(_batches(tokens.to(model.cfg.device), batch_size))
    cached: list[dict[int, torch.Tensor]] = []
    clean_nll, count = 0.0, len(tokens) * (length - 1)
    names = {f"blocks.{l}.hook_resid_pre" for l in {layer for layer, _ in heads}}
    with torch.no_grad():
        for batch in batches:
            residual, cache = model.run_with_cache(batch, stop_at_layer=geo.n_layers, names_filter=lambda name: name in names)
            clean_nll += float(_next_token_nll(model, residual, batch, length))
            cached.append({int(name.split(".")[1]): cache[name] for name in names})
        clean = clean_nll / count
        rows = []
        for layer, head in heads:
            row = {"layer": layer, "head": head}
            for mode in modes:
                hooks = ablation_hooks(model, layer, head, mode)
                nll = 0.0
                for batch, residuals in zip(batches, cached):
                    with model.hooks(fwd_hooks=hooks):
                        residual = model(residuals[layer], start_at_layer=layer, stop_at_layer=geo.n_layers)
                    nll += float(_next_token_nll(model, residual, batch, length))
                row[f"ce_{mode}"] = nll / count
                row[f"dInd_{mode}"] = nll / count - clean
            rows.append(row)
            log.debug("head %d.%d: %s", layer, head, row)
    return pd.DataFrame(rows), clean
