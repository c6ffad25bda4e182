"""Position schemes: how position enters attention (NoPE, RoPE, ALiBi, and the schemes studies add).

A scheme may rotate queries and keys (RoPE), add a bias to the attention logits (ALiBi, T5) or add an
input embedding (absolute encodings); the model's attention calls all three hooks and never asks which
scheme it runs. A new scheme is a subclass registered under a name with :func:`register`; a study's config
schema lists the names it supports (``model.position``).
"""

from __future__ import annotations

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


def build(config) -> "PositionScheme":
    """The scheme a model config names (``config.position``), built for that model."""
    try:
        scheme = POSITION_SCHEMES[config.position]
    except KeyError:
        raise ValueError(f"position={config.position!r}: expected one of {sorted(POSITION_SCHEMES)}") from None
    return scheme.from_config(config)


class PositionScheme(nn.Module):
    """How position enters attention. Each hook is optional; the base class does nothing (NoPE)."""

    name: str = ""
    #: Whether :meth:`rotate` turns queries and keys by position-dependent orthogonal maps (R_p⁻¹ = R_{−p}).
    rotary: bool = False

    @classmethod
    def from_config(cls, config) -> "PositionScheme":
        """The scheme for a :class:`posym.model.ModelConfig` (schemes with parameters read them from it)."""
        return cls()

    @classmethod
    def check(cls, config) -> None:
        """Raise ``ValueError`` when ``config`` does not suit this scheme."""

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Position-dependent map applied to queries and keys, shape (..., T, head_dim)."""
        return x

    def score_bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        """Additive bias on the attention logits, shape broadcastable to (H, Tq, Tk)."""
        return None

    def embedding(self, positions: torch.Tensor) -> torch.Tensor | None:
        """Additive input embedding, shape (T, d_model)."""
        return None


@register("nope")
class NoPE(PositionScheme):
    """No positional information: attention sees contents only (causal masking still orders them)."""


@register("rope")
class Rope(PositionScheme):
    """GPT-J rotary embedding: plane k = dims (2k, 2k+1) of the first ``rotary_dim`` rotates by
    g_k * position with g_k = base^(-2k/rotary_dim) (0-indexed k; paper A counts from 1).

    The interleaved pairing makes plane k the complex number x[2k] + i x[2k+1], so the rotation
    is one complex multiplication by exp(i g_k p) — the same arithmetic as HF's
    ``x * cos + rotate_every_two(x) * sin``.
    """

    rotary = True

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
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_config(cls, config) -> "Rope":
        return cls(config.head_dim, _rotary_dim(config), config.rope_base)

    @classmethod
    def check(cls, config) -> None:
        rotary = _rotary_dim(config)
        if rotary % 2 or not 0 < rotary <= config.head_dim:
            raise ValueError(f"rotary_dim={config.rotary_dim} must be even and within the head size {config.head_dim}")

    def phases(self, positions: torch.Tensor) -> torch.Tensor:
        """exp(i g_k p) for each position p and plane k, shape (T, rotary_dim/2), complex64."""
        if self._cache is not None and self._cache[0].shape == positions.shape and torch.equal(self._cache[0], positions):
            return self._cache[1]
        angles = positions.to(torch.float32)[:, None] * self.frequencies.to(positions.device)[None, :]
        phases = torch.complex(torch.cos(angles), torch.sin(angles))
        self._cache = (positions.clone(), phases)
        return phases

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        phases = self.phases(positions)
        rotary, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        # There is no bfloat16 complex type: low-precision inputs rotate in float32.
        wide = rotary.to(torch.promote_types(rotary.dtype, torch.float32))
        planes = torch.view_as_complex(wide.reshape(*rotary.shape[:-1], -1, 2).contiguous())
        rotated = torch.view_as_real(planes * phases).flatten(-2).to(x.dtype)
        return rotated if rest.shape[-1] == 0 else torch.cat([rotated, rest], dim=-1)


def _rotary_dim(config) -> int:
    return config.rotary_dim if config.rotary_dim is not None else config.head_dim


@register("alibi")
class Alibi(PositionScheme):
    """ALiBi (Press et al.): logit bias -m_h (i - j), with the geometric head slopes of the paper."""

    def __init__(self, n_head: int):
        super().__init__()
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / n_head) for h in range(n_head)])
        self.register_buffer("slopes", slopes, persistent=False)

    @classmethod
    def from_config(cls, config) -> "Alibi":
        return cls(config.n_head)

    def score_bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).to(torch.float32)
        return -self.slopes[:, None, None] * distance
