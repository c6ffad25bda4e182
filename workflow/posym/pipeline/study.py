"""Studies: what the core knows of a study folder, and the plan of its notebooks and report items.

A study is a folder ``posym/studies/<id>/`` with a ``study.yaml``: its name and source, its notebooks (the
files each reads, the config values it is given, the conditions under which it applies) and the table of its
report items (every table and figure of the paper, posym's own additions) and claims. From that table the
workflow generates the notebook rules and the ``snakemake --report`` entries, and posym's report its
checklist, its sections and its manifest (:func:`Study.plan`). The format is checked against
``workflow/schemas/study.schema.yaml`` when a study is loaded.

The core reads the folder, and a study's run grid from its package's light ``variants`` module
(posym.pipeline.variants), which alone knows the study's variants and run sets.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator

from posym import registry
from posym.pipeline import claims as claims_module
from posym.pipeline import scale
from posym.pipeline import paths, variants

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "study.schema.yaml"

#: The files of an output kind, by extension: a figure is written as PNG and SVG, a table as CSV and Markdown.
#: The first is the one the reports show.
OUTPUT_FILES = {"figure": ("png", "svg"), "table": ("csv", "md")}


class StudyError(ValueError):
    """A study folder is malformed (its study.yaml breaks the format, a caption or notebook is missing)."""


#: A schema keyword of posym's: the section is one of the core's blocks of settings (``block: train`` is
#: ``workflow/schemas/train.schema.yaml``), with the study's defaults, notes and keys of its own
#: (:func:`expand_blocks`).
BLOCK = "block"
BLOCKS_DIR = SCHEMA_PATH.parent
#: What a reference to a block holds, and what its entry for a key of the block may hold.
REFERENCE_KEYS = (BLOCK, "description", "properties")
BLOCK_ENTRY_KEYS = ("default", "note")


def section_schema(study_id: str) -> dict:
    """The JSON schema of a study's config section (``posym/studies/<id>/schema.yaml``, its references to the
    core's blocks expanded), to be nested in the configuration's schema (without its own ``$schema``, which would
    make a validator start afresh there)."""
    schema = yaml.safe_load((registry.folder(study_id) / "schema.yaml").read_text())
    schema.pop("$schema", None)
    return expand_blocks(schema, study_id)


def expand_blocks(schema: dict, study_id: str, key: str = "") -> dict:
    """``schema`` with every section that says ``block: <name>`` expanded into the block's schema
    (``workflow/schemas/<name>.schema.yaml``): the keys the section lists, in its order (a key of the block with
    the study's default and the block's description followed by the study's note; a key of the study's own as
    given), then the keys of the block it leaves out, with the block's defaults. The section's description, if it
    gives one, replaces the block's.

    A section's entry for a key of the block holds ``default`` and ``note`` only: the bounds are the block's, the
    same in every study. Anything else (an unknown key in the reference, a default or a note for a key the block
    does not have, a key of the block without a default in either) is a :class:`StudyError` that names the study
    and the key.
    """
    if BLOCK in schema:
        return _expand_block(schema, study_id, key)
    if not isinstance(schema.get("properties"), dict):
        return schema
    properties = {
        name: expand_blocks(sub, study_id, f"{key}.{name}".lstrip(".")) if isinstance(sub, dict) else sub
        for name, sub in schema["properties"].items()
    }
    return {**schema, "properties": properties}


def _expand_block(reference: dict, study_id: str, key: str) -> dict:
    name = reference[BLOCK]
    path = BLOCKS_DIR / f"{name}.schema.yaml"
    where = f"study {study_id} ({registry.folder(study_id) / 'schema.yaml'})"
    if not isinstance(name, str) or not name or not path.is_file():
        known = sorted(p.name.removesuffix(".schema.yaml") for p in BLOCKS_DIR.glob("*.schema.yaml"))
        raise StudyError(f"{where}: '{key}' refers to block {name!r}, which is not one of {known} ({BLOCKS_DIR})")
    unknown = [k for k in reference if k not in REFERENCE_KEYS]
    if unknown:
        raise StudyError(
            f"{where}: '{key}.{unknown[0]}': unknown key in a reference to block {name} (allowed: "
            f"{', '.join(REFERENCE_KEYS)}; the type and bounds are the block's, {path.name})"
        )
    block = yaml.safe_load(path.read_text())
    block.pop("$schema", None)
    shared = block["properties"]
    given = reference.get("properties") or {}
    if not isinstance(given, dict):
        raise StudyError(f"{where}: '{key}.properties' must be a mapping of keys, got {type(given).__name__}")
    properties = {}
    for prop, entry in given.items():
        here = f"'{key}.{prop}'"
        if not isinstance(entry, dict):
            raise StudyError(f"{where}: {here} must be a mapping, got {entry!r}")
        if prop in shared:
            extra = sorted(set(entry) - set(BLOCK_ENTRY_KEYS))
            if extra:
                raise StudyError(
                    f"{where}: {here} is a key of block {name}: give its default and a note only, not "
                    f"{', '.join(extra)} (its type, bounds and description are the block's, {path.name})"
                )
            sub = copy.deepcopy(shared[prop])
            if "default" in entry:
                sub["default"] = entry["default"]
            if entry.get("note"):
                sub["description"] = f"{sub['description'].rstrip()} {str(entry['note']).strip()}"
            properties[prop] = sub
        elif "description" not in entry:
            raise StudyError(
                f"{where}: {here} is not a key of block {name} (its keys: {', '.join(shared)}): a default or a note "
                f"is for a key of the block, and a key of the study's own is a schema with a description"
            )
        elif "note" in entry:
            raise StudyError(
                f"{where}: {here} is a key of the study's own, not of block {name}: a note is for a key of the block "
                f"(put it in the description)"
            )
        else:
            properties[prop] = entry
    for prop, sub in shared.items():
        if prop not in properties:
            properties[prop] = copy.deepcopy(sub)
        if "default" not in properties[prop]:
            raise StudyError(
                f"{where}: '{key}.{prop}' has no default: block {name} has none for it, so the study gives one "
                f"({prop}: {{default: ...}})"
            )
    expanded = {k: copy.deepcopy(v) for k, v in block.items() if k != "properties"}
    if "description" in reference:
        expanded["description"] = reference["description"]
    return {**expanded, "properties": properties}


def slug(item_id: str) -> str:
    """An item's key in file names and page anchors: 'Fig 3A/B' -> 'fig3ab'."""
    return re.sub(r"[^a-z0-9]+", "", item_id.lower())


# ------------------------------------------------------------------------------------------------ conditions


def _lookup(section: dict, key: str) -> Any:
    node = section
    for part in key.split("."):
        node = node[part]
    return node


def _holds(value: Any, allowed: Any) -> bool:
    """``allowed`` is "set" (any value but null) or a list of values; a list-valued setting holds if it names one."""
    if allowed == "set":
        return value is not None
    values = value if isinstance(value, list) else [value]
    return any(v in allowed for v in values)


def condition_holds(condition: dict | list, section: dict) -> bool:
    """A mapping of setting -> allowed values holds when every entry does; a list of mappings when one does."""
    if isinstance(condition, list):
        return any(condition_holds(c, section) for c in condition)
    return all(_holds(_lookup(section, key), allowed) for key, allowed in condition.items())


# --------------------------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Output:
    """A figure or table a notebook writes, ``results/<study>/<kind>s/<name>.<ext>`` for each of its extensions."""

    study: str
    name: str
    kind: str  # "figure" or "table"
    caption: Path

    def files(self) -> dict[str, str]:
        return {ext: f"{paths.RESULTS}/{self.study}/{self.kind}s/{self.name}.{ext}" for ext in OUTPUT_FILES[self.kind]}

    def shown(self) -> str:
        """The file the reports show (PNG, CSV)."""
        return self.files()[OUTPUT_FILES[self.kind][0]]


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    notebook: str
    category: str
    outputs: tuple[Output, ...]
    claim: str | None = None
    paper: bool = True  # a table or figure of the paper (else one of posym's own additions)
    ours_when: dict | list | None = None  # the settings under which it shows posym's values (else the paper's only)

    @property
    def key(self) -> str:
        return slug(self.id)


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    paper: str
    notebook: str
    category: str
    table: Output
    evidence: tuple[str, ...]  # the kinds of evidence that decide it (posym.pipeline.claims.EVIDENCE)
    needs: str = ""  # what would make it testable where it is not, and which configuration supplies it


@dataclass(frozen=True)
class Notebook:
    name: str
    source: Path
    inputs: dict = field(default_factory=dict)
    config: tuple[str, ...] = ()
    requires: dict = field(default_factory=dict)
    because: str = ""
    studies: tuple[str, ...] = ()  # other studies whose results it reads: it applies only when they run too


class Study:
    """A study folder, read from its ``study.yaml`` (checked against the format and against its folder)."""

    def __init__(self, study_id: str):
        self.id = study_id
        self.folder = registry.folder(study_id)
        path = self.folder / "study.yaml"
        if not path.is_file():
            raise StudyError(f"unknown study {study_id!r}: no {path}")
        table = yaml.safe_load(path.read_text())
        errors = sorted(Draft7Validator(yaml.safe_load(SCHEMA_PATH.read_text())).iter_errors(table), key=str)
        if errors:
            where = lambda e: ".".join(map(str, e.absolute_path)) or "<top level>"  # noqa: E731
            raise StudyError(f"{path}: " + "; ".join(f"{where(e)}: {e.message}" for e in errors))
        self.name, self.title, self.source = table["name"], table["title"], table["source"]
        self.provenance = table.get("provenance", {})
        self.paths = table.get("paths", {})
        self.rules = self.folder / "rules.smk"
        self.notebooks = {
            name: Notebook(
                name,
                self.folder / "notebooks" / f"{name}.ipynb",
                spec.get("inputs", {}),
                tuple(spec.get("config", ())),
                spec.get("requires", {}),
                spec.get("because", ""),
                tuple(spec.get("studies", ())),
            )
            for name, spec in table["notebooks"].items()
        }
        self.items = [
            Item(
                row["id"],
                row["title"],
                row["notebook"],
                row["category"],
                tuple(self._output(o) for o in row["outputs"]),
                row.get("claim"),
                row.get("paper", True),
                row.get("ours_when"),
            )
            for row in table["items"]
        ]
        self.claims = [
            Claim(
                row["id"],
                row["statement"],
                row["paper"],
                row["notebook"],
                row["category"],
                self._output({"table": row["table"], **({"caption": row["caption"]} if "caption" in row else {})}),
                tuple(row["evidence"]),
                row.get("needs", ""),
            )
            for row in table["claims"]
        ]
        self._check()

    def _output(self, spec: dict) -> Output:
        kind = "figure" if "figure" in spec else "table"
        name = spec[kind]
        return Output(self.id, name, kind, self.folder / "captions" / spec.get("caption", f"{name}.rst"))

    def _check(self) -> None:
        problems = []
        for name, spec in self.notebooks.items():
            for parameter, value in spec.inputs.items():
                reference = value if isinstance(value, str) else value.get("path", "")
                owner, _, key = reference.partition(":")
                if key and owner == self.id and key not in self.paths:
                    problems.append(f"notebook {name}: input {parameter} names {reference!r}, which is not under paths")
        for row in [*self.items, *self.claims]:
            if row.notebook not in self.notebooks:
                problems.append(f"{row.id}: no notebook {row.notebook!r} in notebooks")
        for claim in self.claims:
            if unknown := claims_module.unknown_kinds(claim.evidence):
                problems.append(f"claim {claim.id}: unknown kind of evidence {', '.join(map(repr, unknown))} (known: {', '.join(claims_module.EVIDENCE)})")
        claims = {c.id for c in self.claims}
        problems += [f"{i.id}: no claim {i.claim!r} in claims" for i in self.items if i.claim and i.claim not in claims]
        outputs = [o for o in self.outputs()]
        for output in outputs:
            if not output.caption.is_file():
                problems.append(f"{output.name}: no caption {output.caption}")
        files = [f for o in outputs for f in o.files().values()]
        problems += [f"{f} is written twice" for f in sorted({f for f in files if files.count(f) > 1})]
        ids = [i.id for i in self.items] + [c.id for c in self.claims]
        problems += [f"{i} is listed twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
        for notebook in self.notebooks.values():
            if not notebook.source.is_file():
                problems.append(f"notebook {notebook.name}: no {notebook.source}")
        if problems:
            raise StudyError(f"{self.folder / 'study.yaml'}: " + "; ".join(problems))

    # --------------------------------------------------------------------------------------------- outputs

    def report_entries(self, notebook: str | None = None) -> list[tuple[Output, str, str]]:
        """(output, category, label) of every output (of one notebook), in table order; the label is the item's id
        or "Claim <id>"."""
        rows = [(i, o, i.id) for i in self.items for o in i.outputs] + [(c, c.table, f"Claim {c.id}") for c in self.claims]
        return [(o, row.category, label) for row, o, label in rows if notebook in (None, row.notebook)]

    def outputs(self, notebook: str | None = None) -> list[Output]:
        """Every output (of one notebook), in table order."""
        return [output for output, _, _ in self.report_entries(notebook)]

    def results(self, path: str) -> str:
        return f"{paths.RESULTS}/{self.id}/{path}"

    def executed(self, notebook: str) -> str:
        """Where the executed copy of a notebook goes."""
        return self.results(f"notebooks/{notebook}.ipynb")

    # ------------------------------------------------------------------------------------------ conditions

    def unmet(self, notebook: str, config: dict) -> str | None:
        """Why a notebook (and every item it renders) does not apply to ``config``; None when it does."""
        spec = self.notebooks[notebook]
        section = config[self.id]
        missing = [other for other in spec.studies if other not in config.get("studies", ())]
        if missing:
            reason = f"it reads study {', '.join(missing)}'s results and studies is {config.get('studies')!r}"
            return f"not applicable to this configuration: {reason}" + (f" ({spec.because})" if spec.because else "")
        for key, allowed in spec.requires.items():
            if not _holds(_lookup(section, key), allowed):
                scope = "model" if key.startswith("model.") else "configuration"
                needs = allowed if allowed == "set" else " or ".join(map(str, allowed))
                reason = f"{self.id}.{key} is {_lookup(section, key)!r}, not {needs}"
                return f"not applicable to this {scope}: {reason}" + (f" ({spec.because})" if spec.because else "")
        return None

    def runnable(self, config: dict) -> list[Notebook]:
        return [nb for nb in self.notebooks.values() if self.unmet(nb.name, config) is None]

    # ----------------------------------------------------------------------------------------------- inputs

    def grid(self, config: dict) -> variants.RunGrid:
        """The study's run grid (posym.pipeline.variants): its variants and run sets."""
        return variants.run_grid(self.id, config[self.id])

    def runs(self, config: dict, run_set: str = variants.OWN) -> list[dict]:
        """The runs of a run set (the study's own by default), each a mapping of wildcard to value (and the labels
        a notebook shows beside them), in the order a notebook reads them."""
        return self.grid(config).runs(run_set)

    def path(self, name: str) -> str:
        """The pattern of one of the study's named files (study.yaml's ``paths``), as its rules and other studies
        read it: ``load("a").path("scores")`` is ``results/a/scores/{variant}/{task}/seed{seed}/scores.csv``."""
        if name not in self.paths:
            raise StudyError(f"study {self.id} names no path {name!r} (its paths: {', '.join(self.paths)})")
        return paths.study_path(self.id, self.paths[name])

    def resolve(self, path: str) -> str:
        """A study.yaml path as a pattern: ``<id>:<name>`` (a study's named path), ``core:<name>`` (the core's:
        :data:`posym.pipeline.paths.NAMED`) or a path under the study's results folder."""
        owner, _, name = path.partition(":")
        if name and owner in registry.known():
            return load(owner).path(name)
        return paths.study_path(self.id, path)

    def expand(self, pattern: str, config: dict, runs: str = variants.OWN) -> list[str] | str:
        """A study.yaml path (:meth:`resolve`): one path per run of the run set ``runs`` when it names {variant}
        or {task} (each once), one per seed when it names {seed} only, else a single path."""
        path = self.resolve(pattern)
        if _per_run(path):
            return list(dict.fromkeys(path.format(**run) for run in self.runs(config, runs)))
        if "{seed}" in path:
            return [path.format(seed=s) for s in config[self.id].get("seeds", [])]
        return path

    def notebook_inputs(self, notebook: str, config: dict) -> dict[str, list[str] | str]:
        """A notebook's named input files that apply to ``config`` (``wall_times`` and ``performance`` inputs are
        left to the workflow, which knows which jobs ran and which results are committed: :meth:`workflow_inputs`)."""
        inputs = {}
        for name, spec in self.notebooks[notebook].inputs.items():
            if isinstance(spec, str):
                inputs[name] = self.expand(spec, config)
            elif "path" in spec and condition_holds(spec.get("when", {}), config[self.id]):
                inputs[name] = self.expand(spec["path"], config, spec.get("runs", variants.OWN))
        return inputs

    def workflow_inputs(self, notebook: str, kind: str) -> list[str]:
        """The names of a notebook's inputs of ``kind``: ``wall_times`` (the benchmark files of the study's jobs) or
        ``performance`` (the benchmark results committed with the code, benchmarks/results/*.json)."""
        return [name for name, spec in self.notebooks[notebook].inputs.items() if isinstance(spec, dict) and spec.get(kind)]

    def analysis_files(self, config: dict) -> list[str]:
        """Every file the runnable notebooks read: the outputs of the study's jobs."""
        files = []
        for notebook in self.runnable(config):
            for value in self.notebook_inputs(notebook.name, config).values():
                files += [value] if isinstance(value, str) else value
        return list(dict.fromkeys(files))

    def provenance_files(self, kind: str, config: dict) -> list[str]:
        """The files of ``kind`` (``datasets``: dataset records, ``checkpoints``: checkpoint indexes) the manifest
        records, as the table's ``provenance`` lists them."""
        files = []
        for pattern in self.provenance.get(kind, []):
            value = self.expand(pattern, config)
            files += [value] if isinstance(value, str) else value
        return files

    def notebook_parameters(self, notebook: str, config: dict) -> dict:
        """The config values a notebook is given: tasks and seeds; for each run set its per-run inputs read, its
        runs in the order of those inputs (``runs`` for the study's own, ``runs_<set>`` for another); and those
        its ``config`` list names."""
        section = config[self.id]
        values = {key: section[key] for key in ("tasks", "seeds") if key in section}
        for run_set in self._run_sets_read(notebook):
            values[f"runs_{run_set}" if run_set else "runs"] = self.runs(config, run_set)
        values.update({key.split(".")[-1]: _lookup(section, key) for key in self.notebooks[notebook].config})
        return values

    def _run_sets_read(self, notebook: str) -> list[str]:
        sets = []
        for spec in self.notebooks[notebook].inputs.values():
            path, run_set = (spec, variants.OWN) if isinstance(spec, str) else (spec.get("path", ""), spec.get("runs", variants.OWN))
            if _per_run(self.resolve(path)) and run_set not in sets:
                sets.append(run_set)
        return sets

    # ------------------------------------------------------------------------------------------------ plan

    def plan(self, config: dict) -> dict:
        """What the report shows of this study, as JSON: every item and claim, applicable or not (and why), with
        its files and captions, and the executed notebooks."""

        def files(outputs):
            return [{"kind": o.kind, "name": o.name, "files": o.files(), "caption": str(o.caption)} for o in outputs]

        def status(notebook):
            reason = self.unmet(notebook, config)
            return {"applicable": reason is None, "reason": reason or ""}

        return {
            "id": self.id,
            "name": self.name,
            "title": self.title,
            "source": self.source,
            "items": [
                {"id": i.id, "key": i.key, "title": i.title, "category": i.category, "claim": i.claim,
                 "paper": i.paper, "notebook": i.notebook, "outputs": files(i.outputs), **status(i.notebook),
                 "published_only": i.ours_when is not None and not condition_holds(i.ours_when, config[self.id])}
                for i in self.items
            ],  # fmt: skip
            "claims": [
                {"id": c.id, "statement": c.statement, "paper": c.paper, "evidence": list(c.evidence), "needs": c.needs,
                 "notebook": c.notebook, "outputs": files([c.table]), **status(c.notebook)}
                for c in self.claims
            ],
            "notebooks": [self.executed(nb.name) for nb in self.runnable(config)],
            "scale": scale.of_study(self.id, config[self.id]),
        }


def _per_run(path: str) -> bool:
    return "{variant}" in path or "{task}" in path


@functools.cache
def load(study_id: str) -> Study:
    return Study(study_id)
