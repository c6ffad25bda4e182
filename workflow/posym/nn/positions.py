"""Position schemes: how position enters attention (NoPE, RoPE, ALiBi, absolute encodings, T5 biases, ...).

A scheme may rotate queries and keys (RoPE), add a bias to the attention logits (ALiBi, T5) or add an
input embedding (absolute encodings); the model's attention calls all three hooks and never asks which
scheme it runs. A new scheme is a subclass registered under a name with :func:`register`; a study's config
schema lists the names it supports (``model.position``).

Schemes with learned parameters keep a leading *member* axis like the models (several packed runs):
``embedding`` then returns (members, 1, T, d_model) and ``score_bias`` (members, 1, H, Tq, Tk); fixed schemes
return (T, d_model) and (H, Tq, Tk). Both broadcast over a model's (members, batch, ...) tensors. A model
that keeps one scheme per layer (paper B's encoder) builds the input embedding from a scheme that ``embeds``
and the per-layer ones only for schemes that ``attend``, so no parameter goes unused.
A scheme that needs cos and sin of position × frequency takes them from :func:`angle_table`, so that a compiled
step computes them once per graph.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

#: Registered schemes by name (:func:`register`).
POSITION_SCHEMES: dict[str, type["PositionScheme"]] = {}


def register(name: str) -> Callable[[type["PositionScheme"]], type["PositionScheme"]]:
    """Class decorator: make a scheme available as ``model.position: <name>``."""

    def add(cls: type[PositionScheme]) -> type[PositionScheme]:
        if name in POSITION_SCHEMES:
            raise ValueError(f"position scheme {name!r} is registered twice")
        cls.name = name
        POSITION_SCHEMES[name] = cls
        return cls

    return add


@torch.library.custom_op("posym::angle_table", mutates_args=())
def angle_table(positions: torch.Tensor, frequencies: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position p × frequency g_k for each position and frequency: each (T, K), in float32 or the
    frequencies' wider type (a float64 model's).

    An operator of its own so that a compiled graph computes the table once, as a (T, K) tensor the kernels
    read: inlined, inductor evaluates cos and sin inside every kernel that reads them, once per batch row and
    head in scalar code (measured: a third of paper A's compiled bf16 step on an AMX CPU, 2026-12-06)."""
    angles = positions.to(torch.float32)[:, None] * frequencies.to(positions.device)[None, :]
    return torch.cos(angles), torch.sin(angles)


@angle_table.register_fake
def _(positions: torch.Tensor, frequencies: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    shape, dtype = (positions.shape[0], frequencies.shape[0]), torch.promote_types(torch.float32, frequencies.dtype)
    return positions.new_empty(shape, dtype=dtype), positions.new_empty(shape, dtype=dtype)


def get(name: str) -> type["PositionScheme"]:
    try:
        return POSITION_SCHEMES[name]
    except KeyError:
        raise ValueError(f"position={name!r}: expected one of {sorted(POSITION_SCHEMES)}") from None


def build(config, members: int = 1) -> "PositionScheme":
    """The scheme a model config names (``config.position``), built for that model (and ``members`` packed runs)."""
    return get(config.position).from_config(config, members)


class PositionScheme(nn.Module):
    """How position enters attention. Each hook is optional; the base class does nothing (NoPE)."""

    name: str = ""
    #: Whether :meth:`rotate` turns queries and keys by position-dependent orthogonal maps (R_p⁻¹ = R_{−p}).
    rotary: bool = False
    #: Whether :meth:`embedding` adds something to the input.
    embeds: bool = False
    #: Whether the scheme acts inside attention (:meth:`rotate` or :meth:`score_bias`).
    attends: bool = False

    @classmethod
    def from_config(cls, config, members: int = 1) -> "PositionScheme":
        """The scheme for a model config (schemes with parameters read their sizes from it)."""
        return cls()

    @classmethod
    def check(cls, config) -> None:
        """Raise ``ValueError`` when ``config`` does not suit this scheme."""

    def initialise_member(self, m: int, generator: torch.Generator) -> None:
        """Draw member m's parameters from ``generator`` (schemes with parameters override this)."""

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Position-dependent map applied to queries and keys, shape (..., T, head_dim)."""
        return x

    def score_bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        """Additive bias on the attention logits, shape broadcastable to (H, Tq, Tk)."""
        return None

    def embedding(self, positions: torch.Tensor) -> torch.Tensor | None:
        """Additive input embedding, shape (T, d_model)."""
        return None

    def with_split_pairs(self) -> "SplitPairs | None":
        """What attention applies to queries and keys projected by rows that :meth:`SplitPairs.split_pairs`
        reordered, where the scheme rotates pairs of dimensions that are not each head's halves; None where it has no
        such form."""
        return None


@register("nope")
class NoPE(PositionScheme):
    """No positional information: attention sees contents only (causal masking still orders them)."""


@register("rope")
class Rope(PositionScheme):
    """GPT-J rotary embedding: plane k = dims (2k, 2k+1) of the first ``rotary_dim`` rotates by
    g_k * position with g_k = base^(-2k/rotary_dim) (0-indexed k; paper A counts from 1).

    Plane k is the pair (a, b) = (x[2k], x[2k+1]), turned to (a cos − b sin, a sin + b cos) with the angle
    g_k p: HF's ``x * cos + rotate_every_two(x) * sin``, in real arithmetic (no complex tensors, which
    torch.compile cannot generate) and in float32 under bf16 autocast. The cos/sin table of a forward pass's
    positions is made once and reused by every layer: the cache is keyed by the positions tensor itself
    (``is``), so checking it reads no tensor data (no host synchronisation on a GPU); a compiled graph makes
    the table once per graph instead.
    """

    rotary = attends = True

    def __init__(self, head_dim: int, rotary_dim: int, base: float = 10000.0, frequencies: torch.Tensor | None = None):
        super().__init__()
        self.rotary_dim = rotary_dim
        if frequencies is None:
            # The same float32 expression as HF's create_sinusoidal_positions.
            frequencies = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64) / rotary_dim))
        frequencies = torch.as_tensor(frequencies, dtype=torch.float32)
        if frequencies.shape != (rotary_dim // 2,):
            raise ValueError(f"need {rotary_dim // 2} frequencies, got {tuple(frequencies.shape)}")
        self.register_buffer("frequencies", frequencies, persistent=False)
        self._cache: tuple[torch.Tensor, int, tuple[torch.Tensor, torch.Tensor]] | None = None

    @classmethod
    def from_config(cls, config, members: int = 1) -> "Rope":
        return cls(config.head_dim, _rotary_dim(config), config.rope_base)

    @classmethod
    def check(cls, config) -> None:
        rotary = _rotary_dim(config)
        if rotary % 2 or not 0 < rotary <= config.head_dim:
            raise ValueError(f"rotary_dim={config.rotary_dim} must be even and within the head size {config.head_dim}")

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of g_k p for each position p and plane k, each (T, rotary_dim/2), float32."""
        # The same positions tensor, unchanged since (its version counter), reuses its table: a forward pass hands
        # one tensor to every layer. Comparing values instead (torch.equal) reads a GPU's answer back, a host sync
        # per layer per step (the device check of 2026-12-04 caught it under sync debug mode).
        eager = not torch.compiler.is_compiling()
        if eager and self._cache is not None and self._cache[0] is positions and self._cache[1] == positions._version:
            return self._cache[2]
        table = angle_table(positions, self.frequencies)
        if eager:
            self._cache = (positions, positions._version, table)
        return table

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(positions)
        rotary, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        # Low-precision inputs rotate in float32 (a compiled step fuses the casts into the rotation).
        wide = rotary.to(torch.promote_types(rotary.dtype, torch.float32))
        # HF's x·cos + rotate_every_two(x)·sin over whole rows (each dimension beside its pair's partner), which
        # keeps the rows' layout in the backward pass too: (a, b) -> (a cos − b sin, b cos + a sin).
        swapped = wide.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
        rotated = wide * cos.repeat_interleave(2, dim=-1) + swapped * torch.stack([-sin, sin], dim=-1).flatten(-2)
        rotated = rotated.to(x.dtype)
        return rotated if rest.shape[-1] == 0 else torch.cat([rotated, rest], dim=-1)

    def rotate_halves(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The rotation of plane t = dims (t, t + r/2) of the first r = ``rotary_dim`` by g_t p."""
        cos, sin = self.cos_sin(positions)
        half = self.rotary_dim // 2
        rotary, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        wide = rotary.to(torch.promote_types(rotary.dtype, torch.float32))
        first, second = wide[..., :half], wide[..., half:]
        rotated = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1).to(x.dtype)
        return rotated if rest.shape[-1] == 0 else torch.cat([rotated, rest], dim=-1)

    def with_split_pairs(self) -> "SplitPairs":
        return SplitPairs(self)


class SplitPairs:
    """GPT-J's rotation as attention applies it to queries and keys whose every head lists its planes' first
    coordinates, then their second ones (projected by rows that :meth:`split_pairs` reordered): the rotation of
    :meth:`Rope.rotate_halves`. The attention logits are those of the interleaved layout, summed in another order
    (q·k is a sum over the head's dimensions); what differs is the code a compiled step makes of it. Interleaved,
    inductor writes the rotation as scalar code (each dimension's partner found by ``x % 2``), about a tenth of paper
    A's compiled bf16 step on an AMX CPU (profiled 2026-12-07); in halves, with the keys' gradient in their own layout
    (:func:`posym.nn.packing.query_key_products`), it vectorises."""

    def __init__(self, rope: Rope):
        self.rope = rope

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.rope.rotate_halves(x, positions)

    def score_bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> None:
        return None

    def split_pairs(self, rows: torch.Tensor, head_dim: int) -> torch.Tensor:
        """Rows (..., H · head_dim, d) of a query or key projection with each head's first ``rotary_dim`` rows
        reordered from pairs (2k, 2k + 1) to halves (k, k + r/2)."""
        rotary = self.rope.rotary_dim
        heads = rows.unflatten(-2, (-1, head_dim))
        halves = heads[..., :rotary, :].unflatten(-2, (rotary // 2, 2)).transpose(-3, -2).flatten(-3, -2)
        if rotary < head_dim:
            halves = torch.cat([halves, heads[..., rotary:, :]], dim=-2)
        return halves.flatten(-3, -2)


@register("rope_rotate_half")
class RopeRotateHalf(Rope):
    """RoPE with TransformerLens's (and Llama's, Pythia's) *rotate-half* pairing: plane t = dims (t, t + r/2) of
    the first r = ``rotary_dim``, turned by θ_t p with θ_t = base^(−2t/r) — TransformerLens's
    ``x * cos + rotate_every_two(x) * sin`` with ``rotary_adjacent_pairs`` false (paper C, spec §C4, §X)."""

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.rotate_halves(x, positions)

    def with_split_pairs(self) -> None:
        return None  # its pairs are halves already


def _rotary_dim(config) -> int:
    rotary = getattr(config, "rotary_dim", None)
    return rotary if rotary is not None else config.head_dim


@register("alibi")
class Alibi(PositionScheme):
    """ALiBi (Press et al.): logit bias -m_h (i - j), with the geometric head slopes of the paper."""

    attends = True

    def __init__(self, n_head: int):
        super().__init__()
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / n_head) for h in range(n_head)])
        self.register_buffer("slopes", slopes, persistent=False)

    @classmethod
    def from_config(cls, config, members: int = 1) -> "Alibi":
        return cls(config.n_head)

    def score_bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).to(torch.float32)
        return -self.slopes[:, None, None] * distance


# --------------------------------------------------------------------------- paper B's schemes (spec §B3)


def sinusoids(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """sin and cos of position × base^(−2i/d_model), i = 0..d_model/2 − 1: each (T, d_model/2), float32."""
    frequencies = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32, device=positions.device) * (-math.log(base) / d_model))
    cos, sin = angle_table(positions, frequencies)
    return sin, cos


@register("sinusoidal")
class Sinusoidal(PositionScheme):
    """The absolute sinusoidal encoding added to the input: sin on even dimensions, cos on odd ones."""

    embeds = True

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        self.d_model, self.base = d_model, base

    @classmethod
    def from_config(cls, config, members: int = 1) -> "Sinusoidal":
        return cls(config.d_model)

    def embedding(self, positions: torch.Tensor) -> torch.Tensor:
        sin, cos = sinusoids(positions, self.d_model, self.base)
        return torch.stack([sin, cos], dim=-1).flatten(-2)  # (T, d): dims 2i sin, 2i + 1 cos


@register("learned")
class Learned(PositionScheme):
    """A learned absolute embedding per position, added to the input (``max_len`` positions), initialised
    N(0, ``std``²): 1 as ``nn.Embedding`` (paper B's learned APE); 0 gives the zeros of paper B's MLA."""

    embeds = True

    def __init__(self, members: int, max_len: int, d_model: int, std: float = 1.0):
        super().__init__()
        self.std = std
        self.table = nn.Parameter(torch.empty(members, max_len, d_model))

    @classmethod
    def from_config(cls, config, members: int = 1) -> "Learned":
        return cls(members, config.max_len, config.d_model, getattr(config, "learned_position_std", 1.0))

    def initialise_member(self, m: int, generator: torch.Generator) -> None:
        self.table.data[m] = torch.randn(self.table.shape[1:], generator=generator) * self.std

    def embedding(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[:, positions][:, None]  # (members, 1, T, d)


@register("t5")
class RelativeBias(PositionScheme):
    """T5-style learned relative bias, one per head and relative offset j − i (unbucketed, −(L−1)..L−1)."""

    attends = True

    def __init__(self, members: int, max_len: int, n_head: int, std: float = 0.02):
        super().__init__()
        self.max_len, self.std = max_len, std
        self.table = nn.Parameter(torch.empty(members, 2 * max_len - 1, n_head))

    def initialise_member(self, m: int, generator: torch.Generator) -> None:
        """N(0, 0.02²), as the authors' code."""
        self.table.data[m] = torch.randn(self.table.shape[1:], generator=generator) * self.std

    @classmethod
    def from_config(cls, config, members: int = 1) -> "RelativeBias":
        return cls(members, config.max_len, config.n_head)

    def score_bias(self, q_positions, k_positions):
        offset = k_positions[None, :] - q_positions[:, None] + self.max_len - 1  # (Tq, Tk)
        return self.table[:, offset].permute(0, 3, 1, 2)[:, None]  # (members, 1, H, Tq, Tk)


@register("alibi_symmetric")
class SymmetricAlibi(PositionScheme):
    """ALiBi for bidirectional attention with paper B's slopes: bias −m_h |i − j|, m_h = exp(−h / H)."""

    attends = True

    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", torch.exp(-torch.arange(n_head, dtype=torch.float32) / n_head), persistent=False)

    @classmethod
    def from_config(cls, config, members: int = 1) -> "SymmetricAlibi":
        return cls(config.n_head)

    def score_bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).abs().to(torch.float32)
        return -self.slopes[:, None, None] * distance


@register("rope_sinusoid")
class RopeWithSinusoid(Rope):
    """Paper B's "RoPE": interleaved RoPE on every head plus an additive concat[sin, cos] input encoding."""

    embeds = True

    def __init__(self, head_dim: int, d_model: int, base: float = 10000.0):
        super().__init__(head_dim, head_dim, base)
        self.d_model, self.base = d_model, base

    @classmethod
    def from_config(cls, config, members: int = 1) -> "RopeWithSinusoid":
        return cls(config.head_dim, config.d_model, config.rope_base)

    def embedding(self, positions: torch.Tensor) -> torch.Tensor:
        sin, cos = sinusoids(positions, self.d_model, self.base)
        return torch.cat([sin, cos], dim=-1)  # (T, d): all sines, then all cosines


@register("partial_rope")
class PartialRope(Rope):
    """RoPE on the first ``heads`` heads of every layer only (the others see no position); no input encoding."""

    def __init__(self, head_dim: int, heads: int, base: float = 10000.0):
        super().__init__(head_dim, head_dim, base)
        self.heads = heads

    @staticmethod
    def rotated_heads(rope_heads: int | str, n_head: int) -> int:
        """How many heads a ``rope_heads`` setting rotates: k, or every head for "all"."""
        return n_head if rope_heads == "all" else rope_heads

    @classmethod
    def from_config(cls, config, members: int = 1) -> "PartialRope":
        return cls(config.head_dim, cls.rotated_heads(config.rope_heads, config.n_head), config.rope_base)

    @classmethod
    def check(cls, config) -> None:
        heads = getattr(config, "rope_heads", None)
        if heads != "all" and (isinstance(heads, bool) or not isinstance(heads, int) or not 0 <= heads <= config.n_head):
            raise ValueError(f"rope_heads={heads!r} must be 0..{config.n_head} or 'all' for partial_rope")

    def with_split_pairs(self) -> None:
        return None

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (..., H, T, head_dim): heads 0..heads−1 rotated, the rest unchanged."""
        if self.heads == 0:
            return x
        return torch.cat([super().rotate(x[..., : self.heads, :, :], positions), x[..., self.heads :, :, :]], dim=-3)


class AuthorsMlaRope(PositionScheme):
    """What paper B's MLA code applies to its decoupled query and key (``mla.py``, RotaryEmbedding): not a rotation.

    It builds the table concat[sin(p g), cos(p g)] (g_k = base^(−2k/d), k < d/2) and then reads its even columns
    as "sin" and its odd columns as "cos", so the pairs (x_2k, x_2k+1) are mixed with sines and cosines of
    different frequencies, some of them swapped; the output is concat[even part, odd part].
    """

    attends = True

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        frequencies = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("frequencies", frequencies, persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = angle_table(positions, self.frequencies)
        table = torch.cat([sin, cos], dim=-1)
        sin, cos = table[:, ::2], table[:, 1::2]
        even, odd = x[..., ::2], x[..., 1::2]
        return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
