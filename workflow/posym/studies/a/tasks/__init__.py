"""Paper A's tasks: ``number.py`` and ``letter.py`` on the multi-hop machinery they share (``multihop.py``)."""

from __future__ import annotations

from posym.data import tasks as _registry

from .multihop import MultiHopTask

#: The paper's order of its tasks, for the figures and tables that show both whatever the config runs.
PAPER_ORDER = ("number", "letter")


def get(name: str) -> MultiHopTask:
    """Paper A's task ``name``."""
    return _registry.get(name, study="a")


def palette() -> dict[str, str]:
    """The colour of each task in every figure."""
    return {name: get(name).colour for name in PAPER_ORDER}
