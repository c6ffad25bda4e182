"""Paper C's toy model (spec §C6 "Constrained training"): TransformerLens's attention-only transformer.

``HookedTransformer`` with ``attn_only=True``, ``normalization_type="LN"``: the residual stream is the token
embedding (plus a learned absolute position embedding, "APE"), each layer adds Attn(LN(x)) with biases on q, k,
v and the output, and a final LayerNorm feeds an unembedding with a bias. Position enters through the core's
schemes (:mod:`posym.nn.positions`): ``learned`` (the APE, TransformerLens's ``W_pos``) or ``rope_rotate_half``
(TransformerLens's rotary embedding, rotate-half pairs (t, t + r/2), base 10000), so the attention itself is the
core's :func:`posym.nn.packing.attention`, hook points and fused kernel included.

Why not the core's GPT-J (:mod:`posym.nn.gptj`)? That model is HF ``GPTJForCausalLM`` to the bit (parallel
attention + MLP from one LayerNorm, no q/k/v biases, interleaved RoPE, HF weight names); an attention-only
model with biases and rotate-half pairs would need options that break its HF layout. Paper B's encoder is the
precedent: a study's own small architecture on the core's positions, attention and member axis.

Initialisation is TransformerLens's ``gpt2`` mode: every weight N(0, σ²) with σ = 0.8/√d_model (its default
``initializer_range``), biases 0, LayerNorm weights 1. Like the core's model, every parameter has a leading
member axis (seeds train packed) and member m is drawn from its own generator, so it does not depend on its
pack. :meth:`AttentionOnly.qk_weights` gives each head's W_Q, W_K in TransformerLens's (d_model × d_head)
layout, differentiable, for the penalties of :mod:`posym.studies.c.training`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from posym.nn import positions as position_schemes
from posym.nn.packing import (
    Hook, PackedByName, attention, config_from_settings, embed_members, layer_hook, normal_initialise, stacked, unembed, with_member_axis,
)

POSITIONS = ("learned", "rope_rotate_half", "nope")


@dataclass(frozen=True)
class AttentionOnlyConfig:
    """The toy model's settings; their defaults and meanings live in paper C's schema (``training.model``)."""

    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    max_len: int
    position: str
    rotary_dim: int | None
    rope_base: float
    layer_norm_epsilon: float
    initializer_range: float | None  # None: TransformerLens's 0.8 / √d_model

    def __post_init__(self):
        if self.position not in POSITIONS:
            raise ValueError(f"position={self.position!r}: expected one of {list(POSITIONS)}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        position_schemes.get(self.position).check(self)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def init_std(self) -> float:
        return self.initializer_range if self.initializer_range is not None else 0.8 / math.sqrt(self.d_model)

    @property
    def learned_position_std(self) -> float:
        """The APE's initial σ (read by the core's ``learned`` scheme): TransformerLens draws W_pos like every weight."""
        return self.init_std

    @property
    def rotary(self) -> int:
        return self.rotary_dim if self.rotary_dim is not None else self.head_dim

    def build(self, members: int = 1) -> "AttentionOnly":
        return AttentionOnly(self, members)

    def to_dict(self) -> dict:
        return asdict(self)


class Layer(nn.Module):
    """x + Attn(LN(x)); q, k, v one (3d × d) weight per member, rows q, k, v (head-major within each)."""

    def __init__(self, config: AttentionOnlyConfig, members: int):
        super().__init__()
        d = config.d_model
        self.config = config
        self.ln_weight, self.ln_bias = stacked(members, d), stacked(members, d)
        self.qkv_weight, self.qkv_bias = stacked(members, 3 * d, d), stacked(members, 3 * d)
        self.out_weight, self.out_bias = stacked(members, d, d), stacked(members, d)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x, (x.shape[-1],), eps=self.config.layer_norm_epsilon)
        return torch.addcmul(self.ln_bias[:, None, None], normed, self.ln_weight[:, None, None])

    def forward(self, x: torch.Tensor, scheme, positions: torch.Tensor, hook=None) -> torch.Tensor:
        c = self.config
        S, B, T, D = x.shape
        flat = self.normalise(x).reshape(S, B * T, D)
        qkv = torch.baddbmm(self.qkv_bias[:, None], flat, self.qkv_weight.transpose(1, 2)).view(S, B, T, 3, c.n_head, c.head_dim)
        q, k, v = (part.transpose(2, 3) for part in qkv.unbind(3))  # (S, B, H, T, dh); unbind: one stack in backward
        z = attention(q, k, v, scheme, positions, positions, explicit=getattr(hook, "needs_pattern", False), hook=hook)
        z = z.transpose(2, 3).reshape(S, B * T, D)
        return x + torch.baddbmm(self.out_bias[:, None], z, self.out_weight.transpose(1, 2)).view(S, B, T, D)


class AttentionOnly(PackedByName):
    """``members`` independent attention-only models; ids (B, T) or (S, B, T) give logits (…, T, V) at every position."""

    def __init__(self, config: AttentionOnlyConfig, members: int = 1):
        super().__init__()
        self.config, self.members = config, members
        d = config.d_model
        self.wte = stacked(members, config.vocab_size, d)
        self.position = position_schemes.build(config, members)
        self.blocks = nn.ModuleList(Layer(config, members) for _ in range(config.n_layer))
        self.ln_f_weight, self.ln_f_bias = stacked(members, d), stacked(members, d)
        self.unembed_weight, self.unembed_bias = stacked(members, config.vocab_size, d), stacked(members, config.vocab_size)

    def initialise(self, seeds: list[int]) -> "AttentionOnly":
        normal_initialise(self, seeds, self.config.init_std, scheme=self.position)
        return self

    def forward(self, ids: torch.Tensor, *, hooks: Mapping[str, Hook] | None = None, dropout=None) -> torch.Tensor:
        ids, packed = with_member_axis(ids, self.members)
        positions = torch.arange(ids.shape[-1], device=ids.device)
        x = embed_members(self.wte, self.position, ids, positions)
        for layer, block in enumerate(self.blocks):
            hook = layer_hook(hooks, layer)
            if hook is not None:
                x = hook("hook_resid_pre", x)
            x = block(x, self.position, positions, hook=hook)
            if hook is not None:
                x = hook("hook_resid_post", x)
        logits = unembed(x, self.ln_f_weight, self.ln_f_bias, self.unembed_weight, self.unembed_bias, self.config.layer_norm_epsilon)
        return logits if packed else logits[0]

    # ---- the QK weights, for the penalties and the fingerprint
    def qk_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_Q and W_K of every member, layer and head in TransformerLens's layout: (S, L, H, d_model, d_head) each
        (queries of residual n are n W_Q); views of the parameters, so differentiable."""
        c = self.config
        weights = torch.stack([block.qkv_weight for block in self.blocks], dim=1)  # (S, L, 3d, d)
        S, L = weights.shape[:2]
        heads = weights.view(S, L, 3, c.n_head, c.head_dim, c.d_model).transpose(-1, -2)  # (S, L, 3, H, d, dh)
        return heads[:, :, 0], heads[:, :, 1]

    # ---- training and checkpoints (the interface of posym.nn.architectures)
    def decays(self, name: str) -> bool:
        """AdamW(model.parameters(), weight_decay=...) as a TransformerLens training loop: every parameter decays."""
        return True

    def checkpoint_config(self) -> dict:
        return {"posym": {"study": "c", "model": self.config.to_dict()}}


def model_config(vocab_size: int, settings: Mapping) -> AttentionOnlyConfig:
    """The toy model's config from paper C's ``training.model`` settings (and the arm's position scheme)."""
    return config_from_settings(AttentionOnlyConfig, settings, vocab_size=vocab_size)
