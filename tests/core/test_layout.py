"""The package's architecture, read from its import statements: a core in layers, one package per study.

Layers, bottom to top: ``posym.registry`` (where studies are), ``posym.data``, ``posym.nn``, ``posym.training``,
``posym.lm``, ``posym.pipeline``, the studies (``posym.studies.<id>``), the command line (``posym.cli``).

- a module imports from its own layer or below, never upward (the core finds studies through the registry);
- a study imports the core and itself, never another study;
- nothing outside ``posym.training`` but the command line and paper C's toy trainer imports the trainer: analyses
  read checkpoints through ``posym.training.checkpoints``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "workflow" / "posym"
LAYERS = (
    "posym.registry",
    "posym.data",
    "posym.nn",
    "posym.training",
    "posym.lm",
    "posym.pipeline",
    "posym.studies",
    "posym.cli",
)
TRAINER = "posym.training.trainer"
MAY_IMPORT_THE_TRAINER = {"posym.cli", "posym.studies.c.training"}


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
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from posym.training import trainer`
    return {i for i in found if i == "posym" or i.startswith("posym.")}


def layer(module: str) -> int | None:
    """The layer of a module (its index in LAYERS); None for the package ``posym`` itself."""
    for index, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return index
    if module == "posym":
        return None
    raise ValueError(f"{module} is in no layer: add it to a sub-package of LAYERS")


def study_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["posym", "studies"] else None


def violations(modules: dict[str, set[str]]) -> list[str]:
    """What breaks the architecture in a map of module -> the modules it imports."""
    found = []
    for module, imported in sorted(modules.items()):
        own = layer(module)
        for other in sorted(imported):
            theirs = layer(other)
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} imports {other}, a layer above it ({LAYERS[theirs]} over {LAYERS[own]})")
            if study_of(module) and study_of(other) not in (None, study_of(module)):
                found.append(f"{module} imports another study: {other}")
            if other.startswith(TRAINER) and not module.startswith("posym.training") and module not in MAY_IMPORT_THE_TRAINER:
                found.append(f"{module} imports the trainer ({other}); read checkpoints through posym.training.checkpoints")
    return found


MODULES = {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_import_reader_sees_relative_and_absolute_imports():
    assert "posym.studies.a.tasks" in MODULES["posym.studies.a.length_generalisation"]  # from .tasks import get
    assert "posym.nn.gptj" in MODULES["posym.studies.a.length_generalisation"]  # from posym.nn.gptj import PosymModel
    assert "posym.nn.positions" in MODULES["posym.nn.gptj"]  # from posym.nn import positions
    assert "posym.training.splits" in MODULES["posym.cli"]  # a lazy import inside a function counts too


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer(module)  # raises for a module outside the layers


@pytest.mark.parametrize(
    "modules, expected",
    [
        ({"posym.data.tasks": {"posym.nn.gptj"}}, "a layer above it"),  # an upward import
        ({"posym.nn.architectures": {"posym.pipeline.study"}}, "a layer above it"),
        ({"posym.pipeline.config": {"posym.studies.a"}}, "a layer above it"),  # the core importing a study
        ({"posym.studies.c.our_heads": {"posym.studies.a.head_scores"}}, "imports another study"),
        ({"posym.studies.a.head_scores": {"posym.training.trainer.Trainer"}}, "imports the trainer"),
        ({"posym.lm.lens": {"posym.training.trainer"}}, "imports the trainer"),
    ],
)
def test_the_checker_finds_each_kind_of_violation(modules, expected):
    found = violations(modules)
    assert len(found) == 1 and expected in found[0], found


def test_the_checker_allows_imports_downward_within_a_study_and_of_checkpoints():
    modules = {
        "posym.cli": {"posym.training.trainer", "posym.studies.a.cli", "posym.registry"},
        "posym.studies.a.head_scores": {"posym.studies.a.tasks", "posym.training.checkpoints", "posym.data.files"},
        "posym.training.trainer": {"posym.training.checkpoints", "posym.nn.precision"},
        "posym.data.tasks": {"posym.registry"},
    }
    assert violations(modules) == []


def test_the_package_keeps_its_architecture():
    assert violations(MODULES) == []


def test_each_study_is_one_folder_with_its_parts():
    for folder in sorted(p for p in (PACKAGE / "studies").iterdir() if p.is_dir() and not p.name.startswith("_")):
        for part in ("__init__.py", "study.yaml", "schema.yaml", "rules.smk", "cli.py", "notebooks", "captions"):
            assert (folder / part).exists(), f"study {folder.name} has no {part}"
