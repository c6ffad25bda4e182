"""Paper B's model (spec §B3): a bidirectional pre-LN encoder that classifies a mean-pooled sequence.

The authors' code (``trans.py``, ``partialrope.py``, ``mla.py`` of Qihuai27/Deposit-Pattern-Research) is the
reference, quirks included; each quirk is a setting, its default what the paper ran:

* ``kv_source: embeddings`` — every layer's keys and values read the input embeddings (+ additive position
  encoding), not the residual stream; queries read LN(residual). ``residual``: the standard encoder.
* ``padding_mask: false`` — padding (id ``pad_id``) is attended to and mean-pooled like any token.
* ``attention_scale: null`` — q·k scaled by 1/√d_head (MLA: 1/√(2·d_head), the width of its [content; rope] key).
* ``final_layer_norm: false`` — the classifier reads the mean of the last residual stream directly.

Position enters through :mod:`posym.nn.positions` schemes: one input scheme when the scheme ``embeds``, and one per
layer when it ``attends`` (paper B's T5 bias is a table per layer). ``attention: mla`` swaps each layer's
attention for DeepSeek-style latent attention (W_DKV/W_DQ to ``mla_latent`` channels, per-head up-projections,
a decoupled rope key and query shared across heads, rotated by ``mla_rope``: ``authors``, the code's
non-rotation, or ``standard`` RoPE); the MLA model of the paper also uses GELU, a final LayerNorm, the padding
mask and a zero-initialised learned absolute embedding, which its variant sets.

Like the core's GPT-J, every weight has a leading member axis so seeds train packed, member m is drawn from
its own generator (PyTorch's default initialisation: U(±1/√fan_in) for linear weights and biases, N(0, 1)
embeddings), and analyses read TransformerLens-named hook points (``posym.nn.packing.HOOK_POINTS``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from posym.nn import positions as position_schemes
from posym.nn.packing import Hook, MemberDropout, PackedByName, attention, config_from_settings, embed_members, layer_hook, relu, stacked, with_member_axis

ATTENTIONS = ("standard", "mla")
KV_SOURCES = ("embeddings", "residual")
ACTIVATIONS = {"relu": relu, "gelu": F.gelu}
MLA_ROPES = ("authors", "standard")


@dataclass(frozen=True)
class EncoderConfig:
    """The encoder's settings; their defaults and meanings live in paper B's config schema (``model``)."""

    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    d_mlp: int
    max_len: int
    position: str
    rope_base: float
    rope_heads: int | str | None  # partial_rope: the first k heads, or "all"
    dropout: float
    layer_norm_epsilon: float
    attention: str
    kv_source: str
    padding_mask: bool
    attention_scale: float | None
    activation: str
    final_layer_norm: bool
    learned_position_std: float
    mla_latent: int
    mla_rope: str
    pad_id: int = 0

    def __post_init__(self):
        for name, allowed in (("attention", ATTENTIONS), ("kv_source", KV_SOURCES), ("activation", tuple(ACTIVATIONS)), ("mla_rope", MLA_ROPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected one of {list(allowed)}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        scheme = position_schemes.get(self.position)
        scheme.check(self)
        if self.attention == "mla" and scheme.attends:
            raise ValueError(f"position={self.position!r} acts inside attention; MLA carries its own rope (mla_rope)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def scale(self) -> float:
        if self.attention_scale is not None:
            return self.attention_scale
        width = 2 * self.head_dim if self.attention == "mla" else self.head_dim
        return 1.0 / math.sqrt(width)

    def build(self, members: int = 1) -> "Encoder":
        return Encoder(self, members)

    def to_dict(self) -> dict:
        return asdict(self)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (S, ..., in) times each member's weight (S, out, in), plus bias (S, out)."""
    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    out = torch.bmm(flat, weight.transpose(1, 2)) if bias is None else torch.baddbmm(bias[:, None], flat, weight.transpose(1, 2))
    return out.view(*x.shape[:-1], weight.shape[1])


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    return torch.addcmul(bias.view(shape), F.layer_norm(x, (x.shape[-1],), eps=eps), weight.view(shape))


def _heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(S, B, T, H·dh) -> (S, B, H, T, dh)."""
    S, B, T, D = x.shape
    return x.view(S, B, T, n_head, D // n_head).transpose(2, 3)


def _merge(z: torch.Tensor) -> torch.Tensor:
    """(S, B, H, T, dh) -> (S, B, T, H·dh)."""
    S, B, H, T, dh = z.shape
    return z.transpose(2, 3).reshape(S, B, T, H * dh)


class EncoderLayer(nn.Module):
    """x + Attn(LN₁(x), memory) then x + FFN(LN₂(x)); the attention is the standard one or MLA."""

    def __init__(self, config: EncoderConfig, members: int):
        super().__init__()
        d, f, S = config.d_model, config.d_mlp, members
        self.config = config
        self.ln1_weight, self.ln1_bias = stacked(S, d), stacked(S, d)
        if config.attention == "standard":
            self.q_weight, self.q_bias = stacked(S, d, d), stacked(S, d)
            self.kv_weight, self.kv_bias = stacked(S, 2 * d, d), stacked(S, 2 * d)  # rows: k then v
            self.out_weight, self.out_bias = stacked(S, d, d), stacked(S, d)
            scheme = position_schemes.get(config.position)
            self.position = position_schemes.build(config, members) if scheme.attends else position_schemes.NoPE()
        else:
            c, dh = config.mla_latent, config.head_dim
            self.dkv_weight, self.dq_weight = stacked(S, c, d), stacked(S, c, d)
            self.uk_weight, self.uv_weight, self.uq_weight = stacked(S, d, c), stacked(S, d, c), stacked(S, d, c)
            self.kr_weight, self.qr_weight = stacked(S, dh, d), stacked(S, dh, c)
            self.out_weight = stacked(S, d, d)
            self.position = (
                position_schemes.AuthorsMlaRope(dh, config.rope_base) if config.mla_rope == "authors" else position_schemes.Rope(dh, dh, config.rope_base)
            )
        self.ln2_weight, self.ln2_bias = stacked(S, d), stacked(S, d)
        self.fc1_weight, self.fc1_bias = stacked(S, f, d), stacked(S, f)
        self.fc2_weight, self.fc2_bias = stacked(S, d, f), stacked(S, d)

    k_weight = property(lambda self: self.kv_weight[:, : self.config.d_model])
    v_weight = property(lambda self: self.kv_weight[:, self.config.d_model :])
    k_bias = property(lambda self: self.kv_bias[:, : self.config.d_model])
    v_bias = property(lambda self: self.kv_bias[:, self.config.d_model :])

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        positions: torch.Tensor,
        key_mask: torch.Tensor | None,
        dropout: MemberDropout | None = None,
        hook: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        c = self.config
        h = _layer_norm(x, self.ln1_weight, self.ln1_bias, c.layer_norm_epsilon)
        context = memory if c.kv_source == "embeddings" else h
        training = dropout is not None
        if c.attention == "standard":
            q = _heads(_linear(h, self.q_weight, self.q_bias), c.n_head)
            k, v = (_heads(t, c.n_head) for t in _linear(context, self.kv_weight, self.kv_bias).split(c.d_model, dim=-1))
            scheme = self.position
            pattern_dropout = (lambda p: dropout(p, c.dropout)) if training and c.dropout > 0 else None
        else:
            q, k, v = self._mla_qkv(h, context, positions)
            scheme, pattern_dropout = position_schemes.NoPE(), None  # the rope parts are already rotated
        z = attention(
            q, k, v, scheme, positions, positions,
            scale=c.scale, causal=False, key_mask=key_mask,
            explicit=pattern_dropout is not None or getattr(hook, "needs_pattern", False),
            dropout=pattern_dropout, hook=hook,
        )  # fmt: skip
        out = _linear(_merge(z), self.out_weight, getattr(self, "out_bias", None))
        if training and c.attention == "standard":
            out = dropout(out, c.dropout)
        x = x + out
        hidden = ACTIVATIONS[c.activation](_linear(_layer_norm(x, self.ln2_weight, self.ln2_bias, c.layer_norm_epsilon), self.fc1_weight, self.fc1_bias))
        if training and c.attention == "mla":  # MLA's FFN: Linear, GELU, Dropout, Linear, Dropout
            hidden = dropout(hidden, c.dropout)
        out = _linear(hidden, self.fc2_weight, self.fc2_bias)
        if training:
            out = dropout(out, c.dropout)
        return x + out

    def _mla_qkv(self, h: torch.Tensor, context: torch.Tensor, positions: torch.Tensor):
        """Queries and keys [content; rope] of width 2·d_head, values d_head, all (S, B, H, T, ·)."""
        c = self.config
        latent_kv, latent_q = _linear(context, self.dkv_weight), _linear(h, self.dq_weight)
        k_content, v = _heads(_linear(latent_kv, self.uk_weight), c.n_head), _heads(_linear(latent_kv, self.uv_weight), c.n_head)
        q_content = _heads(_linear(latent_q, self.uq_weight), c.n_head)
        k_rope = self.position.rotate(_linear(context, self.kr_weight), positions)[:, :, None]  # one for all heads
        q_rope = self.position.rotate(_linear(latent_q, self.qr_weight), positions)[:, :, None]
        k = torch.cat([k_content, k_rope.expand(*k_content.shape[:-1], -1)], dim=-1)
        q = torch.cat([q_content, q_rope.expand(*q_content.shape[:-1], -1)], dim=-1)
        return q, k, v


class Encoder(PackedByName):
    """``members`` independent encoders evaluated together; ids (B, T) or (S, B, T) give logits (B, C) or (S, B, C)."""

    def __init__(self, config: EncoderConfig, members: int = 1):
        super().__init__()
        self.config, self.members = config, members
        d = config.d_model
        self.wte = stacked(members, config.vocab_size, d)
        scheme = position_schemes.get(config.position)
        self.position = position_schemes.build(config, members) if scheme.embeds else position_schemes.NoPE()
        self.blocks = nn.ModuleList(EncoderLayer(config, members) for _ in range(config.n_layer))
        if config.final_layer_norm:
            self.ln_f_weight, self.ln_f_bias = stacked(members, d), stacked(members, d)
        # Classes are label ids over the vocabulary's size, as the authors' fc_out.
        self.unembed_weight, self.unembed_bias = stacked(members, config.vocab_size, d), stacked(members, config.vocab_size)

    # ---- initialisation: PyTorch's defaults, one generator per member
    def initialise(self, seeds: list[int]) -> "Encoder":
        if len(seeds) != self.members:
            raise ValueError(f"need one seed per member ({self.members}), got {seeds}")
        schemes = [m for m in self.modules() if isinstance(m, position_schemes.PositionScheme)]
        with torch.no_grad():
            for m, seed in enumerate(seeds):
                generator = torch.Generator().manual_seed(seed)
                for name, param in self.named_parameters():
                    if "position." in name:
                        continue
                    leaf = name.rsplit(".", 1)[-1]
                    target = param[m]
                    if leaf.startswith("ln"):
                        target.fill_(1.0 if leaf.endswith("weight") else 0.0)
                    elif leaf == "wte":
                        target.copy_(torch.randn(target.shape, generator=generator))
                    else:  # nn.Linear: kaiming_uniform(a=√5) weights and uniform biases, both ±1/√fan_in
                        fan_in = self._fan_in(name)
                        bound = 1.0 / math.sqrt(fan_in)
                        target.copy_(torch.rand(target.shape, generator=generator) * (2 * bound) - bound)
                for scheme in schemes:
                    scheme.initialise_member(m, generator)
        return self

    def _fan_in(self, name: str) -> int:
        owner, leaf = name.rsplit(".", 1) if "." in name else ("", name)
        module = self.get_submodule(owner) if owner else self
        weight = getattr(module, leaf.replace("_bias", "_weight"))
        return weight.shape[-1]

    # ---- forward
    def forward(
        self,
        ids: torch.Tensor,
        *,
        dropout: MemberDropout | None = None,
        hooks: Mapping[str, Hook] | None = None,
    ) -> torch.Tensor:
        ids, packed = with_member_axis(ids, self.members)
        x, key_mask = self.residual_stream(ids, dropout=dropout, hooks=hooks)
        logits = self.classify(x, key_mask)
        return logits if packed else logits[0]

    def embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return embed_members(self.wte, self.position, ids, positions)

    def residual_stream(
        self, ids: torch.Tensor, *, dropout: MemberDropout | None = None, hooks: Mapping[str, Hook] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last residual stream (S, B, T, D) of ids (S, B, T), and the key mask (None: every token counts)."""
        positions = torch.arange(ids.shape[-1], device=ids.device)
        memory = self.embed(ids, positions)
        key_mask = ids != self.config.pad_id if self.config.padding_mask else None
        x = memory
        for layer, block in enumerate(self.blocks):
            hook = layer_hook(hooks, layer)
            if hook is not None:
                x = hook("hook_resid_pre", x)
            x = block(x, memory, positions, key_mask, dropout=dropout, hook=hook)
            if hook is not None:
                x = hook("hook_resid_post", x)
        return x, key_mask

    def classify(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """Logits (S, B, C) from the mean over positions (over unmasked ones with the padding mask)."""
        if self.config.final_layer_norm:
            x = _layer_norm(x, self.ln_f_weight, self.ln_f_bias, self.config.layer_norm_epsilon)
        if key_mask is None:
            pooled = x.mean(dim=2)
        else:
            weights = key_mask.to(x.dtype)[..., None]
            pooled = (x * weights).sum(2) / weights.sum(2)
        return _linear(pooled, self.unembed_weight, self.unembed_bias)

    # ---- training and checkpoints (the interface of posym.nn.architectures)
    def decays(self, name: str) -> bool:
        """The authors' AdamW(model.parameters()) decays every parameter."""
        return True

    def checkpoint_config(self) -> dict:
        return {"posym": {"study": "b", "model": self.config.to_dict()}}


def model_config(vocab_size: int, settings: Mapping) -> EncoderConfig:
    """The encoder's config from paper B's ``model`` settings."""
    return config_from_settings(EncoderConfig, settings, vocab_size=vocab_size)
