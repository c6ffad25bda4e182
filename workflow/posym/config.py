"""Configuration: defaults and validation against ``workflow/schemas/config.schema.yaml``.

The Snakefile calls :func:`validate` before building the DAG, so a bad value stops the run
before any job starts, with a message that names the key (``train.steps``) and says why.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable

import yaml
from jsonschema import Draft7Validator, validators

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every offending key."""


def load_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _with_defaults(validator_class):
    """A validator that fills in schema defaults while it walks the config."""
    check_properties = validator_class.VALIDATORS["properties"]

    def fill(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": fill})


_Filling = _with_defaults(Draft7Validator)


def _key(path: Iterable) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _describe(error) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unexpected = sorted(set(error.instance) - set(allowed))
        return "; ".join(
            f"config key '{_key([*error.absolute_path, name])}': unknown key (allowed here: {', '.join(allowed)})" for name in unexpected
        )
    return f"config key '{_key(error.absolute_path)}': {error.message}"


def validate(config: dict | None, sections: tuple[str, ...] | None = None) -> dict:
    """Return a copy of ``config`` with defaults filled in; raise ConfigError naming every bad key.

    ``sections`` limits the errors to keys under those top-level sections (``posym train`` checks
    data, model and train only, so an unrelated default cannot stop it).
    """
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a mapping of keys to values, got {type(config).__name__}")
    filled = copy.deepcopy(config)
    errors = sorted(_Filling(load_schema()).iter_errors(filled), key=lambda e: [str(p) for p in e.absolute_path])
    problems = [_describe(e) for e in errors]
    if not problems:
        problems = _cross_checks(filled)
    if sections is not None:
        problems = [p for p in problems if any(p.startswith(f"config key '{name}") for name in sections)]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return filled


def _cross_checks(c: dict) -> list[str]:
    """Constraints between keys that a JSON schema cannot express."""
    problems = []
    data, model, train = c["data"], c["model"], c["train"]
    if train["batch_size"] > data["train_samples"]:
        problems.append(f"config key 'train.batch_size': {train['batch_size']} exceeds data.train_samples={data['train_samples']}")
    if train["warmup_steps"] > train["steps"]:
        problems.append(f"config key 'train.warmup_steps': {train['warmup_steps']} exceeds train.steps={train['steps']}")
    if train["checkpoint_every"] > train["steps"]:
        problems.append(f"config key 'train.checkpoint_every': {train['checkpoint_every']} exceeds train.steps={train['steps']}")
    if train["eval_samples"] is not None and train["eval_samples"] > data["test_samples"]:
        problems.append(f"config key 'train.eval_samples': {train['eval_samples']} exceeds data.test_samples={data['test_samples']}")
    if c["length"]["samples"] > data["test_samples"]:
        problems.append(f"config key 'length.samples': {c['length']['samples']} exceeds data.test_samples={data['test_samples']}")
    if model["d_model"] % model["n_head"]:
        problems.append(f"config key 'model.n_head': {model['n_head']} does not divide model.d_model={model['d_model']}")
    else:
        head = model["d_model"] // model["n_head"]
        rotary = model["rotary_dim"]
        if rotary is not None and (rotary > head or rotary % 2):
            problems.append(f"config key 'model.rotary_dim': {rotary} must be even and at most the head size {head}")
    if c["geometry"]["layer"] >= model["n_layer"]:
        problems.append(f"config key 'geometry.layer': {c['geometry']['layer']} is not a layer of a {model['n_layer']}-layer model")
    theory = c["theory"]
    # Thm 3.1 needs 0 < theta < omega / (2 n0) with omega = 2 pi / |ALPH| for Retrieval to be exact.
    limit = math.pi / (theory["alphabet"] * theory["max_length"])
    if theory["theta_retrieval"] >= limit:
        problems.append(f"config key 'theory.theta_retrieval': {theory['theta_retrieval']} must be below pi / (alphabet * max_length) = {limit:.4g}")
    if c["discrepancy"]["samples"] > c["length"]["samples"]:
        problems.append(f"config key 'discrepancy.samples': {c['discrepancy']['samples']} exceeds length.samples={c['length']['samples']}")
    return problems


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
