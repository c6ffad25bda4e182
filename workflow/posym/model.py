"""A GPT-J-equivalent transformer with named hook points and pluggable position schemes.

Paper A trains HF ``GPTJForCausalLM`` from scratch (spec §A3): parallel attention + MLP
reading one LayerNorm, no q/k/v/out bias, interleaved RoPE (``rotate_every_two``) on
``rotary_dim`` dimensions of each head, untied unembedding with a bias. This module is the
same function (tests assert logits equal HF's to 1e-5) written for speed on small models:

* **Packed members.** Every weight carries a leading *member* axis, so ``members`` independent
  models (for example several seeds) train in one set of batched matmuls. ``members=1`` is
  an ordinary model. Member ``m`` is initialised from its own generator, so its weights do
  not depend on which other members it is packed with.
* **Fused projections.** q, k, v and the MLP's ``fc_in`` read the same LayerNorm output: their
  weights are one parameter; q, k, v are one matmul and ``fc_in`` another, so that GELU reads a
  contiguous tensor and the backward pass need not concatenate gradients.
* **Only what the loss needs.** Training and evaluation read the last position only; the last
  block then computes its query and MLP for that position alone.

Analyses never reach into the internals: they ask for named hook points, with TransformerLens's
names and meanings (:data:`HOOK_POINTS`): ``attn.hook_q`` / ``attn.hook_k`` are the queries and keys
before the position scheme rotates them, ``attn.hook_rot_q`` / ``attn.hook_rot_k`` after. Position
information enters through a :class:`posym.positions.PositionScheme`, which may rotate q/k (RoPE), add
a score bias (ALiBi, T5) or add an embedding (absolute), so new schemes slot in without touching the
attention.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from . import positions as position_schemes
from .positions import PositionScheme

Hook = Callable[[torch.Tensor], torch.Tensor | None]

# Arithmetic precisions: None is plain float32; otherwise the autocast dtype over float32
# weights (mixed precision; RoPE and other float32-only steps stay in float32).
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of ``precision``; an error naming it when it is not a key of PRECISIONS."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: expected one of {sorted(PRECISIONS)}")
    return PRECISIONS[precision]


def autocast(device: str | torch.device, precision: str):
    """The context in which a model computes at ``precision``."""
    dtype = autocast_dtype(precision)
    return torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: bf16 autocast on a GPU (the counterpart of the authors' fp16 mixed precision), fp32 on a CPU."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but no CUDA device is available")
    return torch.device(name)


#: ``n_positions`` of the HF config. RoPE has no length limit, but HF GPT-J precomputes its sin/cos table for this
#: many positions (and copies it per batch row on every forward, so a huge bound costs memory). 8192 lies above
#: every input posym evaluates (the paper's longest length-generalisation input has 5,017 tokens); for longer
#: inputs, raise it when loading: ``GPTJForCausalLM.from_pretrained(path, n_positions=...)``.
HF_N_POSITIONS = 8192
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
    position: str  # a registered posym.positions scheme
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
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in values.items() if k not in RETIRED_SETTINGS}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown model settings: {sorted(unknown)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    def build(self, members: int = 1) -> "PosymModel":
        return PosymModel(self, members)


# --------------------------------------------------------------------------- attention


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scheme: PositionScheme,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = True,
    key_mask: torch.Tensor | None = None,
    explicit: bool = True,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
    hook: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Multi-head attention of queries (..., H, Tq, dh) over keys/values (..., H, Tk, dh); returns (..., H, Tq, dh).

    Query i sits at ``q_positions[i]``; with ``causal`` it attends to every key at a position ≤ its own, else
    to every key. ``key_mask`` (..., Tk), when given, marks the keys that may be attended to (False: padding).
    With ``explicit`` the logits and the pattern are materialised (needed for the hooks that read them and for
    dropout driven by our own generators); otherwise PyTorch's fused kernel computes the same values. On
    either path ``hook_q`` / ``hook_k`` see the queries and keys before the position scheme rotates them,
    ``hook_rot_q`` / ``hook_rot_k`` after, and ``hook_z`` each head's output (TransformerLens's names).
    """
    if hook is not None:
        q, k = hook("hook_q", q), hook("hook_k", k)
    q = scheme.rotate(q, q_positions)
    k = scheme.rotate(k, k_positions)
    if hook is not None:
        q, k = hook("hook_rot_q", q), hook("hook_rot_k", k)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    bias = scheme.score_bias(q_positions, k_positions)
    future = k_positions[None, :] > q_positions[:, None] if causal else None
    hidden = None if key_mask is None else ~key_mask[..., None, None, :]
    if not explicit:
        out = _fused_attention(q, k, v, scale, bias, future, hidden, same_positions=torch.equal(q_positions, k_positions))
    else:
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if bias is not None:
            scores = scores + bias.to(scores.dtype)  # at bf16 a float32 bias would widen every logit
        if future is not None:
            scores = scores.masked_fill(future, float("-inf"))
        if hidden is not None:
            scores = scores.masked_fill(hidden, float("-inf"))
        if hook is not None:
            scores = hook("hook_attn_scores", scores)
        pattern = torch.softmax(scores, dim=-1)
        if hook is not None:
            pattern = hook("hook_pattern", pattern)
        if dropout is not None:
            pattern = dropout(pattern)
        out = torch.matmul(pattern, v)
    return out if hook is None else hook("hook_z", out)


def _fused_attention(q, k, v, scale, bias, future, hidden, same_positions: bool) -> torch.Tensor:
    """PyTorch's fused attention. Its fast kernels take 4-d inputs and no mask (or ``is_causal``), or they fall
    back to its slow reference path: flatten the leading axes, and name the plain causal case."""
    lead, heads, (tq, tk) = q.shape[:-3], q.shape[-3], (q.shape[-2], k.shape[-2])
    q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (q, k, v))
    if bias is None and hidden is None and (future is None or not future.any()):
        out = F.scaled_dot_product_attention(q, k, v, scale=scale)
    elif bias is None and hidden is None and same_positions:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    else:
        mask = None
        for blocked in (future, hidden):
            if blocked is not None:
                part = torch.zeros(blocked.shape, dtype=q.dtype, device=q.device).masked_fill(blocked, float("-inf"))
                mask = part if mask is None else mask + part
        if bias is not None:
            mask = bias if mask is None else mask + bias
        if mask.dim() <= 3:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        else:
            # A mask per member (a learned bias) or per sample (a key mask): one call per member, its mask
            # broadcast over the batch rather than copied for every sample.
            members = lead[0] if len(lead) > 1 else 1
            q, k, v = (t.view(members, -1, *t.shape[-3:]) for t in (q, k, v))
            mask = mask.reshape(-1, *mask.shape[-4:]) if mask.dim() > 4 else mask[None]
            out = torch.stack(
                [F.scaled_dot_product_attention(q[m], k[m], v[m], attn_mask=mask[m if len(mask) > 1 else 0], scale=scale) for m in range(members)]
            )
    return out.reshape(*lead, *out.shape[-3:])


def with_member_axis(ids: torch.Tensor, members: int) -> tuple[torch.Tensor, bool]:
    """``ids`` as (members, batch, T), and whether they came so: (batch, T) is taken for a one-member model."""
    if ids.dim() == 3:
        return ids, True
    if members != 1:
        raise ValueError(f"a model of {members} members needs ids of shape (members, batch, T)")
    return ids[None], False


def embed_members(wte: torch.Tensor, position, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Each member's token embeddings (wte (S, V, D), ids (S, B, T)) plus the scheme's additive position
    embedding, where it has one."""
    x = torch.stack([F.embedding(ids[m], wte[m]) for m in range(ids.shape[0])])
    absolute = position.embedding(positions)
    return x if absolute is None else x + absolute


# --------------------------------------------------------------------------- dropout


class MemberDropout:
    """Dropout whose masks come from one generator per packed member.

    Masks are drawn as 16-bit uniform integers (four per 64-bit draw, about six times cheaper
    than ``bernoulli_`` on CPU), so the drop probability is p rounded to a multiple of 1/65536
    (0.1 → 0.1000061); kept values are scaled by the exact 1/(1-p) of that rounded p.
    """

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators

    def __call__(self, x: torch.Tensor, p: float) -> torch.Tensor:
        if p <= 0.0:
            return x
        threshold = round(p * 65536)
        keep_scale = 65536.0 / (65536 - threshold)
        per_member = x[0].numel()
        draws = torch.empty(len(self.generators), (per_member + 3) // 4, dtype=torch.int64, device=x.device)
        for m, generator in enumerate(self.generators):
            torch.randint(-(2**63), 2**63 - 1, draws[m].shape, generator=generator, out=draws[m])
        keep = draws.view(torch.int16)[:, :per_member].reshape(x.shape) >= (threshold - 32768)
        return x * keep.to(x.dtype).mul_(keep_scale)


# --------------------------------------------------------------------------- model


def stacked(members: int, *shape: int) -> nn.Parameter:
    """A parameter of ``shape`` per member, uninitialised: (members, *shape)."""
    return nn.Parameter(torch.empty(members, *shape))


class PackedByName(nn.Module):
    """A packed model whose checkpoint tensors are its own parameters by name, member m's slice of each: the
    checkpoint, member and cache methods of the architecture interface (:mod:`posym.architectures`) for a study's
    own model (paper B's encoder, paper C's toy model). A subclass takes ``(config, members)``, keeps them as
    ``config`` and ``members``, and reads hooks from ``forward(ids, hooks=...)``."""

    def checkpoint_tensors(self, m: int = 0) -> dict[str, torch.Tensor]:
        return {name: param[m].detach().clone().contiguous().cpu() for name, param in self.named_parameters()}

    def load_checkpoint_tensors(self, state: Mapping[str, torch.Tensor], m: int = 0) -> None:
        params = dict(self.named_parameters())
        if set(state) != set(params):
            raise ValueError(f"checkpoint tensors differ from the model's: missing {sorted(set(params) - set(state))}, unexpected {sorted(set(state) - set(params))}")
        with torch.no_grad():
            for name, param in params.items():
                if state[name].shape != param.shape[1:]:
                    raise ValueError(f"{name}: checkpoint shape {tuple(state[name].shape)}, model {tuple(param.shape[1:])}")
                param[m].copy_(state[name])

    def member(self, m: int) -> "PackedByName":
        """A single-member copy of member m, on the same device."""
        single = type(self)(self.config, members=1)
        single.load_checkpoint_tensors(self.checkpoint_tensors(m))
        return single.to(next(self.parameters()).device)

    @torch.no_grad()
    def run_with_cache(self, ids: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
        """Forward pass returning the tensors at the named hook points (member axis kept)."""
        cache: dict[str, torch.Tensor] = {}
        self(ids, hooks={n: (lambda t, n=n: cache.__setitem__(n, t.detach())) for n in names})
        missing = set(names) - set(cache)
        if missing:
            raise KeyError(f"no such hook points: {sorted(missing)}")
        return cache


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
        if last_query_only:
            kv = torch.bmm(flat, self.in_weight[:, : 2 * D].transpose(1, 2)).view(S, B, T, 2 * D)
            k, v = kv.split(D, dim=-1)
            qf = torch.baddbmm(
                torch.cat([self.fc_in_bias.new_zeros(S, D), self.fc_in_bias], 1)[:, None],
                h[:, :, -1],
                self.in_weight[:, 2 * D :].transpose(1, 2),
            ).view(S, B, 1, D + c.mlp_dim)
            q, f = qf.split([D, c.mlp_dim], dim=-1)
            q_positions, residual = positions[-1:], x[:, :, -1:]
        else:
            kvq = torch.bmm(flat, self.in_weight[:, : 3 * D].transpose(1, 2)).view(S, B, T, 3 * D)
            k, v, q = kvq.split(D, dim=-1)
            f = torch.baddbmm(self.fc_in_bias[:, None], flat, self.in_weight[:, 3 * D :].transpose(1, 2)).view(S, B, T, c.mlp_dim)
            q_positions, residual = positions, x
        training = dropout is not None
        a = attention(
            self._split_heads(q),
            self._split_heads(k),
            self._split_heads(v),
            scheme,
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


class PosymModel(nn.Module):
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
        self.lm_head_weight, self.lm_head_bias = stacked(members, config.vocab_size, d), stacked(members, config.vocab_size)

    # ---- initialisation: HF GPT-J's _init_weights, one generator per member
    def initialise(self, seeds: list[int]) -> "PosymModel":
        if len(seeds) != self.members:
            raise ValueError(f"need one seed per member ({self.members}), got {seeds}")
        std = self.config.initializer_range
        with torch.no_grad():
            for m, seed in enumerate(seeds):
                generator = torch.Generator().manual_seed(seed)
                for name, param in self.named_parameters():
                    target = param[m]
                    if name.endswith("bias"):
                        target.zero_()
                    elif name.split(".")[-1] in ("ln_weight", "ln_f_weight"):
                        target.fill_(1.0)
                    else:
                        target.copy_(torch.randn(target.shape, generator=generator) * std)
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
        normed = F.layer_norm(x, (x.shape[-1],), eps=self.config.layer_norm_epsilon)
        shape = (-1,) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        normed = torch.addcmul(self.ln_f_bias.view(shape), normed, self.ln_f_weight.view(shape))
        flat = normed.reshape(normed.shape[0], -1, normed.shape[-1])
        logits = torch.baddbmm(self.lm_head_bias[:, None], flat, self.lm_head_weight.transpose(1, 2))
        return logits.view(*normed.shape[:-1], -1)

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

    # ---- training and checkpoints (the interface of posym.architectures)
    def decays(self, name: str) -> bool:
        """HF Trainer decays every parameter except biases and LayerNorm weights."""
        return not (name.endswith("bias") or "ln_" in name)

    def checkpoint_tensors(self, m: int = 0) -> dict[str, torch.Tensor]:
        return self.hf_state_dict(m)

    def load_checkpoint_tensors(self, state: Mapping[str, torch.Tensor], m: int = 0) -> None:
        self.load_hf_state_dict(state, m)

    def checkpoint_config(self) -> dict:
        return self.hf_config()

    # ---- HF GPT-J weight layout
    def hf_state_dict(self, m: int = 0) -> dict[str, torch.Tensor]:
        """Member m's weights under ``GPTJForCausalLM``'s parameter names."""
        out = {
            "transformer.wte.weight": self.wte[m],
            "transformer.ln_f.weight": self.ln_f_weight[m],
            "transformer.ln_f.bias": self.ln_f_bias[m],
            "lm_head.weight": self.lm_head_weight[m],
            "lm_head.bias": self.lm_head_bias[m],
        }
        for i, block in enumerate(self.blocks):
            for ours, theirs in _HF_BLOCK_NAMES.items():
                out[f"transformer.h.{i}.{theirs}"] = getattr(block, ours)[m]
        return {k: v.detach().clone().contiguous().cpu() for k, v in out.items()}

    def load_hf_state_dict(self, state: Mapping[str, torch.Tensor], m: int = 0) -> None:
        expected = set(self.hf_state_dict(m))
        missing, unexpected = expected - set(state), set(state) - expected
        if missing or unexpected:
            raise ValueError(f"weights do not fit this model: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
        with torch.no_grad():
            targets = {
                "transformer.wte.weight": self.wte,
                "transformer.ln_f.weight": self.ln_f_weight,
                "transformer.ln_f.bias": self.ln_f_bias,
                "lm_head.weight": self.lm_head_weight,
                "lm_head.bias": self.lm_head_bias,
            }
            for i, block in enumerate(self.blocks):
                for ours, theirs in _HF_BLOCK_NAMES.items():
                    targets[f"transformer.h.{i}.{theirs}"] = getattr(block, ours)
            for name, param in targets.items():
                if state[name].shape != param[m].shape:
                    raise ValueError(f"{name}: shape {tuple(state[name].shape)} != {tuple(param[m].shape)}")
                param[m].copy_(state[name])

    def hf_config(self) -> dict:
        """A ``config.json`` that ``GPTJForCausalLM.from_pretrained`` accepts, plus posym's own settings."""
        c = self.config
        # HF GPT-J hard-codes RoPE with base 10000; other schemes load only into posym.
        hf_compatible = c.position == "rope" and c.rope_base == 10000.0
        return {
            "architectures": ["GPTJForCausalLM"],
            "model_type": "gptj",
            "vocab_size": c.vocab_size,
            "n_positions": HF_N_POSITIONS,
            "n_embd": c.d_model,
            "n_layer": c.n_layer,
            "n_head": c.n_head,
            "rotary_dim": c.rotary_dim if c.rotary_dim is not None else c.head_dim,
            "n_inner": c.d_mlp,
            "activation_function": "gelu",
            "resid_pdrop": c.resid_pdrop,
            "embd_pdrop": c.embd_pdrop,
            "attn_pdrop": c.attn_pdrop,
            "layer_norm_epsilon": c.layer_norm_epsilon,
            "initializer_range": c.initializer_range,
            "use_cache": False,
            "tie_word_embeddings": False,
            "bos_token_id": None,
            "eos_token_id": None,
            "pad_token_id": 0,
            "torch_dtype": "float32",
            "posym": {"model": c.to_dict(), "hf_compatible": hf_compatible},
        }


_HF_BLOCK_NAMES = {
    "ln_weight": "ln_1.weight",
    "ln_bias": "ln_1.bias",
    "q_weight": "attn.q_proj.weight",
    "k_weight": "attn.k_proj.weight",
    "v_weight": "attn.v_proj.weight",
    "out_weight": "attn.out_proj.weight",
    "fc_in_weight": "mlp.fc_in.weight",
    "fc_in_bias": "mlp.fc_in.bias",
    "fc_out_weight": "mlp.fc_out.weight",
    "fc_out_bias": "mlp.fc_out.bias",
}


def layer_hook(hooks: Mapping[str, Hook] | None, layer: int):
    """Adapt the user's {full name: fn} hooks to the names seen inside block ``layer``."""
    if not hooks:
        return None
    prefix = f"blocks.{layer}."
    local = {name[len(prefix) :]: fn for name, fn in hooks.items() if name.startswith(prefix)}
    if not local:
        return None

    def apply(name: str, tensor: torch.Tensor) -> torch.Tensor:
        fn = local.get(name) or local.get(f"attn.{name}")
        if fn is None:
            return tensor
        result = fn(tensor)
        return tensor if result is None else result

    # Attention materialises its logits and pattern only for hooks that read them.
    apply.needs_pattern = any(name.split(".")[-1] in ("hook_attn_scores", "hook_pattern") for name in local)
    return apply


#: The hook points of block ``l`` are ``blocks.<l>.<name>``; shapes keep posym's member axis first:
#: q/k/z (members, batch, heads, positions, d_head), scores and pattern (members, batch, heads, query, key).
HOOK_POINTS = (
    "hook_resid_pre",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_rot_q",
    "attn.hook_rot_k",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_resid_post",
)
