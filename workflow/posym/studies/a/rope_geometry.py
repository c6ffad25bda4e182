"""RoPE geometry of positional heads (spec §A7 "Fig. 4B", §A11 "Fig. 4A").

* **Fig 4A**: the Index construction of Thm 3.1 (:func:`posym.studies.a.theory.index_construction`). Every key is v; the
  query of the number σ is v turned back by σθ. RoPE then turns the key at position j by jθ and the query at
  position n by nθ, so the query lands on the key at position n − σ: the head attends there.
* **Fig 4B** (details PROPOSED): a trained Number model's query and key vectors of positions 0..16 at layer 1,
  projected on its dominant RoPE plane, the plane ID that Table 1 reports for that layer (round(ID*),
  :func:`posym.studies.a.rope_frequency.weighted_ids`). Plane ID k is dimensions (2k − 2, 2k − 1) of the head.
  The vectors are those of the paper's Fig 3 input and of the first test inputs, after RoPE (the spec's choice)
  and before it (the rotation by position·g undone). The spec's expected picture, keys roughly along one direction
  and queries on an arc, is the construction's picture *before* RoPE (Fig 4A: keys all v, queries v turned back by
  σθ); after RoPE the keys fan out by position. posym draws both.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from posym.nn.gptj import PosymModel

from .rope_frequency import rope_of, weighted_ids
from .theory import index_construction

log = logging.getLogger("posym.a.geometry")

# Fig 4A's drawing: the Index construction at θ = 0.8 (Fig 5A's Index angle), a query at position 6 holding σ = 2.
FIG4A_THETA, FIG4A_POSITION, FIG4A_SIGMA = 0.8, 6, 2


def dominant_plane(use: pd.DataFrame, layer: int, head: int = 0) -> int:
    """The plane ID (1-indexed) Table 1 gives ``layer``: round(ID*) of the mean frequency use over test inputs."""
    ids = weighted_ids(use)
    row = ids[(ids["layer"] == layer) & (ids["head"] == head)]
    if row.empty:
        raise ValueError(f"no frequency use for layer {layer}, head {head}")
    return int(row["id"].iloc[0])


@torch.no_grad()
def plane_coordinates(model: PosymModel, tokens: np.ndarray, layer: int, plane_id: int, head: int = 0) -> pd.DataFrame:
    """Query and key of every position of every input on plane ``plane_id`` (x, y = head dimensions
    2·plane_id − 2 and 2·plane_id − 1): rows (sample, position, kind, stage, x, y). ``post-RoPE`` is what the
    head compares (hook_rot_q / hook_rot_k); ``pre-RoPE`` the head's projections W^Q x and W^K x before the
    rotation (hook_q / hook_k), the frame of Fig 4A's construction."""
    if not 0 <= layer < model.config.n_layer:
        raise ValueError(f"layer {layer} is not in this {model.config.n_layer}-layer model")
    rope_of(model)
    model.eval()
    stages = {"post-RoPE": "hook_rot_", "pre-RoPE": "hook_"}
    hooks = {(kind, stage): f"blocks.{layer}.attn.{prefix}{kind[0]}" for kind in ("query", "key") for stage, prefix in stages.items()}
    cache = model.run_with_cache(torch.as_tensor(tokens, dtype=torch.long), list(hooks.values()))
    dims = slice(2 * plane_id - 2, 2 * plane_id)
    frames = []
    for (kind, stage), name in hooks.items():
        z = torch.view_as_complex(cache[name][0, :, head, :, dims].double().contiguous()).numpy()  # (B, T)
        samples, positions = np.meshgrid(np.arange(z.shape[0]), np.arange(z.shape[1]), indexing="ij")
        frames.append(
            pd.DataFrame(
                {
                    "sample": samples.ravel(),
                    "position": positions.ravel(),
                    "kind": kind,
                    "stage": stage,
                    "x": z.real.ravel(),
                    "y": z.imag.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def index_construction_geometry(
    theta: float = FIG4A_THETA, position: int = FIG4A_POSITION, sigma: int = FIG4A_SIGMA
) -> pd.DataFrame:
    """Fig 4A's vectors, from the construction's own weights and posym's RoPE: the keys of positions 0..position
    and the query of the number ``sigma`` at ``position``, each before and after RoPE (rows: kind, position,
    stage, x, y)."""
    construction = index_construction(letters=("a",), max_offset=sigma, theta=theta)
    rope = construction.rope
    key = construction.key @ construction.embedding[construction.vocabulary.index("a")]
    query = construction.query @ construction.embedding[construction.vocabulary.index(str(sigma))]
    positions = torch.arange(position + 1)
    keys = {
        "pre-RoPE": key.expand(len(positions), 2),
        "post-RoPE": rope.rotate(key.expand(len(positions), 2), positions),
    }
    queries = {"pre-RoPE": query[None], "post-RoPE": rope.rotate(query[None], positions[-1:])}
    rows = []
    for kind, vectors, at in (("key", keys, positions), ("query", queries, positions[-1:])):
        for stage, values in vectors.items():
            for p, (x, y) in zip(at.tolist(), values.tolist()):
                rows.append({"kind": kind, "position": p, "stage": stage, "x": x, "y": y})
    return pd.DataFrame(rows)


# -------------------------------------------------------------------------------------------- figures


def plot_index_geometry(vectors: pd.DataFrame, sigma: int = FIG4A_SIGMA):
    """Fig 4A: keys after RoPE on the unit circle (labelled by position); the query before RoPE (v turned back
    by σθ) and after (on the key it selects)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    circle = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(circle), np.sin(circle), c="lightgrey", lw=1)
    keys = vectors[(vectors["kind"] == "key") & (vectors["stage"] == "post-RoPE")]
    ax.scatter(keys["x"], keys["y"], c="#2471a3", s=18, label="keys after RoPE (j θ)", zorder=3)
    for row in keys.itertuples():
        ax.annotate(str(row.position), (row.x, row.y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    v = vectors[(vectors["kind"] == "key") & (vectors["stage"] == "pre-RoPE")].iloc[0]
    ax.annotate("", (v.x, v.y), (0, 0), arrowprops={"arrowstyle": "->", "color": "grey"})
    ax.text(v.x, v.y * 1.12, "v (every key)", ha="center", fontsize=7, color="grey")
    for stage, colour in (("pre-RoPE", "#f5b041"), ("post-RoPE", "#c0392b")):
        q = vectors[(vectors["kind"] == "query") & (vectors["stage"] == stage)].iloc[0]
        label = f"query σ = {sigma}, {'ρ(−σθ) v' if stage == 'pre-RoPE' else f'at position {q.position}'}"
        ax.annotate("", (q.x, q.y), (0, 0), arrowprops={"arrowstyle": "->", "color": colour, "lw": 2})
        ax.plot([], [], c=colour, lw=2, label=label)
    ax.set_aspect("equal")
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.35, 1.35)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("Index construction (Thm 3.1)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_dominant_plane(coordinates: pd.DataFrame, plane_id: int, layer: int):
    """Fig 4B: queries and keys of the Fig 3 input on the dominant plane (arrows, labelled by position), the test
    inputs' vectors as faint points; after RoPE (left, what the head compares) and before (right)."""
    import matplotlib.pyplot as plt

    colours = {"query": "#c0392b", "key": "#2471a3"}
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.8))
    for ax, stage in zip(axes, ("post-RoPE", "pre-RoPE")):
        vectors = coordinates[coordinates["stage"] == stage]
        for kind, colour in colours.items():
            cloud = vectors[(vectors["inputs"] == "test") & (vectors["kind"] == kind)]
            ax.scatter(cloud["x"], cloud["y"], s=4, c=colour, alpha=0.15)
            example = vectors[(vectors["inputs"] == "example") & (vectors["kind"] == kind)]
            for row in example.itertuples():
                ax.annotate("", (row.x, row.y), (0, 0), arrowprops={"arrowstyle": "->", "color": colour, "lw": 1})
                ax.annotate(str(row.position), (row.x, row.y), fontsize=6, color=colour)
            ax.plot([], [], c=colour, label=f"{'queries' if kind == 'query' else 'keys'} (Fig 3 input)")
        ax.axhline(0, c="lightgrey", lw=0.8)
        ax.axvline(0, c="lightgrey", lw=0.8)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel(f"dimension {2 * plane_id - 2}")
        ax.set_ylabel(f"dimension {2 * plane_id - 1}")
        ax.set_title(f"Number model, layer {layer}, plane ID {plane_id}, {stage}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
