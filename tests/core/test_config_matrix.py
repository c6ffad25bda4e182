"""The matrix of test configurations, each of tests/configs/ over the tiny one (conftest.CONFIG_MATRIX).

Every one builds a DAG that Snakemake can run (a dry run here); the tiny one runs in full (tests/workflow/test_pipeline.py);
the two models without RoPE run end to end and their report marks the RoPE-only items not applicable, with the
reason; the LLM probe runs on a tiny language model the test builds.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import CONFIG_MATRIX, build_tiny_gguf_llm, build_tiny_llm, copy_repo, planned_jobs, report_dir, snakemake
from posym.lm import pretrained
from posym.pipeline import study
from posym.data.files import sha256_file

#: The notebooks that read RoPE planes of the trained models (study.yaml: requires model.position rope).
ROPE_ONLY = {"a_frequency", "a_geometry", "a_notebook_frequency", "a_notebook_geometry"}
#: What changes against the tiny config's jobs (the tiny config plans one of each job per task x seed).
EXPECTED = {
    "tiny": {},
    "bf16": {},
    "single_task": {"split": 3, "train": 1, "train_outputs": 1, "evaluate_test": 1, "a_scores": 1, "a_geometry": None, "a_notebook_geometry": None},
    "alibi": dict.fromkeys(ROPE_ONLY),
    "nope": dict.fromkeys(ROPE_ONLY),
    "llm": {"convert_model": 1, "a_llm_probe": 2, "a_llm_gather": 1},  # two models, one of them a GGUF
    # two recipes x two tasks, each analysed with two final-checkpoint choices: 8 variant runs besides the plain
    # run's 2, of which the recipe dropout 0, batch 32 is the plain run's training: 2 more training jobs
    "fidelity": {"train": 4, **dict.fromkeys(["train_outputs", "a_scores", "a_frequency", "a_evaluate_length"], 10), "a_notebook_fidelity": 1},
    # papers A and C: paper C's jobs, and the fingerprint of paper A's heads (one job per run, its gather, its notebook)
    "ac": {**dict.fromkeys(["c_published", "c_checks", "c_notebook_published", "c_notebook_checks"], 1), "c_our_heads": 2, "c_our_heads_gather": 1, "c_notebook_our_heads": 1,
           "c_train": 5, "c_formation": 1, "c_notebook_training": 1},  # fmt: skip
}
#: tests/configs/b.yaml runs paper B alone: 5 variants on Task 1 and 3 on Task 2, one seed, two tasks' data.
B_JOBS = {
    "split": 4,
    **dict.fromkeys(["train", "train_outputs", "evaluate_test", "b_ablation", "b_toeplitz", "b_probe"], 8),
    **dict.fromkeys(["b_notebook_accuracy", "b_notebook_ablation", "b_notebook_toeplitz", "b_notebook_probe"], 1),
    "report": 1,
    "all": 1,
}
#: tests/configs/c.yaml runs paper C alone: two analyses from the vendored cache and random heads, the constrained
#: toy training (claim C-4): one job per arm of config.yaml's c.training.run, and their gathering; and one real-model
#: job on the tiny GGUF (converted once), gathered.
C_JOBS = {"c_published": 1, "c_checks": 1, "c_notebook_published": 1, "c_notebook_checks": 1, "report": 1, "all": 1,
          "c_train": 5, "c_formation": 1, "c_notebook_training": 1,
          "convert_model": 1, "c_real_model": 1, "c_real_models_gather": 1, "c_notebook_real_models": 1}  # fmt: skip
#: The configs that run one study alone, by the jobs they plan (not a variant of the tiny config's DAG).
ALONE = {"b": B_JOBS, "c": C_JOBS}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One repository copy for every dry run, with the tiny language models the llm config names."""
    path = copy_repo(tmp_path_factory.mktemp("matrix"))
    build_tiny_llm(path / "results" / "tiny-llm")
    build_tiny_gguf_llm(path / "results" / "tiny-llm.gguf")
    return path


def test_the_matrix_covers_the_configurations_the_issue_names():
    assert set(CONFIG_MATRIX) == set(EXPECTED) | set(ALONE)


@pytest.fixture(scope="module")
def tiny_jobs(workdir):
    return planned_jobs(snakemake(workdir, "-n", configfiles=CONFIG_MATRIX["tiny"]))


def test_the_tiny_config_plans_every_job_of_paper_a(tiny_jobs):
    assert tiny_jobs["train"] == tiny_jobs["train_outputs"] == 2 and tiny_jobs["report"] == 1 and sum(tiny_jobs.values()) == 42
    assert {f"a_notebook_{name}" for name in study.load("a").notebooks} - {"a_notebook_fidelity"} <= set(tiny_jobs)
    assert "a_notebook_fidelity" not in tiny_jobs  # the fidelity study is off unless configured


@pytest.mark.parametrize("name", sorted(set(CONFIG_MATRIX) - {"tiny"}))
def test_every_test_config_dry_runs(workdir, tiny_jobs, name):
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=CONFIG_MATRIX[name]))
    if name in ALONE:
        assert jobs == ALONE[name]
        return
    expected = {**tiny_jobs, **EXPECTED[name]}
    expected = {rule: count for rule, count in expected.items() if count is not None}
    if name == "single_task":  # one run instead of two: half of every per-run job
        expected.update({r: 1 for r in ("a_length_sets", "a_evaluate_length", "a_flow", "a_frequency", "a_discrepancy", "a_length_protocol")})
    assert jobs == expected


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "nope"])
def test_a_model_without_rope_runs_and_its_report_says_why_items_are_missing(tmp_path, name):
    workdir = copy_repo(tmp_path / "repo")
    snakemake(workdir, configfiles=CONFIG_MATRIX[name])
    report = report_dir(workdir)
    html = (report / "index.html").read_text()
    manifest = json.loads((report / "manifest.json").read_text())["studies"]["a"]["items"]
    paper_a = study.load("a")
    rope_only = {row.id for row in [*paper_a.items, *paper_a.claims] if row.notebook in ("frequency", "geometry")}
    assert rope_only == {"Fig 4B", "Fig 4C", "Fig 8", "Table 1", "A-4"}
    off = {row.id for row in paper_a.items if row.notebook == "fidelity"}  # the fidelity study is not configured
    for item_id, entry in manifest.items():
        if item_id in off:
            assert not entry["applicable"] and "a.fidelity" in entry["reason"]
        elif item_id in rope_only:
            assert not entry["applicable"] and entry["files"] == []
            assert entry["reason"].startswith(f"not applicable to this model: a.model.position is '{name}'")
        else:
            assert entry["applicable"] and entry["files"], item_id
    assert html.count(f"not applicable to this model: a.model.position is &#x27;{name}&#x27;") == len(rope_only)
    published_only = [row.id for row in paper_a.items if row.notebook == "llm"]  # no language model configured
    assert html.count(">published values only</a>") == len(published_only)
    assert html.count(">rendered</a>") == len(paper_a.items) - len(off) - (len(rope_only) - 1) - len(published_only)  # A-4 is a claim
    assert not (report / "a" / "figures" / "fig8_frequency.png").exists()
    # The other analyses ran on the model as it is: scores, flow, discrepancy, length.
    scores = pd.read_csv(report / "a" / "tables" / "fig6_scores_initial_final.csv")
    assert scores[["positional", "symbolic"]].notna().all().all()


@pytest.mark.slow
def test_the_llm_probe_runs_on_a_tiny_language_model(tmp_path):
    """Two models: a Hugging Face directory and a GGUF the workflow converts once; one probe job each, gathered."""
    workdir = copy_repo(tmp_path / "repo")
    build_tiny_llm(workdir / "results" / "tiny-llm")
    gguf_file = build_tiny_gguf_llm(workdir / "results" / "tiny-llm.gguf")
    snakemake(workdir, "results/a/notebooks/llm.ipynb", configfiles=CONFIG_MATRIX["llm"])
    items = pd.read_csv(workdir / "results/a/llm/items.csv")
    assert len(items) == 2 * 2 * 3 * 2 * 2  # models x tasks x windows x runs x items
    assert set(items["model"]) == {"tiny-llm", "tiny-gguf"}
    manifest = pretrained.verify(workdir / "results/models/tiny-gguf")
    assert manifest["quantisation"] == "Q8_0" and manifest["gguf_sha256"] == sha256_file(gguf_file)
    table = pd.read_csv(workdir / "results/a/tables/table3_llm.csv")
    for model in ("tiny-llm", "tiny-gguf"):
        assert any(column.startswith(model) and column.endswith("(ours)") for column in table.columns)
    claims = pd.read_csv(workdir / "results/a/tables/claims_A7.csv", dtype=str, keep_default_na=False)
    assert not claims["measured"].str.contains("no model configured").any()

    # a second model added to the config runs its own probe only; the others are up to date
    (workdir / "results/tiny-llm-2").mkdir()
    for path in (workdir / "results/tiny-llm").iterdir():
        (workdir / "results/tiny-llm-2" / path.name).write_bytes(path.read_bytes())
    more = tmp_path / "more.yaml"
    more.write_text("a:\n  llm:\n    model: [results/tiny-llm, tiny-gguf, results/tiny-llm-2]\n")
    jobs = planned_jobs(snakemake(workdir, "-n", "results/a/llm/items.csv", configfiles=[*CONFIG_MATRIX["llm"], more]))
    assert jobs == {"a_llm_probe": 1, "a_llm_gather": 1}


@pytest.mark.slow
def test_the_fidelity_study_compares_the_recipes_claim_by_claim(tmp_path):
    """Every recipe x choice of tests/configs/fidelity.yaml through the real DAG: its verdict grid names each
    variant, the factor table each factor, and the best-on-validation variants read the checkpoint chosen."""
    workdir = copy_repo(tmp_path / "repo")
    snakemake(workdir, "results/a/notebooks/fidelity.ipynb", configfiles=CONFIG_MATRIX["fidelity"])
    grid = pd.read_csv(workdir / "results/a/tables/fidelity_verdicts.csv")
    variants = [c for c in grid.columns if c != "check"]
    assert sorted(variants) == sorted(f"pdrop{p}-batch32, {c}" for p in ("0", "0.1") for c in ("last", "best validation"))
    assert {check.split(" ")[0] for check in grid["check"]} == {"A-2", "A-3", "A-4", "A-5"}
    assert grid[variants].map(lambda cell: cell.split(" ")[0] in {"pass", "fail", "not"}).all().all()
    numbers = pd.read_csv(workdir / "results/a/tables/fidelity_measures.csv")
    assert {"A-2: first step hop 1 ≥ 0.9", "A-3: pure symbolic heads", "A-4: ID* layer 0", "A-5: accuracy at +100"} <= set(numbers["measure"])
    assert set(variants) <= set(numbers.columns) and numbers.loc[numbers["measure"] == "A-4: ID* layer 0", "paper"].notna().all()
    effects = pd.read_csv(workdir / "results/a/tables/fidelity_effects.csv")
    assert set(effects.columns) == {"check", "embd_pdrop", "batch_size", "final_checkpoint"}
    assert effects["batch_size"].isna().all()  # one level: no effect to measure
    train, scores = workdir / "results/a/train", workdir / "results/a/scores"
    best = json.loads((train / "pdrop0.1-batch32-best_validation/number/seed0/checkpoints.json").read_text())["final"]
    last = json.loads((train / "pdrop0.1-batch32-last/number/seed0/checkpoints.json").read_text())["final"]
    assert last == {"step": 60, "choice": "last"} and best["step"] == max(best["validation"], key=lambda c: c["accuracy"])["step"]
    chosen = pd.read_csv(scores / "pdrop0.1-batch32-best_validation/number/seed0/scores.csv")
    assert set(chosen.loc[chosen["final"], "step"]) == {best["step"]}
    # one training per recipe: the choices' tables read the checkpoints of the first variant that trains it, and
    # tiny's own recipe (dropout 0, batch 32) is the plain run's
    assert (train / "pdrop0.1-batch32-last/number/seed0/checkpoints").is_dir()
    assert not (train / "pdrop0.1-batch32-best_validation/number/seed0/checkpoints").exists()
    assert not any((train / f"pdrop0-batch32-{c}/number/seed0/checkpoints").exists() for c in ("last", "best_validation"))


#: The jobs of one run (task x seed): the quick config's three seeds have three of each where the tiny one has one.
PER_RUN_JOBS = ("split", "train_outputs", "evaluate_test", "a_length_sets", "a_evaluate_length", "a_flow", "a_frequency", "a_scores", "a_discrepancy", "a_geometry", "a_length_protocol")


@pytest.mark.parametrize("variants", [(), ("configs/quick.yaml",), ("configs/quick.yaml", "configs/bf16.yaml")], ids=lambda v: "+".join(v) or "config.yaml")
def test_the_shipped_configs_plan_the_jobs_of_the_tiny_one(workdir, tiny_jobs, variants):
    """Paper A's default configuration builds the same DAG as the tiny one (one job of each kind per task x seed,
    every notebook, one report), only larger jobs; the quick one the same for three seeds, packed: one training
    job per task. (config.yaml runs papers B and C too: here its paper A alone.)"""
    paper_a = workdir / "paper_a_only.yaml"
    paper_a.write_text("studies: [a]\n")
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=[workdir / "config.yaml", *(workdir / v for v in variants), paper_a]))
    seeds = 3 if variants else 1
    expected = {rule: count * (seeds if rule in PER_RUN_JOBS else 1) for rule, count in tiny_jobs.items()}
    # they read the last checkpoint, so a run makes no validation split: train and test where the tiny one has three
    expected["split"] = tiny_jobs["split"] // 3 * 2 * seeds
    assert jobs == expected


def test_the_default_config_plans_the_three_studies_and_one_report(workdir):
    """config.yaml: paper A at its size, papers B and C at CPU size, the cross-paper fingerprints of A's and B's
    heads (study c with a and b on), one report."""
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=[workdir / "config.yaml"]))
    assert jobs["report"] == 1 and jobs["a_scores"] == 2 and jobs["c_train"] >= 1
    assert jobs["b_ablation"] == jobs["b_probe"] >= 1 and jobs["c_our_heads"] == 2 and jobs["c_our_heads_b"] >= 1
    notebooks = {rule.split("_")[0] for rule in jobs if "_notebook_" in rule}
    assert notebooks == {"a", "b", "c"}


def test_the_offline_paper_c_config_plans_one_job_per_model(workdir):
    """configs/paper_c_offline.yaml: each package converted once, measured by its own job, gathered, one notebook."""
    target = "results/c/notebooks/real_models.ipynb"
    jobs = planned_jobs(snakemake(workdir, "-n", target, configfiles=[workdir / "config.yaml", workdir / "configs" / "paper_c_offline.yaml"]))
    assert jobs == {"convert_model": 2, "c_real_model": 2, "c_real_models_gather": 1, "c_notebook_real_models": 1}
