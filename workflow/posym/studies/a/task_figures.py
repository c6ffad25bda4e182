"""Fig 1 (task schematics) and Table 2 (the LLM prompts) of paper A (spec §A1, §A10.2, §A11).

Fig 1 draws the paper's two 4-hop examples (spec §A1) and one real 4-hop sample of each task from posym's own
generators (§A2), every hop an arrow from the token that names it to the token it lands on. The paper's examples
use letters the generators never emit (capitals, ``I``) and a 3-token target window, so their chains are followed
here by the rules of §A1 on the strings (each task's ``follow_example``); the generated samples' chains come from
the task's ``chain_positions``, and the tests check that both agree.

Table 2 is rendered from the tasks' probe prompts, the very templates and few-shot examples the LLM runner sends.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from posym.pipeline.figures import to_markdown
from posym.data.files import write_csv, write_text

from .tasks import PAPER_ORDER, get, palette
from .tasks.multihop import WINDOW


def generated_example(task: str, seed: int, hops: int = 4) -> dict:
    """The first ``hops``-hop sample of a small test split made with the generators of spec §A2 from dataset seed
    ``seed``, as ``{"tokens", "window", "chain"}``."""
    generator = get(task)
    data = generator.generate_split("test", seed, size=64)
    row = int(np.flatnonzero(data.hops == hops)[0])
    chain = generator.chain_positions(data.select([row]))[0]
    return {
        "tokens": generator.vocabulary.decode(data.tokens[row]),
        "window": WINDOW,
        "chain": [int(p) for p in chain if p >= 0],
    }


def figure1_examples(seed: int) -> list[dict]:
    """The four Fig 1 panels: the paper's example and a generated sample of each task, with titles."""
    panels = []
    for task in PAPER_ORDER:
        example = get(task).fig1_example
        chain = get(task).follow_example(example["tokens"])
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
        colour = palette()[panel["task"]]
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
                "template": get(task).probe_prompt,
                "few-shot examples": "\n".join(f"{text} → {answer}" for text, answer in get(task).probe_examples),
            }
            for task in PAPER_ORDER
        ]
    )


def save_prompt_table(frame: pd.DataFrame, output: dict[str, str | os.PathLike]) -> None:
    """The CSV keeps the text verbatim; the Markdown table writes line breaks as ``<br>`` to stay one row per task."""
    write_csv(output["csv"], frame)
    write_text(output["md"], to_markdown(frame.replace("\n", "<br>", regex=True)) + "\n")
