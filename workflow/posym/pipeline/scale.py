"""The size a study's claims were judged at, beside the paper's: layers × heads, positions, steps × batch, seeds.

A verdict on a 2-layer model trained for 60 steps says something else than one at the paper's size, so every
report page and every claim row says which it was (:func:`line`). A study gives its trained models' size from its
configuration section (``variants.trained_scale``) and the paper's (``paper.SCALE``); :func:`of_study` reads both.
Only claims decided on models this run trained have a size; the others say what they were judged on
(:data:`JUDGED_ON`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

from posym import registry


@dataclass(frozen=True)
class Scale:
    layers: int
    heads: int
    positions: int
    steps: int
    batch: int
    seeds: int

    def text(self) -> str:
        plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
        return (
            f"{plural(self.layers, 'layer')} × {plural(self.heads, 'head')}, {plural(self.positions, 'position')},"
            f" {self.steps} steps × batch {self.batch}, {plural(self.seeds, 'seed')}"
        )


#: The dimensions of a size, as :func:`below` names them.
DIMENSIONS = ("layers", "heads", "positions", "steps", "batch", "seeds")

#: What a claim of each kind of evidence other than "trained" was judged on (posym.pipeline.claims.EVIDENCE).
JUDGED_ON = {
    "released": "the authors' released data",
    "theorem": "exact computation, no training",
    "code": "exact computation, no training",
    "substitute": "a substitute model",
}


def below(ours: Scale, paper: Scale) -> list[str]:
    """The dimensions in which ``ours`` is smaller than the paper's."""
    return [name for name in DIMENSIONS if getattr(ours, name) < getattr(paper, name)]


def line(ours: Scale, paper: Scale) -> str:
    """"judged at 2 layers × 1 head, …; the paper 12 layers × 1 head, …: below the paper's size in layers, steps"."""
    smaller = below(ours, paper)
    verdict = f"below the paper's size in {', '.join(smaller)}" if smaller else "at or above the paper's size"
    return f"judged at {ours.text()}; the paper {paper.text()}: {verdict}"


def of_study(study_id: str, section: Mapping) -> dict | None:
    """The study's trained size and the paper's as JSON (``ours``, ``paper``, ``below``; ``line`` for the page,
    ``short`` for a claim row), or None where the study states no size (no ``variants.trained_scale`` or no
    ``paper.SCALE``)."""
    variants, paper = registry.study_module(study_id, "variants"), registry.study_module(study_id, "paper")
    if variants is None or not hasattr(variants, "trained_scale") or not hasattr(paper, "SCALE"):
        return None
    ours = variants.trained_scale(section)
    return {
        "ours": asdict(ours), "paper": asdict(paper.SCALE), "below": below(ours, paper.SCALE), "line": line(ours, paper.SCALE),
        "short": short(ours, paper.SCALE),
    }  # fmt: skip


def short(ours: Scale, paper: Scale) -> str:
    """A claim row's size: ours, and the dimensions below the paper's ("…, 1 seed (below the paper's in layers)")."""
    smaller = below(ours, paper)
    where = f"below the paper's in {', '.join(smaller)}" if smaller else "the paper's size or more"
    return f"{ours.text()} ({where})"
