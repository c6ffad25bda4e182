"""Devices and arithmetic precisions: the one place that resolves ``auto`` and builds an autocast context."""

from __future__ import annotations

import torch

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
