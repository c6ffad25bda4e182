"""The run grid (posym.pipeline.variants) and the core's paths (posym.pipeline.paths): one merge of a variant's
settings, grids of factors, training shared by variants that train the same, and the path patterns rules and
study.yaml read."""

from __future__ import annotations

import pytest

from posym.pipeline import config, jobs, paths, study, variants


def test_a_variant_is_its_overrides_over_the_section_one_level_deep():
    section = {"model": {"n_layer": 2, "position": "rope"}, "train": {"steps": 10}, "seeds": [0]}
    settings = variants.resolve(section, {"model": {"position": "nope"}, "seeds": [1, 2]})
    assert settings == {"model": {"n_layer": 2, "position": "nope"}, "train": {"steps": 10}, "seeds": [1, 2]}
    assert section["model"]["position"] == "rope"  # the section is left as it was
    assert jobs.settings_json(variants.resolve(section, {}), ["train"]) == '{"train": {"steps": 10}}'


def test_a_grid_of_factors_makes_one_variant_per_combination_the_last_factor_fastest():
    grid = variants.factor_grid({"model.p": [0, 1], "train.b": [8, 16]}, lambda levels: f"p{levels['p']}-b{levels['b']}")
    assert list(grid) == ["p0-b8", "p0-b16", "p1-b8", "p1-b16"]
    assert grid["p1-b8"] == {"model": {"p": 1}, "train": {"b": 8}}


def test_the_plain_run_is_the_variant_main_of_every_task_and_seed():
    grid = variants.plain({"tasks": ["number", "letter"], "seeds": [0, 3]})
    assert grid.variants == {variants.MAIN: {}}
    assert [(r["task"], r["seed"]) for r in grid.runs()] == [("number", 0), ("number", 3), ("letter", 0), ("letter", 3)]


def test_paper_c_arms_are_variants_of_its_training_settings():
    section = config.validate({"studies": ["c"]})["c"]
    grid = variants.run_grid("c", section)
    training = section["training"]
    assert list(grid.variants) == training["run"] and len(grid.runs()) == len(training["run"]) * len(training["seeds"])
    arm = training["run"][0]
    assert variants.resolve(training, grid.variants[arm])["model"]["position"] == training["arms"][arm]["position"]


def fidelity_section(**fidelity) -> dict:
    overrides = {"fidelity": {"seeds": [0], "embd_pdrop": [0.0, 0.1], "batch_size": [64], "final_checkpoint": ["last", "best_validation"], **fidelity}}
    return config.validate({"studies": ["a"], "a": {"train": {"batch_size": 64}, "final_checkpoint": {"choice": "last"}, **overrides}})["a"]


def test_paper_a_fidelity_grid_is_variants_that_train_once_per_recipe():
    section = fidelity_section()
    grid = variants.run_grid("a", section)
    assert list(grid.variants) == ["main", "pdrop0-batch64-last", "pdrop0-batch64-best_validation", "pdrop0.1-batch64-last", "pdrop0.1-batch64-best_validation"]
    assert grid.variants["pdrop0.1-batch64-best_validation"] == {"model": {"embd_pdrop": 0.1}, "train": {"batch_size": 64}, "final_checkpoint": {"choice": "best_validation"}}
    assert variants.resolve(section, grid.variants["pdrop0.1-batch64-best_validation"])["final_checkpoint"]["validation_every"] == section["final_checkpoint"]["validation_every"]
    trainer = variants.trainers(grid, section)
    # the plain run's recipe is dropout 0 at batch 64: both of its choices read the plain run's training
    assert trainer == {"main": "main", "pdrop0-batch64-last": "main", "pdrop0-batch64-best_validation": "main",
                       "pdrop0.1-batch64-last": "pdrop0.1-batch64-last", "pdrop0.1-batch64-best_validation": "pdrop0.1-batch64-last"}  # fmt: skip
    fidelity = grid.runs("fidelity")
    assert fidelity[0] == {"variant": "pdrop0-batch64-last", "task": "number", "seed": 0, "recipe": "pdrop0-batch64", "choice": "last"}
    assert len(fidelity) == 4 * 2 and len(grid.all_runs()) == len(grid.runs()) + len(fidelity)
    # the plain run trains its seeds and those of the fidelity variants it trains for
    assert variants.training_seeds(grid, trainer, "main", "number") == sorted(set(section["seeds"]) | {0})
    assert variants.training_seeds(grid, trainer, "pdrop0.1-batch64-last", "letter") == [0]
    assert variants.run_grid("a", fidelity_section() | {"fidelity": None}).variants == {"main": {}}


def test_paper_a_notebooks_read_their_run_set_and_get_its_runs():
    section = {"studies": ["a"], "a": fidelity_section()}
    paper_a = study.load("a")
    inputs = paper_a.notebook_inputs("fidelity", section)
    assert inputs["scores"][0] == "results/a/scores/pdrop0-batch64-last/number/seed0/scores.csv"
    assert inputs["metrics"][-1] == "results/a/train/pdrop0.1-batch64-best_validation/letter/seed0/metrics.csv"
    assert paper_a.notebook_parameters("fidelity", section)["runs_fidelity"] == paper_a.runs(section, "fidelity")
    assert paper_a.notebook_parameters("training", section)["runs"] == paper_a.runs(section)


def test_paths_fill_some_wildcards_and_keep_the_others():
    assert paths.of(paths.CHECKPOINTS, study="b") == "results/b/train/{variant}/{task}/seed{seed}/checkpoints.json"
    assert paths.of(paths.SPLIT, study="a", split="val") == "results/a/data/{task}/seed{seed}/val.safetensors"
    assert paths.log(paths.PACK) == "logs/{study}/train/{variant}/{task}/packs/{pack}.log"
    assert paths.study_path("a", "core:metrics") == "results/a/train/{variant}/{task}/seed{seed}/metrics.csv"
    assert paths.study_path("a", "scores/{run}/scores.csv") == "results/a/scores/{variant}/{task}/seed{seed}/scores.csv"
    with pytest.raises(KeyError, match="core:checkpoint'? names no core path"):
        paths.study_path("a", "core:checkpoint")
