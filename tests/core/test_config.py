"""A malformed configuration stops before any job runs, and the message names the key."""

import subprocess
from pathlib import Path

import pytest
import yaml

from posym import registry
from posym.pipeline import config

REPO = Path(__file__).parents[2]

BAD = [
    ({"a": {"train": {"steps": -5}}}, "a.train.steps", "less than the minimum"),
    ({"a": {"train": {"steps": "many"}}}, "a.train.steps", "not of type 'integer'"),
    ({"a": {"train": {"learning_rate": 0}}}, "a.train.learning_rate", "less than or equal to the minimum"),
    ({"a": {"tasks": ["number", "colour"]}}, "a.tasks.1", "is not one of"),
    ({"a": {"tasks": []}}, "a.tasks", "should be non-empty"),
    ({"a": {"seeds": []}}, "a.seeds", "should be non-empty"),
    ({"a": {"seeds": [0, 0]}}, "a.seeds", "non-unique"),
    ({"a": {"seeds": [-1]}}, "a.seeds.0", "less than the minimum"),
    ({"trian": {"steps": 10}}, "trian", "unknown key"),
    ({"a": {"model": {"layers": 4}}}, "a.model.layers", "unknown key"),
    ({"a": {"model": {"position": "sinusoid"}}}, "a.model.position", "is not one of"),
    ({"a": {"model": {"n_head": 3}}}, "a.model.n_head", "does not divide"),
    ({"a": {"model": {"rotary_dim": 7}}}, "a.model.rotary_dim", "must be even"),
    ({"a": {"train": {"betas": [0.9]}}}, "a.train.betas", "too short"),
    ({"a": {"train": {"warmup_steps": 10000}}}, "a.train.warmup_steps", "exceeds train.steps"),
    ({"a": {"train": {"batch_size": 64}, "data": {"train_samples": 32}}}, "a.data.train_samples", "less than the minimum"),
    ({"a": {"train": {"eval_samples": 50000}}}, "a.train.eval_samples", "exceeds data.test_samples"),
    ({"a": {"train": {"device": "tpu"}}}, "a.train.device", "is not one of"),
    ({"a": {"train": {"precision": "fp16"}}}, "a.train.precision", "is not one of"),
    ({"a": {"length": {"extra_tokens": [0, 10, 10]}}}, "a.length.extra_tokens", "non-unique"),
    ({"threads": True}, "threads", "not of type 'integer'"),
    ({"studies": ["z"]}, "studies.0", "is not one of"),
    ({"studies": []}, "studies", "should be non-empty"),
    ({"a": {"llm": {"model": "m", "endpoint_model": "e"}}}, "a.llm.endpoint_model", "not both"),
    ({"a": {"geometry": {"layer": 12}}}, "a.geometry.layer", "is not a layer"),
    ({"a": {"final_checkpoint": {"choice": "best_validation", "validation_every": 75}}}, "a.final_checkpoint.validation_every", "not a multiple of train.checkpoint_every"),
    ({"a": {"final_checkpoint": {"choice": "best_test"}}}, "a.final_checkpoint.choice", "is not one of"),
]


@pytest.mark.parametrize("values, key, reason", BAD, ids=[b[1] for b in BAD])
def test_bad_values_name_their_key(values, key, reason):
    with pytest.raises(config.ConfigError) as err:
        config.validate(values)
    assert f"'{key}'" in str(err.value)
    assert reason in str(err.value)


def test_defaults_are_paper_a():
    filled = config.validate({})["a"]
    assert filled["train"]["steps"] == 6750 and filled["train"]["batch_size"] == 192  # three epochs: issue 16
    assert filled["train"]["learning_rate"] == 1e-4 and filled["train"]["betas"] == [0.95, 0.999]
    assert filled["model"]["n_layer"] == 12 and filled["model"]["n_head"] == 1 and filled["model"]["d_model"] == 128
    assert (filled["data"]["train_samples"], filled["data"]["val_samples"], filled["data"]["test_samples"]) == (432_000, 2_400, 45_600)


def test_config_yaml_is_exactly_the_schema_defaults():
    """config.yaml spells out paper A; it must agree with the schema's defaults. It runs the three studies (the
    schema's default is paper A alone); its b and c sections are papers B's and C's CPU calibrations, which
    configs/paper_b.yaml and paper_c.yaml undo: tests/studies/b/test_b_study.py, tests/studies/c/test_c_training.py.)"""
    written = yaml.safe_load((REPO / "config.yaml").read_text())
    assert written["studies"] == ["a", "b", "c"] and config.validate({})["studies"] == ["a"]
    for key in ("studies", "b", "c"):
        written.pop(key)
    assert config.validate(written) == config.validate({})


@pytest.mark.parametrize("variant", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_every_shipped_variant_is_valid_over_config_yaml(variant):
    config.load([REPO / "config.yaml", REPO / "configs" / variant])


def test_a_key_of_the_layout_before_studies_says_where_it_lives_now():
    with pytest.raises(config.ConfigError, match=r"config key 'tasks': unknown key .*'a.tasks'"):
        config.validate({"tasks": ["number"]})


def test_a_study_section_is_filled_only_when_the_study_runs():
    assert set(config.validate({})) == {"studies", "threads", "models", "report", "a"}
    assert config.validate({})["report"]["title"] is None  # the report computes it from the verdicts


# The hash part of a report version (reports/<code>-cfg<hash>) of the shipped configurations, over config.yaml. The
# hash covers the validated configuration (every default filled in), so a new setting, a new default or a change of
# what the hash covers renames the report versions of every configuration: pinned here so that it happens only on
# purpose. The last change: the new claim thresholds b.claims.deposit_share / deposit_gap (B-3's controls and B-5
# judged by one dominant head) and c.training.claims.contrast_q (C-4's significance); they rename every
# configuration that runs paper B or C.
VERSION_HASHES = {
    (): "b2298a3311",
    ("tests/configs/tiny.yaml",): "b74bebc77e",
    ("configs/bf16.yaml",): "406d7b3cfa",
    ("configs/quick.yaml",): "6b5682ed99",
    ("configs/quick.yaml", "configs/bf16.yaml"): "fa67554792",
    ("configs/paper_b.yaml",): "014d17b51c",
    ("configs/paper_c.yaml",): "1933bcbccf",
}


@pytest.mark.parametrize("variants", list(VERSION_HASHES), ids=lambda v: "+".join(v) or "config.yaml")
def test_the_version_hash_of_shipped_configs_is_pinned(variants):
    validated = config.load([REPO / "config.yaml", *(REPO / v for v in variants)])
    assert config.digest(config.canonical(validated)) == VERSION_HASHES[variants]


def version_hash(values: dict) -> str:
    return config.digest(config.canonical(config.validate(values)))


def test_the_version_hash_covers_the_shared_keys_and_the_running_studies_sections():
    for studies in (["a"], ["c"], ["a", "c"], ["a", "b", "c"]):
        validated = config.validate({"studies": studies, "b": {}, "c": {}})  # b and c given, whether they run or not
        shared = {"studies", "threads", "models", "report"}
        assert set(config.canonical(validated)) == shared | set(studies), studies
        assert config.canonical(validated) == {k: validated[k] for k in shared | set(studies)}
    base = version_hash({"studies": ["a", "c"]})
    # a section of a study that does not run: the same version
    assert version_hash({"studies": ["a", "c"], "b": {"train": {"steps": 20000}}}) == base
    # a section of a running study, any setting of it (a setting of how to compute too), or a shared key: another
    for edit in (
        {"a": {"train": {"steps": 6000}}},
        {"a": {"train": {"deterministic": True}}},
        {"c": {"training": {"train": {"learning_rate": 0.01}}}},
        {"threads": 2},
        {"report": {"title": "mine"}},
    ):
        assert version_hash({"studies": ["a", "c"], **edit}) != base, edit
    assert version_hash({"studies": ["a"]}) != version_hash({"studies": ["a", "c"]})


SCHEMA_KEYWORDS = {
    "description", "type", "default", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "items", "minItems", "maxItems", "uniqueItems", "contains", "properties", "additionalProperties", "minProperties",
    "propertyNames", "required", "maxLength", "minLength", "pattern", "oneOf", "anyOf", "allOf", "not", "$ref",
    config.MERGE_DEFAULT,
}  # fmt: skip


def test_every_schema_key_has_a_description_and_a_default():
    def walk(node, path):
        for name, sub in node.get("properties", {}).items():
            here = f"{path}.{name}".lstrip(".")
            assert "description" in sub, here
            # A flow mapping whose unquoted description holds ", " splits into stray keys: only keywords may appear.
            assert set(sub) <= SCHEMA_KEYWORDS, f"{here}: not schema keywords: {sorted(set(sub) - SCHEMA_KEYWORDS)}"
            # a study's section is filled when the study runs (config.validate), so it has no default itself
            assert "default" in sub or here in registry.known(), here
            if sub.get("type") in ("integer", "number") or "integer" in sub.get("type", []):
                assert "minimum" in sub or "exclusiveMinimum" in sub, f"{here} has no lower bound"
            walk(sub, here)

    walk(config.load_schema(), "")


@pytest.mark.parametrize(
    "values, key",
    [({"a": {"train": {"steps": -5}}}, "a.train.steps"), ({"a": {"tasks": ["numbers"]}}, "a.tasks.0"), ({"report": {"colour": "red"}}, "report.colour")],
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
    values = {"a": {"data": {"test_samples": 256}, "train": {"eval_samples": 128}}}  # length.samples (1000) now too large
    with pytest.raises(config.ConfigError, match="a.length.samples"):
        config.validate(values)
    sections = ("a.data", "a.model", "a.train")
    assert config.validate(values, sections=sections)["a"]["data"]["test_samples"] == 256
    with pytest.raises(config.ConfigError, match="a.train.eval_samples"):
        config.validate({"a": {"data": {"test_samples": 100}}}, sections=sections)


def test_schema_precisions_are_the_models():
    from posym.nn.precision import PRECISIONS

    schema = config.load_schema()["properties"]["a"]["properties"]["train"]["properties"]["precision"]
    assert sorted(schema["enum"]) == sorted(["auto", *PRECISIONS])  # auto: bf16 on a GPU, fp32 on a CPU
