"""Constraints between keys of paper B's config section that its schema cannot express: the variants' settings
(checked as the model and train settings they override) and the grid of runs."""

from __future__ import annotations

from jsonschema import Draft7Validator

from posym.pipeline import study as studies
from posym.pipeline import variants as run_grid
from . import architecture
from .tasks.words import VOCAB_SIZE
from .variants import variant_settings


def problems(section: dict, prefix: str) -> list[str]:
    """What is wrong with the section, each naming its key as ``<prefix>.<key>``."""
    found = []

    def problem(key: str, text: str) -> None:
        found.append(f"config key '{prefix}.{key}': {text}")

    schema = studies.section_schema("b")["properties"]
    trained = {variant for task in section["tasks"] for variant in section["runs"].get(task, [])}
    for variant, overrides in section["variants"].items():
        for part in ("model", "train"):
            known = schema[part]["properties"]
            for key in sorted(set(overrides.get(part, {})) - set(known)):
                problem(f"variants.{variant}.{part}.{key}", f"unknown {part} setting (known: {', '.join(known)})")
            known_overrides = {part: {k: v for k, v in overrides.get(part, {}).items() if k in known}}
            merged = run_grid.resolve(section, known_overrides)[part]
            for error in Draft7Validator(schema[part]).iter_errors(merged):
                key = ".".join(map(str, error.absolute_path))
                source = f"variants.{variant}.{part}.{key}" if key.split(".")[0] in overrides.get(part, {}) else f"{part}.{key}"
                problem(source, error.message)
        if found or variant not in trained:
            continue  # a catalogue entry that is not trained need not fit this model (partial_rope_3 on 2 heads)
        try:  # what the encoder itself refuses (a partial_rope without rope_heads, MLA with an attending scheme, ...)
            architecture.model_config(VOCAB_SIZE, variant_settings(section, variant)["model"])
        except ValueError as err:
            problem(f"variants.{variant}.model", str(err))
        max_len = variant_settings(section, variant)["model"]["max_len"]
        for task in section["tasks"]:
            length = section["data"].get(task, {}).get("length", max_len)
            if variant in section["runs"].get(task, []) and length > max_len:
                problem(f"variants.{variant}.model.max_len", f"{max_len} is shorter than data.{task}.length={length}")
        train = variant_settings(section, variant)["train"]
        if train["warmup_steps"] > train["steps"]:
            problem(f"variants.{variant}.train.warmup_steps", f"{train['warmup_steps']} exceeds steps={train['steps']}")
        if train["checkpoint_every"] > train["steps"]:
            problem(f"variants.{variant}.train.checkpoint_every", f"{train['checkpoint_every']} exceeds steps={train['steps']}")
    for task, variants in section["runs"].items():
        if task not in section["tasks"]:
            problem(f"runs.{task}", f"{task} is not in tasks ({', '.join(section['tasks'])})")
        for i, variant in enumerate(variants):
            if variant not in section["variants"]:
                problem(f"runs.{task}.{i}", f"{variant!r} is not a variant (variants: {', '.join(section['variants'])})")
    if not any(section["runs"].get(task) for task in section["tasks"]):
        problem("runs", "trains nothing: give a task of `tasks` at least one variant")
    return found
