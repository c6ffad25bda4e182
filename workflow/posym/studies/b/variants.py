"""Paper B's variants (position encodings) as its rules read them: each variant's settings over the section's.
Light on purpose (no torch): the workflow imports it when it parses."""

from __future__ import annotations

import json


def variant_settings(section: dict, variant: str) -> dict:
    """The model and train settings of ``variant``: its overrides over the section's ``model`` and ``train``."""
    overrides = section["variants"][variant]
    return {part: {**section[part], **overrides.get(part, {})} for part in ("model", "train")}


def variant_train(section: dict, variant: str) -> dict:
    """The variant's train settings (what decides how its seeds are packed)."""
    return variant_settings(section, variant)["train"]


def variant_json(section: dict, variant: str, parts: tuple[str, ...] = ("model", "train")) -> str:
    """The variant's settings of ``parts`` as JSON, as ``posym`` commands take them. Training reads its data
    from the split files, so no data setting is among them: editing one task's data reruns only that task."""
    merged = variant_settings(section, variant)
    return json.dumps({part: merged[part] for part in parts}, sort_keys=True)


def variant_gpus(section: dict, variant: str) -> int:
    """A training job asks for one GPU unless its variant trains on the CPU."""
    return 0 if variant_settings(section, variant)["train"]["device"] == "cpu" else 1
