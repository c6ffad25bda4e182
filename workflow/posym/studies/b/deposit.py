"""Per-head ablation (spec §B4): the accuracy of a model when one head writes nothing, for every layer × head.

The authors (``transvis.py``) zero rows [h·d_head, (h+1)·d_head) of a layer's V weight and bias, so head h's
values and hence its output are zero, and score the whole dataset (train and test). Here the head's output is
replaced by zeros at the hook point ``blocks.<l>.attn.hook_z``, which is the same function (a test checks it
against zeroed V rows) and needs no edit of the weights. For MLA, head h's output is zero exactly when rows
[h·d_head, (h+1)·d_head) of W_UV are: the ``head`` mode. The authors' ``mlavis.py`` instead zeroes latent
channels [h·d_head, (h+1)·d_head) of W_UQ, W_UK and W_UV (columns, shared by every head; an empty slice for
h ≥ latent / d_head): the ``authors`` mode, which is not a head ablation.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pandas as pd
import torch

from posym.data import tasks
from posym.nn.precision import autocast
from posym.data.tasks import TaskData

#: Samples per forward batch.
BATCH = 256
MODES = ("head", "authors")
#: Claim B-3's deposit head: the layer-0 head whose ablation costs at least this many points (the notes give ≈ 60
#: for it and call the other heads negligible). B-3's check and paper C's fingerprint of paper B's heads both read it.
DEPOSIT_THRESHOLD = 40.0


def with_roles(ablation: pd.DataFrame) -> pd.DataFrame:
    """One run's ablation table (layer, head, drop) with ``role``: "deposit" for the head of the largest drop where
    it lies in layer 0 and costs ≥ DEPOSIT_THRESHOLD points, "other" for every other head. Paper C's fingerprint of
    paper B's heads reads this column from the ablation table, not the threshold."""
    table = ablation.assign(role="other")
    top = table["drop"].idxmax()
    if table.loc[top, "layer"] == 0 and table.loc[top, "drop"] >= DEPOSIT_THRESHOLD:
        table.loc[top, "role"] = "deposit"
    return table


def zero_head(head: int):
    """A hook that replaces head ``head``'s output z (S, B, H, T, d_head) with zeros."""

    def hook(z: torch.Tensor) -> torch.Tensor:
        z = z.clone()
        z[:, :, head] = 0
        return z

    return hook


@contextlib.contextmanager
def authors_mla_ablation(model, layer: int, head: int) -> Iterator[None]:
    """While active, latent channels [head·d_head, (head+1)·d_head) of layer ``layer``'s W_UQ, W_UK, W_UV are zero
    (``mlavis.py``); the weights are restored on exit."""
    block, dh = model.blocks[layer], model.config.head_dim
    weights = [block.uq_weight, block.uk_weight, block.uv_weight]
    saved = [w.detach().clone() for w in weights]
    try:
        with torch.no_grad():
            for w in weights:
                w[..., head * dh : (head + 1) * dh] = 0  # (members, out, latent): columns of the latent axis
        yield
    finally:
        with torch.no_grad():
            for w, s in zip(weights, saved):
                w.copy_(s)


@torch.no_grad()
def predict(model, tokens: np.ndarray, hooks: dict | None = None, precision: str = "fp32") -> np.ndarray:
    """Argmax class of each sample (single-member model), with ``hooks`` applied."""
    model.eval()
    ids = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    out = []
    for start in range(0, len(ids), BATCH):
        with autocast("cpu", precision):
            out.append(model(ids[start : start + BATCH], hooks=hooks).argmax(-1))
    return torch.cat(out).numpy()


def accuracy(predictions: np.ndarray, data: TaskData) -> float:
    """Overall accuracy as the task counts it (paper B's count ignores label 0)."""
    return tasks.get(data.task).accuracy_rows(predictions, data)[-1]["accuracy"]


def ablate_heads(model, data: TaskData, mode: str = "head", precision: str = "fp32") -> pd.DataFrame:
    """Accuracy of ``model`` on ``data`` with each head removed in turn: rows layer, head, accuracy, baseline,
    drop (percentage points, baseline − accuracy), mode (``head`` or ``authors``; the latter only differs for MLA),
    role (:func:`with_roles`)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {MODES}")
    config = model.config
    authors_mla = mode == "authors" and config.attention == "mla"
    baseline = accuracy(predict(model, data.tokens, precision=precision), data)
    rows = []
    for layer in range(config.n_layer):
        for head in range(config.n_head):
            if authors_mla:
                with authors_mla_ablation(model, layer, head):
                    predictions = predict(model, data.tokens, precision=precision)
            else:
                predictions = predict(model, data.tokens, {f"blocks.{layer}.attn.hook_z": zero_head(head)}, precision)
            value = accuracy(predictions, data)
            rows.append({"layer": layer, "head": head, "accuracy": value, "baseline": baseline, "drop": 100 * (baseline - value)})
    return with_roles(pd.DataFrame(rows).assign(mode=mode if config.attention == "mla" else "head", n=len(data)))
