"""Fig 1 (task schematics) and Table 2 (the LLM prompts) of paper A (spec §A1, §A10.2, §A11).

Fig 1 draws the paper's two 4-hop examples (spec §A1) and one real 4-hop sample of each task from posym's own
generators (§A2), every hop an arrow from the token that names it to the token it lands on. The paper's examples
use letters the generators never emit (capitals, ``I``) and a 3-token target window, so their chains are followed
here by the rules of §A1 on the strings (:func:`follow_chain`); the generated samples' chains come from
:func:`posym.tasks.chain_positions`, and the tests check that both agree.

Table 2 is rendered from :mod:`posym.probes`, the very templates and few-shot examples the LLM runner sends.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from . import probes, tasks
from .figures import TASK_PALETTE, to_markdown
from .files import write_csv, write_text

#: The Fig 1 examples of paper A (spec §A1), positions 0..8; the first three tokens are the target window.
PAPER_EXAMPLES = {
    "number": {"tokens": "C B A 1 4 1 3 2 1".split(), "window": 3},
    "letter": {"tokens": "C2 B1 A3 FA EC DE HF GD IG".split(), "window": 3},
}


def follow_chain(task: str, tokens: list[str]) -> list[int]:
    """Positions each hop lands on, from the last token (spec §A1).

    Number: an integer token sends the chain that many places left; a letter ends it. Letter: a (letter, letter)
    token sends it to the one earlier token whose first character is its second; a (letter, digit) token ends it.
    """
    chain, current = [], len(tokens) - 1
    while True:
        token = tokens[current]
        if task == "number":
            if not token.isdigit():
                return chain
            current -= int(token)
            if current < 0:
                raise ValueError(f"{tokens}: a hop jumps before the start")
        else:
            if token[1].isdigit():
                return chain
            matches = [i for i in range(current) if tokens[i][0] == token[1]]
            if len(matches) != 1:
                raise ValueError(f"{tokens}: {len(matches)} tokens start with {token[1]!r}")
            current = matches[0]
        chain.append(current)


def generated_example(task: str, seed: int = tasks.DEFAULT_BASE_SEED, hops: int = 4) -> dict:
    """The first ``hops``-hop sample of a small test split made with the generators of spec §A2, as
    ``{"tokens", "window", "chain"}`` (the chain from :func:`posym.tasks.chain_positions`)."""
    data = tasks.generate_split(task, "test", base_seed=seed, size=64)
    row = int(np.flatnonzero(data.hops == hops)[0])
    chain = tasks.chain_positions(data.select([row]))[0]
    return {
        "tokens": tasks.decode(task, data.tokens[row]),
        "window": tasks.WINDOW,
        "chain": [int(p) for p in chain if p >= 0],
    }


def figure1_examples(seed: int = tasks.DEFAULT_BASE_SEED) -> list[dict]:
    """The four Fig 1 panels: the paper's example and a generated sample of each task, with titles."""
    panels = []
    for task in tasks.TASKS:
        example = PAPER_EXAMPLES[task]
        chain = follow_chain(task, example["tokens"])
        panels.append(
            {"task": task, "title": f"{task.capitalize()} task: paper A's example", **example, "chain": chain}
        )
        title = f"{task.capitalize()} task: generated test sample (seed {seed})"
        panels.append({"task": task, "title": title, **generated_example(task, seed)})
    return panels


def plot_task_schematics(panels: list[dict]):
    """Fig 1: each sequence as a row of boxes (target window shaded, query outlined, answer filled) with one arrow
    per hop, numbered, from the token that names the hop to the token it lands on."""
    import matplotlib.pyplot as plt

    width = max(len(p["tokens"]) for p in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(0.62 * width + 1, 1.5 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        colour = TASK_PALETTE[panel["task"]]
        _draw_tokens(ax, panel["tokens"], panel["window"], panel["chain"][-1], colour)
        _draw_hops(ax, len(panel["tokens"]) - 1, panel["chain"], colour)
        ax.set_xlim(-0.6, width - 0.4)
        ax.set_ylim(-0.45, 2.0)
        ax.set_axis_off()
        answer = panel["tokens"][panel["chain"][-1]]
        ax.set_title(f"{panel['title']}: {len(panel['chain'])} hops, answer {answer}", fontsize=9, loc="left")
    fig.tight_layout()
    return fig


def _draw_tokens(ax, tokens: list[str], window: int, answer: int, colour: str) -> None:
    from matplotlib.patches import Rectangle

    query = len(tokens) - 1
    for i, token in enumerate(tokens):
        face = colour if i == answer else ("#eeeeee" if i < window else "white")
        edge, width = (colour, 2) if i == query else ("#888888", 0.8)
        ax.add_patch(Rectangle((i - 0.42, -0.35), 0.84, 0.7, facecolor=face, edgecolor=edge, lw=width))
        text_colour = "white" if i == answer else "black"
        ax.text(i, 0, token, ha="center", va="center", fontsize=9, color=text_colour, family="monospace")


def _draw_hops(ax, query: int, chain: list[int], colour: str) -> None:
    """One arc per hop, its number on its peak; longer hops arc higher (an arc3 curve peaks rad · chord / 2 above
    its chord)."""
    from matplotlib.patches import FancyArrowPatch

    for hop, (source, dest) in enumerate(zip([query] + chain[:-1], chain), start=1):
        height = 0.3 + 0.25 * np.log2(source - dest)
        style = {"arrowstyle": "-|>", "mutation_scale": 9, "color": colour, "lw": 1}
        bend = f"arc3,rad={2 * height / (source - dest)}"
        ax.add_patch(FancyArrowPatch((source, 0.4), (dest, 0.4), connectionstyle=bend, **style))
        label = {"ha": "center", "va": "center", "fontsize": 7, "color": colour}
        ax.text((source + dest) / 2, 0.4 + height, str(hop), bbox={"fc": "white", "ec": "none", "pad": 0.5}, **label)


def prompt_table() -> pd.DataFrame:
    """Table 2: per task, the prompt template (``{sequence}`` marks the probe) and its few-shot examples."""
    return pd.DataFrame(
        [
            {
                "task": task,
                "template": probes.PROMPTS[task],
                "few-shot examples": "\n".join(f"{text} → {answer}" for text, answer in probes.FEW_SHOT[task]),
            }
            for task in tasks.TASKS
        ]
    )


def save_prompt_table(frame: pd.DataFrame, csv: str | os.PathLike, markdown: str | os.PathLike) -> None:
    """The CSV keeps the text verbatim; the Markdown table writes line breaks as ``<br>`` to stay one row per task."""
    write_csv(csv, frame)
    write_text(markdown, to_markdown(frame.replace("\n", "<br>", regex=True)) + "\n")
