"""The package's architecture, read from its import statements: a shared core, one package per study.

- the core (posym.*, outside posym.studies) imports no study: it finds studies by their folders;
- a study imports the core and itself, never another study;
- nothing but the command line (posym.cli), the trainer itself and paper C's toy trainer (which shares its device,
  precision and per-member clipping) imports the trainer: analyses read checkpoints through posym.checkpoints.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "posym"
TRAINER = "posym.train"
MAY_IMPORT_THE_TRAINER = {"posym.cli", "posym.train", "posym.studies.c.training"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved), at any depth of the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from posym import train`
    return {i for i in found if i == "posym" or i.startswith("posym.")}


def study_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["posym", "studies"] else None


MODULES = {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_import_reader_sees_relative_and_absolute_imports():
    assert "posym.studies.a.tasks" in MODULES["posym.studies.a.length_generalisation"]  # from .tasks import get
    assert "posym.model" in MODULES["posym.studies.a.length_generalisation"]  # from posym.model import PosymModel
    assert "posym.positions" in MODULES["posym.model"]  # from . import positions
    assert TRAINER in MODULES["posym.cli"]  # a lazy import inside a function counts too


@pytest.mark.parametrize("module", sorted(m for m in MODULES if study_of(m) is None))
def test_the_core_imports_no_study(module):
    assert not [i for i in MODULES[module] if study_of(i)], f"{module} imports a study"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if study_of(m)))
def test_a_study_imports_no_other_study(module):
    others = [i for i in MODULES[module] if study_of(i) not in (None, study_of(module))]
    assert not others, f"{module} imports {others}"


@pytest.mark.parametrize("module", sorted(set(MODULES) - MAY_IMPORT_THE_TRAINER))
def test_nothing_but_the_command_line_imports_the_trainer(module):
    assert TRAINER not in MODULES[module], f"{module} imports the trainer"


def test_each_study_is_one_folder_with_its_parts():
    for folder in sorted(p for p in (PACKAGE / "studies").iterdir() if p.is_dir() and not p.name.startswith("_")):
        for part in ("__init__.py", "study.yaml", "schema.yaml", "rules.smk", "cli.py", "notebooks", "captions"):
            assert (folder / part).exists(), f"study {folder.name} has no {part}"
