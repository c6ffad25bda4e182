"""Where absolute position can be read off the residual stream (spec §B6, PROPOSED: "in the Absolute + RoPE
hybrid the additive position direction is fully displaced after layer 2").

For the input (the embeddings plus any additive encoding) and the stream after each layer, a linear probe maps
each token's vector to its position: ridge least squares onto one-hot positions over standardised features,
decoded by argmax. Half of the samples fit the probe, the other half score it (accuracy: the exact position;
mean absolute error in positions). Closed-form and in float64, so the probe itself is deterministic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch


@torch.no_grad()
def residual_streams(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """The input and the stream after each layer, each (B, T, d), for a single-member model."""
    n = model.config.n_layer
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(n)]
    cache = model.run_with_cache(ids, names)
    return [cache[name][0] for name in names]


def fit_probe(features: torch.Tensor, targets: torch.Tensor, n_classes: int, ridge: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, std, weights) of a ridge probe from features (N, d) to one-hot targets (N,), float64."""
    x = features.to(torch.float64)
    mean, std = x.mean(0), x.std(0).clamp_min(1e-8)
    z = torch.cat([(x - mean) / std, torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
    y = torch.nn.functional.one_hot(targets, n_classes).to(torch.float64)
    gram = z.T @ z + ridge * len(z) * torch.eye(z.shape[1], dtype=torch.float64)
    return mean, std, torch.linalg.solve(gram, z.T @ y)


def apply_probe(probe, features: torch.Tensor) -> torch.Tensor:
    mean, std, weights = probe
    z = (features.to(torch.float64) - mean) / std
    return (torch.cat([z, torch.ones(len(z), 1, dtype=torch.float64)], dim=1) @ weights).argmax(1)


def position_probe(model, tokens: np.ndarray, ridge: float) -> pd.DataFrame:
    """Rows ``layer`` (0 = the input, l = after layer l), ``accuracy`` and ``mean_abs_error`` of the held-out half."""
    ids = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    if len(ids) < 2:
        raise ValueError("the probe needs at least 2 samples (half fit it, half score it)")
    half = len(ids) // 2
    T = ids.shape[1]
    positions = torch.arange(T)
    rows = []
    for layer, stream in enumerate(residual_streams(model, ids)):
        fit, held = stream[:half].reshape(-1, stream.shape[-1]), stream[half:].reshape(-1, stream.shape[-1])
        probe = fit_probe(fit, positions.repeat(half), T, ridge)
        guess = apply_probe(probe, held)
        truth = positions.repeat(len(ids) - half)
        rows.append(
            {
                "layer": layer,
                "accuracy": float((guess == truth).to(torch.float64).mean()),
                "mean_abs_error": float((guess - truth).abs().to(torch.float64).mean()),
                "chance": 1.0 / T,
                "fit_samples": half,
                "scored_samples": len(ids) - half,
            }
        )
    return pd.DataFrame(rows)
