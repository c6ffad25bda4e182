"""Information-flow grids: which symbol occupies each position after each layer (spec §A8, paper A Fig. 3).

**Trained models (Fig 3A/B; procedure PROPOSED in spec §A8).** Start from the input symbols. At
layer ℓ, position i looks at the key it attends to most, j* = argmax_j A_ℓ(i → j); if the symbol
currently at j* is an *answer symbol* (a letter in the Number task, a letter–digit pair in the
Letter task) position i takes it, otherwise it keeps its own. Iterating over the layers shows
the answer travelling along the hop chain to the query: in the paper's Number model, layer 0
copies the letter into the last-hop position, layers 1–3 do one hop each and later layers are
Reflexive.

**Idealised flows (Fig 3C/D; spec §A9).** Index (Number) or Retrieval (Letter) applied h times,
h the input's hop count, then Reflexive up to the model's depth: f = Reflexive^{ℓ−h} ∘ Hop^h, with
Listing 1's functions from :mod:`posym.studies.a.theory` (each task's :meth:`hop`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from posym.training.checkpoints import load_final_model  # noqa: E402
from posym.data.files import IntegrityError  # noqa: E402
from posym.nn.gptj import PosymModel  # noqa: E402

from .tasks import get  # noqa: E402
from .theory import reflexive  # noqa: E402  (Listing 1, spec §A9)

log = logging.getLogger("posym.a.flow")

GRID_COLUMNS = ["depth", "position", "token", "changed", "attended"]


def example(task: str) -> tuple[str, ...]:
    """The input of Fig 3A/B (spec §A8): Number, 4 hops, answer ``n``; Letter, 3 hops, answer ``a2``."""
    return tuple(get(task).fig3_input.split())


# ------------------------------------------------------------------------------------------- grids


def ideal_rows(task: str, tokens: Sequence[str], n_layer: int) -> list[list[str]]:
    """The idealised flow: the input, then the hop function until the query holds an answer, then Reflexive.

    Returns max(n_layer, h) + 1 rows (row d = after d layers), h being the hop count. Raises
    ``ValueError`` if the hop function never brings an answer to the query (not a valid input).
    """
    hop = get(task)
    rows = [list(tokens)]
    while not hop.is_answer_token(rows[-1][-1]):
        following = hop.hop(rows[-1])
        if following == rows[-1]:
            raise ValueError(f"no hop chain leads from the query to an answer in {' '.join(tokens)}")
        rows.append(following)
    while len(rows) <= n_layer:
        rows.append(reflexive(rows[-1]))
    return rows


def hop_count(task: str, rows: Sequence[Sequence[str]]) -> int:
    """Layers of an idealised flow until the query holds an answer symbol: the input's hop count h."""
    return next(depth for depth, row in enumerate(rows) if get(task).is_answer_token(row[-1]))


def grid_frame(rows: Sequence[Sequence[str]], attended: Sequence[Sequence[int]] | None = None) -> pd.DataFrame:
    """Tidy grid: depth (0 = input, d = after layer d − 1), position, token, changed (vs depth − 1), attended.

    ``attended`` (one row per layer) gives the key each position attended to most; −1 on the input row
    and where unknown.
    """
    records = []
    for depth, row in enumerate(rows):
        for position, token in enumerate(row):
            source = -1 if depth == 0 or attended is None else int(attended[depth - 1][position])
            changed = depth > 0 and token != rows[depth - 1][position]
            records.append(
                {"depth": depth, "position": position, "token": token, "changed": changed, "attended": source}
            )
    return pd.DataFrame(records, columns=GRID_COLUMNS)


def read_grid(path: str | Path) -> pd.DataFrame:
    """A grid written by ``posym flow``, tokens kept as text (Number offsets such as '7' are tokens too)."""
    return pd.read_csv(path, dtype={"token": str}, keep_default_na=False)


def ideal_flow(task: str, tokens: Sequence[str], n_layer: int) -> pd.DataFrame:
    """:func:`ideal_rows` as a tidy grid (Fig 3C/D)."""
    return grid_frame(ideal_rows(task, tokens, n_layer))


@torch.no_grad()
def model_flow(model: PosymModel, task: str, tokens: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """The trained model's flow grid for one input (Fig 3A/B) and its predicted token.

    Multi-head models follow the head-averaged attention (paper A's models have one head).
    """
    vocab = get(task).vocabulary
    ids = np.array([vocab.index(t) for t in tokens])
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.config.n_layer)]
    patterns = model.eval().run_with_cache(torch.as_tensor(ids)[None], names)
    current, rows, attended = ids, [ids], []
    for name in names:
        strongest = patterns[name][0, 0].mean(0).argmax(-1).numpy()  # (T,): j* for every position i
        incoming = current[strongest]
        current = np.where(get(task).is_answer_id(incoming), incoming, current)
        rows.append(current)
        attended.append(strongest)
    prediction = vocab.tokens[int(model(torch.as_tensor(ids)[None]).argmax(-1))]
    return grid_frame([[vocab.tokens[i] for i in row] for row in rows], attended), prediction


def answer_arrivals(grid: pd.DataFrame, answer: str) -> dict[int, int]:
    """{position: depth} at which ``answer`` first occupies each position that did not hold it in the input."""
    holds = grid.pivot(index="depth", columns="position", values="token") == answer
    arrivals = {}
    for position in holds.columns[~holds.iloc[0]]:
        depths = holds.index[holds[position]]
        if len(depths):
            arrivals[int(position)] = int(depths[0])
    return arrivals


def flow_run(index_path: Path, task: str, tokens: Sequence[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """The flow grid of a run's final checkpoint on ``tokens`` (default: the paper's example) and a summary.

    The summary gives the input's answer and hop count, the model's prediction, and where and when
    the answer arrives in the model's flow and in the idealised one.
    """
    index_path = Path(index_path)
    model, vocab, final = load_final_model(index_path)
    if vocab != list(get(task).vocabulary.tokens):
        raise IntegrityError(index_path.parent / final["path"], f"the model's vocabulary is not the {task} task's")
    tokens = list(tokens or example(task))
    grid, prediction = model_flow(model, task, tokens)
    ideal = ideal_rows(task, tokens, model.config.n_layer)
    answer = ideal[-1][-1]
    summary = {
        "task": task,
        "step": final["step"],
        "tokens": tokens,
        "answer": answer,
        "hops": hop_count(task, ideal),
        "prediction": prediction,
        "correct": prediction == answer,
        "answer_arrivals": answer_arrivals(grid, answer),
        "ideal_arrivals": answer_arrivals(grid_frame(ideal), answer),
    }
    return grid.assign(step=final["step"]), summary


def arrivals_text(arrivals: dict) -> str:
    """'8@L0 10@L1': the answer reached position 8 in layer 0, position 10 in layer 1 (by position)."""
    return " ".join(f"{position}@L{depth - 1}" for position, depth in sorted((int(p), d) for p, d in arrivals.items()))


def summary_table(summaries: Sequence[dict], seeds: Sequence[int]) -> pd.DataFrame:
    """One row per run: the input, its answer, the prediction, and where the answer travels in which layer."""
    rows = []
    for summary, seed in zip(summaries, seeds):
        rows.append(
            {
                "task": summary["task"],
                "seed": seed,
                "step": summary["step"],
                "input": " ".join(summary["tokens"]),
                "answer": summary["answer"],
                "hops": summary["hops"],
                "prediction": summary["prediction"],
                "correct": summary["correct"],
                "answer reaches (ours)": arrivals_text(summary["answer_arrivals"]),
                "answer reaches (ideal)": arrivals_text(summary["ideal_arrivals"]),
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------ figures

#: Cell colours: unchanged input symbol, a symbol moved here, the answer moved here.
FLOW_COLOURS = ListedColormap(["#ffffff", "#c6dbef", "#fdae6b"])


def plot_flow(grid: pd.DataFrame, answer: str, ax: plt.Axes, title: str) -> None:
    """Draw a flow grid: rows from the input (top) down through the layers, one column per position."""
    tokens = grid.pivot(index="depth", columns="position", values="token")
    moved = grid.pivot(index="depth", columns="position", values="changed").astype(bool)
    # a cell is coloured from the layer a symbol first arrives there on
    arrived = moved.cummax(axis=0).to_numpy()
    shade = np.where(arrived & (tokens.to_numpy() == answer), 2, np.where(arrived, 1, 0))
    ax.imshow(shade, cmap=FLOW_COLOURS, vmin=0, vmax=2, aspect="auto")
    for (depth, position), token in np.ndenumerate(tokens.to_numpy()):
        ax.text(position, depth, token, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(tokens.shape[1]))
    ax.set_yticks(range(tokens.shape[0]), ["input"] + [f"L{d}" for d in range(tokens.shape[0] - 1)])
    ax.set_xticks(np.arange(-0.5, tokens.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, tokens.shape[0]), minor=True)
    ax.grid(which="minor", color="#bbbbbb", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("position")
    ax.set_title(title, fontsize=9)


def plot_flows(
    grids: Sequence[pd.DataFrame], answers: Sequence[str], titles: Sequence[str], columns: int
) -> plt.Figure:
    """Several flow grids side by side, ``columns`` per row."""
    rows = -(-len(grids) // columns)
    depth = max(g["depth"].max() for g in grids) + 1
    fig, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 0.32 * depth * rows + 1.2), squeeze=False)
    for ax, grid, answer, title in zip(axes.flat, grids, answers, titles):
        plot_flow(grid, answer, ax, title)
    for ax in axes.flat[len(grids) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig
