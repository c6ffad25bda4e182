"""Configuration: defaults and validation against the schemas, and the digest that names a report version.

The configuration has a few shared keys (``studies``, ``threads``, ``report``; schema
``workflow/schemas/config.schema.yaml``) and one section per study (``a:`` for paper A), whose schema is the
study's own ``schema.yaml`` (its ``train`` section the core's block of train settings,
``workflow/schemas/train.schema.yaml``, expanded by :func:`posym.pipeline.study.section_schema`). Every default lives
in a schema. The Snakefile calls :func:`validate` before building the DAG, so a bad value stops the run before any
job starts, with a message that names the key (``a.train.steps``) and says why.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

import yaml
from jsonschema import Draft7Validator, validators

from posym import registry
from posym.pipeline import study as studies

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every offending key."""


def load_schema() -> dict:
    """The whole schema: the shared keys, and every known study's section under its id."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    ids = registry.known()
    schema["properties"]["studies"]["items"]["enum"] = list(ids)
    for study_id in ids:
        schema["properties"][study_id] = studies.section_schema(study_id)
    return schema


def study_defaults(study_id: str) -> dict:
    """A study's section with every default filled in (what an empty section means)."""
    return validate({"studies": [study_id]})[study_id]


#: A schema keyword of posym's: the property's default is a catalogue that a given value is merged over (deep,
#: as --configfile merges files) instead of replacing it, so a config can adjust or add entries and keep the rest.
MERGE_DEFAULT = "mergeDefault"


def _with_defaults(validator_class):
    """A validator that fills in schema defaults while it walks the config."""
    check_properties = validator_class.VALIDATORS["properties"]

    def fill(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
                elif sub.get(MERGE_DEFAULT) and isinstance(instance.get(name), dict):
                    # A catalogue (paper B's variants): what a config gives is merged over the default entries.
                    instance[name] = deep_merge(sub["default"], instance[name])
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": fill})


_Filling = _with_defaults(Draft7Validator)


def _key(path: Iterable) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _describe(error, schema: dict) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unexpected = sorted(set(error.instance) - set(allowed))
        return "; ".join(
            f"config key '{_key([*error.absolute_path, name])}': unknown key (allowed here: {', '.join(allowed)})"
            + _moved_hint(error.absolute_path, name, schema)
            for name in unexpected
        )
    return f"config key '{_key(error.absolute_path)}': {error.message}"


def _moved_hint(path, name: str, schema: dict) -> str:
    """For a top-level key that is a study's: where it lives now (configs written before studies had sections)."""
    if list(path):
        return ""
    owners = [sid for sid in registry.known() if name in schema["properties"][sid].get("properties", {})]
    return f"; study settings live in the study's section now, e.g. '{owners[0]}.{name}'" if owners else ""


def validate(config: dict | None, sections: tuple[str, ...] | None = None) -> dict:
    """Return a copy of ``config`` with defaults filled in; raise ConfigError naming every bad key.

    The sections of the studies in ``studies`` are filled in even when absent. ``sections`` limits the errors to
    keys under those dotted prefixes (``posym train`` checks ``a.data``, ``a.model`` and ``a.train`` only, so an
    unrelated setting cannot stop it).
    """
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a mapping of keys to values, got {type(config).__name__}")
    schema = load_schema()
    filled = copy.deepcopy(config)
    active = filled.get("studies", schema["properties"]["studies"]["default"])
    if isinstance(active, list):
        for study_id in active:
            if isinstance(study_id, str) and study_id in registry.known():
                filled.setdefault(study_id, {})
    errors = sorted(_Filling(schema).iter_errors(filled), key=lambda e: [str(p) for p in e.absolute_path])
    problems = [_describe(e, schema) for e in errors]
    if not problems:
        problems = _cross_checks(filled)
    if sections is not None:
        problems = [p for p in problems if any(p.startswith(f"config key '{name}") for name in sections)]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return filled


def _cross_checks(config: dict) -> list[str]:
    """Constraints between keys that a JSON schema cannot express: the core's on every section that trains
    models, then, for the studies that run, the study's own (``posym/studies/<id>/config_checks.py``, when it has
    one). Those may build the study's models to see what they refuse (paper B's imports torch: seconds on every
    dry run of the workflow), for runs that a study that is off never makes."""
    problems = []
    running = config.get("studies", [])
    for study_id in registry.known():
        if study_id not in config:
            continue
        section = config[study_id]
        problems += task_checks(section, study_id)
        if {"data", "model", "train"} <= set(section):
            problems += training_checks(section, study_id)
        if study_id not in running:
            continue
        checks = registry.study_module(study_id, "config_checks")
        if checks is not None:
            problems += checks.problems(section, study_id)
    return problems


def task_checks(section: dict, study_id: str) -> list[str]:
    """Every task a study's section names is one of the study's (a module of ``posym/studies/<id>/tasks/``)."""
    from posym.data import tasks

    own = sorted(name for name, task in tasks.registry().items() if task.study == study_id)
    return [
        f"config key '{study_id}.tasks.{i}': {name!r} is not a task of study {study_id} (its tasks: {', '.join(own) or 'none'})"
        for i, name in enumerate(section.get("tasks", []))
        if name not in own
    ]


def training_checks(section: dict, prefix: str) -> list[str]:
    """Checks of a section with ``data``, ``model`` and ``train``; keys are named ``<prefix>.<key>``."""
    data, model, train = section["data"], section["model"], section["train"]
    problems = []

    def problem(key: str, text: str) -> None:
        problems.append(f"config key '{prefix}.{key}': {text}")

    if train["batch_size"] > data["train_samples"]:
        problem("train.batch_size", f"{train['batch_size']} exceeds data.train_samples={data['train_samples']}")
    if train["warmup_steps"] > train["steps"]:
        problem("train.warmup_steps", f"{train['warmup_steps']} exceeds train.steps={train['steps']}")
    if train["checkpoint_every"] > train["steps"]:
        problem("train.checkpoint_every", f"{train['checkpoint_every']} exceeds train.steps={train['steps']}")
    if train["eval_samples"] is not None and train["eval_samples"] > data["test_samples"]:
        problem("train.eval_samples", f"{train['eval_samples']} exceeds data.test_samples={data['test_samples']}")
    if model["d_model"] % model["n_head"]:
        problem("model.n_head", f"{model['n_head']} does not divide model.d_model={model['d_model']}")
    else:
        head = model["d_model"] // model["n_head"]
        rotary = model.get("rotary_dim")
        if rotary is not None and (rotary > head or rotary % 2):
            problem("model.rotary_dim", f"{rotary} must be even and at most the head size {head}")
    return problems


def canonical(config: dict) -> dict:
    """What a report version's hash covers: the shared keys (``studies`` among them) and the sections of the
    studies that run, as validated (every default filled in). A section of a study that does not run is left out,
    so editing it names no new version."""
    shared = {k: v for k, v in config.items() if k not in registry.known()}
    return {**shared, **{s: config[s] for s in config["studies"]}}


def digest(obj: Any) -> str:
    """Short stable hash of a JSON-able value (used to name report versions)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


def load(paths: Iterable[str | Path]) -> dict:
    """Merge YAML files (later ones override earlier ones, as ``--configfile`` does) and validate."""
    merged: dict = {}
    for path in paths:
        merged = deep_merge(merged, yaml.safe_load(Path(path).read_text()) or {})
    return validate(merged)


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---------------------------------------------------------------------------------------- command lines


def parse_value(text: str):
    """A command-line value as YAML, except that 3e-3 is a number (YAML 1.1 wants 3.0e-3)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def section_settings(
    study_id: str,
    keys: tuple[str, ...],
    *,
    config_files: Iterable[str | Path] = (),
    settings: str | None = None,
    assignments: Iterable[str] = (),
) -> dict:
    """A study's section as a command sees it: schema defaults < config files (pipeline format) < ``settings``
    (JSON of the section's keys, what the rules pass) < ``KEY=VALUE`` assignments (keys within the section).

    Only the errors of ``keys`` (e.g. ``("scores",)``) count, so an unrelated setting cannot stop the command.
    """
    merged: dict = {}
    for path in config_files:
        merged = deep_merge(merged, (yaml.safe_load(Path(path).read_text()) or {}).get(study_id, {}))
    if settings:
        merged = deep_merge(merged, json.loads(settings))
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep:
            raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. train.steps=300")
        node = merged
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parse_value(value)
    return validate({"studies": [study_id], study_id: merged}, sections=tuple(f"{study_id}.{k}" for k in keys))[study_id]


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--settings`` and ``--set``: where a command's study settings come from."""
    parser.add_argument("--config", type=Path, action="append", help="YAML config file(s) in the pipeline's format")
    parser.add_argument("--settings", help="JSON of settings of the study's section (what the rules pass)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="one setting of the study's section, e.g. train.steps=300")


def command_settings(args: argparse.Namespace, study: str, *keys: str) -> dict:
    """The study's section as the command sees it (:func:`section_settings`)."""
    return section_settings(study, keys, config_files=args.config or (), settings=args.settings, assignments=args.set or ())
