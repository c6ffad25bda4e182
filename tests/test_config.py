"""A malformed configuration stops before any job runs, and the message names the key."""

import subprocess
from pathlib import Path

import pytest
import yaml

from posym import config

REPO = Path(__file__).parents[1]

BAD = [
    ({"train": {"steps": -5}}, "train.steps", "less than the minimum"),
    ({"train": {"steps": "many"}}, "train.steps", "not of type 'integer'"),
    ({"train": {"learning_rate": 0}}, "train.learning_rate", "less than or equal to the minimum"),
    ({"tasks": ["number", "colour"]}, "tasks.1", "is not one of"),
    ({"tasks": []}, "tasks", "should be non-empty"),
    ({"seeds": []}, "seeds", "should be non-empty"),
    ({"seeds": [0, 0]}, "seeds", "non-unique"),
    ({"seeds": [-1]}, "seeds.0", "less than the minimum"),
    ({"trian": {"steps": 10}}, "trian", "unknown key"),
    ({"model": {"layers": 4}}, "model.layers", "unknown key"),
    ({"model": {"position": "sinusoid"}}, "model.position", "is not one of"),
    ({"model": {"n_head": 3}}, "model.n_head", "does not divide"),
    ({"model": {"rotary_dim": 7}}, "model.rotary_dim", "must be even"),
    ({"train": {"betas": [0.9]}}, "train.betas", "too short"),
    ({"train": {"warmup_steps": 10000}}, "train.warmup_steps", "exceeds train.steps"),
    ({"train": {"batch_size": 64}, "data": {"train_samples": 32}}, "data.train_samples", "less than the minimum"),
    ({"train": {"eval_samples": 50000}}, "train.eval_samples", "exceeds data.test_samples"),
    ({"train": {"device": "tpu"}}, "train.device", "is not one of"),
    ({"train": {"precision": "fp16"}}, "train.precision", "is not one of"),
    ({"length": {"extra_tokens": [0, 10, 10]}}, "length.extra_tokens", "non-unique"),
    ({"threads": True}, "threads", "not of type 'integer'"),
]


@pytest.mark.parametrize("values, key, reason", BAD, ids=[b[1] for b in BAD])
def test_bad_values_name_their_key(values, key, reason):
    with pytest.raises(config.ConfigError) as err:
        config.validate(values)
    assert f"'{key}'" in str(err.value)
    assert reason in str(err.value)


def test_defaults_are_paper_a():
    filled = config.validate({})
    assert filled["train"]["steps"] == 6750 and filled["train"]["batch_size"] == 64
    assert filled["train"]["learning_rate"] == 1e-4 and filled["train"]["betas"] == [0.95, 0.999]
    assert filled["model"]["n_layer"] == 12 and filled["model"]["n_head"] == 1 and filled["model"]["d_model"] == 128
    assert (filled["data"]["train_samples"], filled["data"]["val_samples"], filled["data"]["test_samples"]) == (432_000, 2_400, 45_600)


def test_config_yaml_is_exactly_the_schema_defaults():
    """config.yaml spells out paper A; it must agree with the schema's defaults."""
    written = yaml.safe_load((REPO / "config.yaml").read_text())
    assert config.validate(written) == config.validate({})


@pytest.mark.parametrize("variant", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_every_shipped_variant_is_valid_over_config_yaml(variant):
    config.load([REPO / "config.yaml", REPO / "configs" / variant])


def test_every_schema_key_has_a_description_and_a_default():
    def walk(node, path):
        for name, sub in node.get("properties", {}).items():
            here = f"{path}.{name}".lstrip(".")
            assert "description" in sub, here
            assert "default" in sub, here
            if sub.get("type") in ("integer", "number") or "integer" in sub.get("type", []):
                assert "minimum" in sub or "exclusiveMinimum" in sub, f"{here} has no lower bound"
            walk(sub, here)

    walk(config.load_schema(), "")


@pytest.mark.parametrize(
    "values, key",
    [({"train": {"steps": -5}}, "train.steps"), ({"tasks": ["numbers"]}, "tasks.0"), ({"report": {"colour": "red"}}, "report.colour")],
)
def test_snakemake_stops_before_any_job(tmp_path, values, key):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        ["snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(bad), "--cores", "1"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert f"'{key}'" in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_sections_limit_the_errors_to_the_keys_a_command_uses():
    values = {"data": {"test_samples": 256}, "train": {"eval_samples": 128}}  # length.samples (1000) now too large
    with pytest.raises(config.ConfigError, match="length.samples"):
        config.validate(values)
    assert config.validate(values, sections=("data", "model", "train"))["data"]["test_samples"] == 256
    with pytest.raises(config.ConfigError, match="train.eval_samples"):
        config.validate({"data": {"test_samples": 100}}, sections=("data", "model", "train"))


def test_schema_precisions_are_the_models():
    from posym.model import PRECISIONS

    schema = config.load_schema()["properties"]["train"]["properties"]["precision"]
    assert sorted(schema["enum"]) == sorted(PRECISIONS)
