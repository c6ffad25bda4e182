"""Paper B's tasks (spec §B2): ``distance.py`` (Task 1, position-sensitive) and ``count.py`` (Task 2,
position-agnostic), on the word vocabulary, padding and random streams they share (``words.py``)."""

from __future__ import annotations

from posym.data import tasks as _registry

from .words import WordTask

#: The paper's order of its tasks (Task 1, Task 2), for the figures and tables that show both.
PAPER_ORDER = ("distance", "count")


def get(name: str) -> WordTask:
    """Paper B's task ``name``."""
    return _registry.get(name, study="b")
