"""The core's train settings are one block (workflow/schemas/train.schema.yaml) that every study's `train` section
references with its own defaults, notes and keys: one set of bounds and descriptions for all."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from posym import registry
from posym.pipeline import config, study

REPO = Path(__file__).parents[2]
BLOCK = yaml.safe_load((REPO / "workflow" / "schemas" / "train.schema.yaml").read_text())
#: Where each study keeps its train section, as a path of keys in its config section.
TRAIN_SECTIONS = {"a": ("train",), "b": ("train",), "c": ("training", "train")}


def train_schema(study_id: str) -> dict:
    node = study.section_schema(study_id)
    for key in TRAIN_SECTIONS[study_id]:
        node = node["properties"][key]
    return node


def raw_train_section(study_id: str) -> dict:
    node = yaml.safe_load((registry.folder(study_id) / "schema.yaml").read_text())
    for key in TRAIN_SECTIONS[study_id]:
        node = node["properties"][key]
    return node


def reference(**properties) -> dict:
    """A study section whose `train` references the block, with a default for each key the block has none for."""
    defaults = {"batch_size": 8, "learning_rate": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.0,
                "warmup_steps": 0, "max_grad_norm": None, "checkpoint_every": 10, "precision": "fp32"}  # fmt: skip
    given = {key: {"default": value} for key, value in defaults.items()}
    given.update(properties)
    train = {"block": "train", "description": "Toy training.", "properties": given}
    return {"type": "object", "properties": {"train": train}}


def expand(section: dict) -> dict:
    return study.expand_blocks(copy.deepcopy(section), "toy")["properties"]["train"]


def test_every_study_references_the_block_and_copies_none_of_it():
    for study_id in TRAIN_SECTIONS:
        raw = raw_train_section(study_id)
        assert raw["block"] == "train", study_id
        for key in set(raw["properties"]) & set(BLOCK["properties"]):
            assert set(raw["properties"][key]) <= {"default", "note"}, f"{study_id}: {key} copies the block's schema"


def test_the_block_is_expanded_with_the_studys_defaults_and_notes():
    train = train_schema("a")
    assert train["type"] == "object" and train["additionalProperties"] is False and train["default"] == {}
    assert train["description"].startswith("Optimisation (spec §A3")  # the study's description
    batch = train["properties"]["batch_size"]
    assert batch["default"] == 192 and (batch["minimum"], batch["maximum"]) == (1, 65536)
    assert batch["description"].startswith(BLOCK["properties"]["batch_size"]["description"] + " 192 = three epochs")
    # the study's own keys, in the study's order among the block's
    assert list(train["properties"])[:2] == ["steps", "batch_size"] and train["properties"]["steps"]["default"] == 6750
    assert {"eval_samples", "pack_seeds"} <= set(train["properties"])
    # a block key the study leaves without a note keeps the block's description, with the study's default
    assert train_schema("b")["properties"]["batch_size"] == {**BLOCK["properties"]["batch_size"], "default": 512}
    c = train_schema("c")["properties"]
    assert {"max_steps", "stop_after_formation", "eval_every"} <= set(c) and "steps" not in c
    assert config.study_defaults("c")["training"]["train"]["learning_rate"] == 1e-3
    assert config.study_defaults("b")["train"]["betas"] == [0.98, 0.9]


def test_a_block_key_a_study_leaves_out_takes_the_blocks_default():
    train = expand(reference())
    assert train["properties"]["device"]["default"] == "auto" and train["properties"]["log_every"]["default"] == 50
    assert list(train["properties"])[-4:] == ["log_every", "device", "deterministic", "compile"]  # the block's order, last


def test_every_study_has_every_key_of_the_block_with_the_same_bounds():
    def bounds(schema):
        return {k: v for k, v in schema.items() if k not in ("default", "description")}

    for key, schema in BLOCK["properties"].items():
        for study_id in TRAIN_SECTIONS:
            assert bounds(train_schema(study_id)["properties"][key]) == bounds(schema), (study_id, key)


@pytest.mark.parametrize(
    "value, reason", [(2, "2 is greater than the maximum of 1"), (0, "0 is less than or equal to the minimum of 0")]
)
def test_a_bad_learning_rate_is_refused_in_every_study_with_the_same_bound(value, reason):
    for study_id, path in TRAIN_SECTIONS.items():
        section = {"learning_rate": value}
        for key in reversed(path):
            section = {key: section}
        key = ".".join((study_id, *path, "learning_rate"))
        with pytest.raises(config.ConfigError, match=f"config key '{key}': {reason}"):
            config.validate({"studies": [study_id], study_id: section})


def test_a_default_for_a_key_the_block_does_not_have_is_refused_naming_it():
    unknown = r"study toy .*'train\.stpes' is not a key of block train \(its keys: batch_size, .*\): a default"
    with pytest.raises(study.StudyError, match=unknown):
        expand(reference(stpes={"default": 100}))
    own_with_note = r"study toy .*'train\.steps' is a key of the study's own, not of block train: a note"
    with pytest.raises(study.StudyError, match=own_with_note):
        expand(reference(steps={"description": "Steps.", "type": "integer", "minimum": 1, "default": 9, "note": "x"}))
    own = expand(reference(steps={"description": "Steps.", "type": "integer", "minimum": 1, "default": 9}))
    assert own["properties"]["steps"]["default"] == 9  # a key of the study's own is a schema with a description


def test_a_reference_that_overrides_the_block_or_misses_a_default_is_refused_naming_the_key():
    overridden = r"study toy .*'train\.learning_rate' is a key of block train: .*not maximum"
    with pytest.raises(study.StudyError, match=overridden):
        expand(reference(learning_rate={"default": 1e-3, "maximum": 10}))
    unknown_keyword = r"study toy .*'train\.additionalProperties': unknown key in a reference"
    with pytest.raises(study.StudyError, match=unknown_keyword):
        section = reference()
        section["properties"]["train"]["additionalProperties"] = True
        expand(section)
    with pytest.raises(study.StudyError, match=r"study toy .*'train\.batch_size' has no default"):
        section = reference()
        del section["properties"]["train"]["properties"]["batch_size"]
        expand(section)
    with pytest.raises(study.StudyError, match=r"study toy .*'train' refers to block 'trian'"):
        section = reference()
        section["properties"]["train"]["block"] = "trian"
        expand(section)


def test_the_toy_study_of_contributing_references_the_block():
    toy = yaml.safe_load((REPO / "tests" / "toy_study" / "schema.yaml").read_text())
    assert toy["properties"]["train"]["block"] == "train"
    train = study.expand_blocks(toy, "toy")["properties"]["train"]["properties"]
    assert set(BLOCK["properties"]) <= set(train) and {"steps", "eval_samples"} <= set(train)
    assert train["device"]["default"] == "cpu" and train["learning_rate"]["maximum"] == 1
