"""Paper B's run grid: its catalogue of variants (``b.variants``: position encodings and attention, each named
overrides of ``b.model`` / ``b.train``), trained for the tasks that ``b.runs`` lists them under, every seed
(task-major: task, variant, seed). Light: the workflow reads it."""

from __future__ import annotations

from posym.pipeline import variants


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
