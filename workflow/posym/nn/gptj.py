"""A GPT-J-equivalent transformer with named hook points and pluggable position schemes.

Paper A trains HF ``GPTJForCausalLM`` from scratch (spec §A3): parallel attention + MLP
reading one LayerNorm, no q/k/v/out bias, interleaved RoPE (``rotate_every_two``) on
``rotary_dim`` dimensions of each head, untied unembedding with a bias. This module is the
same function (tests assert logits equal HF's to 1e-5) written for speed on small models:

* **Packed members** (:mod:`posym.nn.packing`): every weight carries a leading member axis.
* **Fused projections.** q, k, v and the MLP's ``fc_in`` read the same LayerNorm output: their
  weights are one parameter; q, k, v are one matmul and ``fc_in`` another, so that GELU reads a
  contiguous tensor and the backward pass need not concatenate gradients.
* **Rotation in split halves.** Without hooks on queries or keys, a block projects them with each head's
  rotation pairs reordered into halves (:class:`posym.nn.positions.SplitPairs`): the same logits, and a rotation
  whose backward pass a compiled step vectorises; parameters, checkpoints and hooks keep GPT-J's layout.
* **Only what the loss needs.** Training and evaluation read the last position only; the last
  block then computes its query and MLP for that position alone.

Its checkpoints are HF GPT-J's weights and ``config.json`` (:mod:`posym.nn.hf`); its hook points are
:data:`posym.nn.packing.HOOK_POINTS`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from posym.nn import positions as position_schemes
from posym.nn.hf import HFGPTJLayout
from posym.nn.packing import (
    Hook, MemberDropout, attention, config_from_settings, embed_members, layer_hook, normal_initialise, stacked, unembed, with_member_axis,
)
from posym.nn.positions import PositionScheme, SplitPairs

#: Settings older checkpoints recorded that no longer exist; ignored on load. ``n_positions`` (128) invented a
#: length limit that RoPE does not have.
RETIRED_SETTINGS = frozenset({"n_positions"})


@dataclass(frozen=True)
class ModelConfig:
    """The model's settings. Their defaults live in the study's config schema (``model`` section), not here."""

    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    d_mlp: int | None  # None: 4 * d_model, as GPT-J's n_inner=None
    position: str  # a registered posym.nn.positions scheme
    rotary_dim: int | None  # None: the whole head
    rope_base: float
    embd_pdrop: float
    attn_pdrop: float
    resid_pdrop: float
    layer_norm_epsilon: float
    initializer_range: float

    def __post_init__(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.position not in position_schemes.POSITION_SCHEMES:
            raise ValueError(f"position={self.position!r}: expected one of {sorted(position_schemes.POSITION_SCHEMES)}")
        position_schemes.POSITION_SCHEMES[self.position].check(self)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def mlp_dim(self) -> int:
        return self.d_mlp if self.d_mlp is not None else 4 * self.d_model

    @classmethod
    def from_dict(cls, values: Mapping) -> "ModelConfig":
        return config_from_settings(cls, {k: v for k, v in values.items() if k not in RETIRED_SETTINGS})

    def to_dict(self) -> dict:
        return asdict(self)

    def build(self, members: int = 1) -> "PosymModel":
        return PosymModel(self, members)


class Block(nn.Module):
    """GPT-J block: x + Attn(LN(x)) + MLP(LN(x)), weights stored as HF's (out, in) per member.

    k, v, q and the MLP's fc_in read the same LayerNorm output, so their weights are one
    parameter ``in_weight`` (rows in that order, so that the last block's [k, v] and [q, fc_in]
    are contiguous slices); ``q_weight`` etc. are views of it under HF's names.
    """

    def __init__(self, config: ModelConfig, members: int):
        super().__init__()
        d, f = config.d_model, config.mlp_dim
        self.config = config
        self.ln_weight, self.ln_bias = stacked(members, d), stacked(members, d)
        self.in_weight = stacked(members, 3 * d + f, d)
        self.fc_in_bias = stacked(members, f)
        self.out_weight = stacked(members, d, d)
        self.fc_out_weight, self.fc_out_bias = stacked(members, d, f), stacked(members, d)

    k_weight = property(lambda self: self.in_weight[:, : self.config.d_model])
    v_weight = property(lambda self: self.in_weight[:, self.config.d_model : 2 * self.config.d_model])
    q_weight = property(lambda self: self.in_weight[:, 2 * self.config.d_model : 3 * self.config.d_model])
    fc_in_weight = property(lambda self: self.in_weight[:, 3 * self.config.d_model :])

    def layer_norm(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x, (x.shape[-1],), eps=self.config.layer_norm_epsilon)
        return torch.addcmul(self.ln_bias[:, None, None], normed, self.ln_weight[:, None, None])

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # (S, B, T, D) -> (S, B, H, T, dh)
        S, B, T, _ = x.shape
        return x.view(S, B, T, self.config.n_head, self.config.head_dim).transpose(2, 3)

    def _split_pairs(self, split: SplitPairs) -> torch.Tensor:
        """``in_weight`` with its key and query rows reordered for ``split`` (a copy, made in each forward pass so
        that the parameters and checkpoints keep GPT-J's layout)."""
        D, W, head = self.config.d_model, self.in_weight, self.config.head_dim
        return torch.cat([split.split_pairs(W[:, :D], head), W[:, D : 2 * D], split.split_pairs(W[:, 2 * D : 3 * D], head), W[:, 3 * D :]], dim=1)

    def forward(
        self,
        x: torch.Tensor,
        scheme: PositionScheme,
        positions: torch.Tensor,
        *,
        last_query_only: bool = False,
        dropout: MemberDropout | None = None,
        hook: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """x: residual stream (S, B, T, D). With ``last_query_only`` returns (S, B, 1, D)."""
        c = self.config
        S, B, T, D = x.shape
        h = self.layer_norm(x)
        flat = h.reshape(S, B * T, D)
        # Without hooks that read queries or keys, a rotary scheme may take them with each head's pairs split into
        # halves, the form of its rotation that compiles to vector code (positions.SplitPairs): the same logits.
        split = scheme.with_split_pairs() if hook is None else None
        in_weight = self.in_weight if split is None else self._split_pairs(split)
        if last_query_only:
            kv = torch.bmm(flat, in_weight[:, : 2 * D].transpose(1, 2)).view(S, B, T, 2 * D)
            k, v = kv.split(D, dim=-1)
            qf = torch.baddbmm(
                torch.cat([self.fc_in_bias.new_zeros(S, D), self.fc_in_bias], 1)[:, None],
                h[:, :, -1],
                in_weight[:, 2 * D :].transpose(1, 2),
            ).view(S, B, 1, D + c.mlp_dim)
            q, f = qf.split([D, c.mlp_dim], dim=-1)
            q_positions, residual = positions[-1:], x[:, :, -1:]
        else:
            kvq = torch.bmm(flat, in_weight[:, : 3 * D].transpose(1, 2)).view(S, B, T, 3 * D)
            k, v, q = kvq.split(D, dim=-1)
            f = torch.baddbmm(self.fc_in_bias[:, None], flat, in_weight[:, 3 * D :].transpose(1, 2)).view(S, B, T, c.mlp_dim)
            q_positions, residual = positions, x
        training = dropout is not None
        a = attention(
            self._split_heads(q),
            self._split_heads(k),
            self._split_heads(v),
            scheme if split is None else split,
            q_positions,
            positions,
            explicit=training or getattr(hook, "needs_pattern", False),
            dropout=(lambda p: dropout(p, c.attn_pdrop)) if training else None,
            hook=hook,
        )
        Tq = q.shape[2]
        a = a.transpose(2, 3).reshape(S, B * Tq, D)
        attn_out = torch.bmm(a, self.out_weight.transpose(1, 2))
        mlp_out = torch.baddbmm(
            self.fc_out_bias[:, None], F.gelu(f.reshape(S, B * Tq, c.mlp_dim)), self.fc_out_weight.transpose(1, 2)
        )
        if training:
            attn_out, mlp_out = dropout(attn_out, c.resid_pdrop), dropout(mlp_out, c.resid_pdrop)
        return residual + (attn_out + mlp_out).view(S, B, Tq, D)


class PosymModel(HFGPTJLayout, nn.Module):
    """``members`` independent GPT-J models evaluated together.

    Inputs are token ids of shape (B, T) for a single member or (S, B, T) for S members;
    outputs keep the same leading layout.
    """

    def __init__(self, config: ModelConfig, members: int = 1):
        super().__init__()
        self.config, self.members = config, members
        d = config.d_model
        self.position = position_schemes.build(config)
        self.wte = stacked(members, config.vocab_size, d)
        self.blocks = nn.ModuleList(Block(config, members) for _ in range(config.n_layer))
        self.ln_f_weight, self.ln_f_bias = stacked(members, d), stacked(members, d)
        self.unembed_weight, self.unembed_bias = stacked(members, config.vocab_size, d), stacked(members, config.vocab_size)

    # ---- initialisation: HF GPT-J's _init_weights (std initializer_range), one generator per member
    def initialise(self, seeds: list[int]) -> "PosymModel":
        normal_initialise(self, seeds, self.config.initializer_range)
        return self

    # ---- forward
    def forward(
        self,
        ids: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        last_only: bool = True,
        dropout: MemberDropout | None = None,
        hooks: Mapping[str, Hook] | None = None,
    ) -> torch.Tensor:
        """Logits at the last position, shape (…, V), or at every position, (…, T, V)."""
        ids, packed = with_member_axis(ids, self.members)
        S, B, T = ids.shape
        if positions is None:
            positions = torch.arange(T, device=ids.device)
        x = self.embed(ids, positions)
        if dropout is not None:
            x = dropout(x, self.config.embd_pdrop)
        x = self.residual_stream(x, positions, last_only=last_only, dropout=dropout, hooks=hooks)
        logits = self.unembed(x[:, :, -1] if last_only else x)
        return logits if packed else logits[0]

    def embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return embed_members(self.wte, self.position, ids, positions)

    def residual_stream(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        *,
        last_only: bool = False,
        dropout: MemberDropout | None = None,
        hooks: Mapping[str, Hook] | None = None,
        layers: range | None = None,
    ) -> torch.Tensor:
        """Run ``layers`` (default all) of blocks on the residual stream x (S, B, T, D)."""
        layers = layers if layers is not None else range(self.config.n_layer)
        for layer in layers:
            hook = layer_hook(hooks, layer)
            if hook is not None:
                x = hook("hook_resid_pre", x)
            last = last_only and layer == self.config.n_layer - 1
            x = self.blocks[layer](x, self.position, positions, last_query_only=last, dropout=dropout, hook=hook)
            if hook is not None:
                x = hook("hook_resid_post", x)
        return x

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        return unembed(x, self.ln_f_weight, self.ln_f_bias, self.unembed_weight, self.unembed_bias, self.config.layer_norm_epsilon)

    # ---- analysis helpers
    @torch.no_grad()
    def run_with_cache(self, ids: torch.Tensor, names: list[str], positions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Forward pass returning the tensors at the named hook points (member axis kept)."""
        cache: dict[str, torch.Tensor] = {}

        def store(name):
            return lambda t: cache.__setitem__(name, t.detach())

        self(ids, positions=positions, last_only=False, hooks={n: store(n) for n in names})
        missing = set(names) - set(cache)
        if missing:
            raise KeyError(f"no such hook points: {sorted(missing)}")
        return cache

    @torch.no_grad()
    def attention_pattern(self, layer: int, resid: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Run block ``layer`` alone on residual input (S, B, T, D); its attention pattern (S, B, H, T, T)."""
        cache = {}
        if positions is None:
            positions = torch.arange(resid.shape[2], device=resid.device)
        hook = layer_hook({f"blocks.{layer}.attn.hook_pattern": lambda t: cache.setdefault("p", t)}, layer)
        self.blocks[layer](resid, self.position, positions, hook=hook)
        return cache["p"]

    def member(self, m: int) -> "PosymModel":
        """A single-member copy of member m."""
        single = PosymModel(self.config, members=1)
        with torch.no_grad():
            for (name, param), (_, source) in zip(single.named_parameters(), self.named_parameters()):
                param.copy_(source[m : m + 1])
        return single.to(self.wte.device)

    # ---- training and checkpoints (the interface of posym.nn.architectures)
    def decays(self, name: str) -> bool:
        """HF Trainer decays every parameter except biases and LayerNorm weights."""
        return not (name.endswith("bias") or "ln_" in name)

    def checkpoint_tensors(self, m: int = 0) -> dict[str, torch.Tensor]:
        return self.hf_state_dict(m)

    def load_checkpoint_tensors(self, state: Mapping[str, torch.Tensor], m: int = 0) -> None:
        self.load_hf_state_dict(state, m)

    def checkpoint_config(self) -> dict:
        return self.hf_config()
