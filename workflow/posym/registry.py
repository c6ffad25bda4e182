"""Where studies are found: the bottom of posym's layers, so that any layer can look a study up by its id.

A study is a folder ``posym/studies/<id>/`` with a ``study.yaml``. The core never imports a study by name; it asks
here for the study's ids, its folder, or one of its optional modules (``architecture``, ``jobs``, ``cli``,
``config_checks``, its ``tasks`` package), which exist only where the study has them.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

STUDIES_DIR = Path(__file__).resolve().parent / "studies"


def known() -> tuple[str, ...]:
    """The ids of the study folders, in alphabetical order."""
    return tuple(sorted(p.parent.name for p in STUDIES_DIR.glob("*/study.yaml")))


def folder(study_id: str) -> Path:
    return STUDIES_DIR / study_id


def study_module(study_id: str, name: str | None = None) -> ModuleType | None:
    """The study's module ``name`` (its package itself for None), or None where the study has no such module."""
    if study_id not in known():
        raise ValueError(f"unknown study {study_id!r}; expected one of {list(known())}")
    module = f"posym.studies.{study_id}" + (f".{name}" if name else "")
    return importlib.import_module(module) if importlib.util.find_spec(module) is not None else None
