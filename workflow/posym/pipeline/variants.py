"""A study's run grid: its variants and the (variant, task, seed) runs of each run set.

A *variant* is a named set of overrides of a study's settings: for each part of its section (``model``,
``train``, ``final_checkpoint``, or a part of the study's own), the values that differ. :func:`resolve` is the one
place a variant's effective settings are made. The plain run is a variant too (:data:`MAIN`, no overrides), so
the core's data → train → evaluate rules have one ``{variant}`` level whatever the study.

A study lists its variants in its package's ``variants`` module, ``run_grid(section) -> RunGrid`` (paper B's
catalogue of position encodings, paper A's plain run and the factor grid of its fidelity study, paper C's arms);
a study without one has the plain run of its tasks × seeds (:func:`plain`). A *run set* is a named list of runs a
notebook reads in order (the study's own notebooks read the set ``""``; paper A's fidelity notebook the set
``fidelity``). Light on purpose: the workflow reads it when it parses.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from posym import registry

#: The plain run's variant: the study's settings as they are.
MAIN = "main"
#: The run set a study's own notebooks read.
OWN = ""


@dataclass(frozen=True)
class RunGrid:
    """Every variant of a study by name (its overrides) and every run set (rows of variant, task, seed and the
    labels a notebook shows beside them), each in the order a notebook reads it."""

    variants: dict[str, dict] = field(default_factory=dict)
    sets: dict[str, list[dict]] = field(default_factory=dict)

    def runs(self, run_set: str = OWN) -> list[dict]:
        return self.sets.get(run_set, [])

    def all_runs(self) -> list[dict]:
        """Every run of every set, each (variant, task, seed) once."""
        seen = {}
        for rows in self.sets.values():
            for row in rows:
                seen.setdefault((row["variant"], row["task"], row["seed"]), row)
        return list(seen.values())


def resolve(section: Mapping, overrides: Mapping) -> dict:
    """A variant's effective settings: the section with each overridden part's values over the section's (a part
    that is a mapping is merged one level deep; any other value replaces the section's)."""
    settings = dict(section)
    for part, values in overrides.items():
        base = section.get(part)
        settings[part] = {**base, **values} if isinstance(base, Mapping) and isinstance(values, Mapping) else values
    return settings


def plain(section: Mapping) -> RunGrid:
    """The plain run: one variant without overrides, trained on every task × seed (task-major)."""
    rows = [{"variant": MAIN, "task": t, "seed": s} for t, s in itertools.product(section.get("tasks", []), section.get("seeds", []))]
    return RunGrid({MAIN: {}}, {OWN: rows})


def factor_grid(factors: Mapping[str, Iterable], name) -> dict[str, dict]:
    """Variants from a grid of factors: ``factors`` maps "part.key" to its levels; each combination (in the order
    of the factors, the last varying fastest) is a variant named ``name(levels)`` (``levels``: key → level), whose
    overrides set each part's keys to the combination's levels."""
    keys = list(factors)
    grid = {}
    for combination in itertools.product(*(factors[k] for k in keys)):
        levels = dict(zip(keys, combination))
        overrides: dict[str, dict] = {}
        for key, level in levels.items():
            part, _, name_in_part = key.partition(".")
            overrides.setdefault(part, {})[name_in_part] = level
        grid[name({k.partition(".")[2]: v for k, v in levels.items()})] = overrides
    return grid


def run_grid(study_id: str, section: Mapping) -> RunGrid:
    """The study's run grid: its ``variants`` module's, else :func:`plain`."""
    module = registry.study_module(study_id, "variants")
    return module.run_grid(section) if module is not None and hasattr(module, "run_grid") else plain(section)


def trainers(grid: RunGrid, section: Mapping, parts: Iterable[str] = ("model", "train")) -> dict[str, str]:
    """Each variant's training variant: the first in the grid with the same settings of ``parts`` (itself when none
    before it has). Variants that differ only in what is done after training (the checkpoint the analyses read)
    train once."""
    parts, first, found = tuple(parts), {}, {}
    for name, overrides in grid.variants.items():
        settings = resolve(section, overrides)
        key = json.dumps({p: settings.get(p) for p in parts}, sort_keys=True)
        found[name] = first.setdefault(key, name)
    return found


def training_seeds(grid: RunGrid, trained_by: Mapping[str, str], variant: str, task: str) -> list[int]:
    """The seeds ``variant`` trains on ``task`` (``trained_by``: :func:`trainers`): those of every run of the grid,
    in any run set, whose training it is."""
    return sorted({run["seed"] for run in grid.all_runs() if run["task"] == task and trained_by[run["variant"]] == variant})
