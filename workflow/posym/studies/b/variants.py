"""Paper B's run grid: its catalogue of variants (``b.variants``: position encodings and attention, each named
overrides of ``b.model`` / ``b.train``), trained for the tasks that ``b.runs`` lists them under, every seed
(task-major: task, variant, seed). Light: the workflow reads it."""

from __future__ import annotations

from posym.pipeline import variants
from posym.pipeline.scale import Scale


def trained_scale(section: dict) -> Scale:
    """The size of the baseline that claims B-1 … B-5 judge (a variant may train longer: MLA's own steps)."""
    model, train = section["model"], section["train"]
    positions = max(section["data"][task]["length"] for task in section["tasks"])
    return Scale(model["n_layer"], model["n_head"], positions, train["steps"], train["batch_size"], len(section["seeds"]))


def run_grid(section: dict) -> variants.RunGrid:
    rows = [
        {"variant": v, "task": t, "seed": s}
        for t in section["tasks"]
        for v in section["runs"].get(t, [])
        for s in section["seeds"]
    ]
    return variants.RunGrid(dict(section["variants"]), {variants.OWN: rows})


def variant_settings(section: dict, variant: str) -> dict:
    """The effective settings of a variant of the catalogue (trained or not)."""
    return variants.resolve(section, section["variants"][variant])
