"""The real pipeline on SLURM: what the rules ask a cluster for, and the tiny config's data -> train (on a GPU)
-> evaluate_test chain through the local SLURM test cluster, with the same results as a local run.

The cluster test needs POSYM_SLURM=1 (scripts/test.sh sets it and starts the cluster; see tests/conftest.py);
the other tests run everywhere.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from collections import Counter

import pytest
import yaml
from packaging.version import Version

from conftest import (
    CONFIG_MATRIX,
    REPO,
    TINY,
    clean_env,
    copy_repo,
    planned_jobs,
    run_cancelling_on_timeout,
    snakemake,
    snakemake_command,
    workflow_rules,
)

TEST_PROFILE = REPO / "profiles" / "slurm-test"
CLUSTER_PROFILE = REPO / "profiles" / "slurm"
TARGET = "results/a/eval/main/number/seed0/test.csv"  # split x3 -> train -> evaluate_test, about 1 min on SLURM
SLURM_TIMEOUT_S = 600
SITE_SETTINGS = ("slurm_partition", "gpu_model", "slurm_account", "constraint", "slurm_extra", "qos")


# ------------------------------------------------------------------------------------------ without a cluster


def job_resources(result) -> dict[str, list[dict[str, str]]]:
    """Rule -> the resources of each of its jobs, from the job blocks of a dry run."""
    jobs: dict[str, list[dict[str, str]]] = {}
    rule = None
    for line in (result.stdout + result.stderr).splitlines():
        if match := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = match.group(1)
        elif rule and (match := re.match(r"^\s+resources: (.*)$", line)):
            pairs = (item.split("=", 1) for item in match.group(1).split(", "))
            jobs.setdefault(rule, []).append(dict(pairs))
            rule = None
    return jobs


def test_jobs_ask_for_memory_and_time_and_training_for_a_gpu(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    jobs = job_resources(snakemake(repo, "-n"))
    assert {"split", "train", "evaluate_test", "a_scores", "a_notebook_training", "report"} <= set(jobs)
    for rule, resources in jobs.items():
        if rule == "all":
            continue
        for values in resources:
            assert int(values["mem_mb"]) >= 1000 and int(values["runtime"]) >= 30, (rule, values)
    for values in jobs["train"]:
        assert values["gpu"] == "1" and values["cpus_per_gpu"] == "1", values  # tiny.yaml: threads 1
        assert values["mem_mb"] == "4000" and values["runtime"] == "240", values
    assert all("gpu" not in values for rule in ("split", "evaluate_test") for values in jobs[rule])

    on_cpu = tmp_path / "cpu.yaml"
    on_cpu.write_text(yaml.safe_dump({"a": {"train": {"device": "cpu"}}}))
    jobs = job_resources(snakemake(repo, "-n", configfiles=(TINY, on_cpu)))
    assert all(values["gpu"] == "0" for values in jobs["train"])  # no GPU asked for a CPU run

    # On a GPU the seeds of a task train packed: one GPU job per task, the cores of its seeds beside it
    # (threads 1 x 3 seeds, here capped at the dry run's --cores 2); each seed's tables are written locally.
    seeds = tmp_path / "seeds.yaml"
    seeds.write_text(yaml.safe_dump({"a": {"seeds": [0, 1, 2]}}))
    result = snakemake(repo, "-n", configfiles=(TINY, seeds))
    jobs = job_resources(result)
    assert len(jobs["train"]) == 2 and all(values["gpu"] == "1" and values["cpus_per_gpu"] == "2" for values in jobs["train"])
    assert planned_jobs(result)["train_outputs"] == 6


def test_the_jobs_that_write_a_seeds_tables_run_on_the_submitting_node():
    """A few seconds of reading checkpoints each: not worth a cluster job (nor a GPU) per seed."""
    (rule, *_) = workflow_rules(CONFIG_MATRIX["b"])  # paper B's rules beside the core's
    assert "train_outputs" in rule.workflow._localrules and "train" not in rule.workflow._localrules


def test_rules_leave_partitions_and_gpu_models_to_the_profile():
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        text = path.read_text()
        for name in SITE_SETTINGS:
            assert not re.search(rf"\b{name}\s*=", text), f"{path.name} sets {name}: site settings belong in profiles/slurm"
    profile = yaml.safe_load((CLUSTER_PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["retries"] >= 1
    assert "slurm_partition" in profile["default-resources"]
    assert "slurm_partition" in profile["set-resources"]["train"]
    # the rules say how much; the profile must not silently override it
    for rule, values in profile["set-resources"].items():
        assert not {"mem_mb", "runtime", "gpu"} & set(values), f"profiles/slurm overrides {rule}'s own request"


def test_slurm_plugin_is_pinned_at_2_7_1_or_later():
    (requirement,) = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["slurm"]
    name, version = requirement.split("==")
    assert name == "snakemake-executor-plugin-slurm" and Version(version) >= Version("2.7.1")


# ------------------------------------------------------------------------------------------ on the test cluster


def run_through_slurm(workdir, *args) -> str:
    command = snakemake_command(workdir, "--executor", "slurm", "--profile", str(TEST_PROFILE), *args, cores=None)
    return run_cancelling_on_timeout(command, SLURM_TIMEOUT_S)


def scontrol_show_job(job_id: str) -> dict[str, str]:
    text = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def checkpoint_hashes(workdir) -> list[tuple[int, str]]:
    index = json.loads((workdir / "results/a/train/main/number/seed0/checkpoints.json").read_text())
    return [(c["step"], c["sha256"]) for c in index["checkpoints"]]


@pytest.mark.slurm
def test_tiny_pipeline_through_slurm_matches_a_local_run(slurm_cluster, tmp_path):
    on_slurm, local = copy_repo(tmp_path / "slurm"), copy_repo(tmp_path / "local")
    # The local run goes alongside: the SLURM run spends most of its time waiting for the scheduler.
    with subprocess.Popen(
        snakemake_command(local, TARGET), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env()
    ) as local_run:
        try:
            output = run_through_slurm(on_slurm, TARGET)
        finally:
            local_output, _ = local_run.communicate(timeout=SLURM_TIMEOUT_S)
    assert local_run.returncode == 0, local_output[-3000:]

    # Every job was a SLURM job of its own, and SLURM remembers it (MinJobAge=300 s).
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+?)/", output)
    # splits: train, test, and val (the best checkpoint on validation is chosen in the local train_outputs job)
    assert Counter(rule for _, rule in submitted) == {"split": 3, "train": 1, "evaluate_test": 1}, output[-3000:]
    assert len({job_id for job_id, _ in submitted}) == 5
    jobs = {job_id: (rule, scontrol_show_job(job_id)) for job_id, rule in submitted}
    for job_id, (rule, job) in jobs.items():
        assert job["JobState"] == "COMPLETED", job
        assert job["Comment"].startswith(f"rule_{rule}_wildcards_"), job  # the plugin tags each job with its rule
    (train,) = [job for rule, job in jobs.values() if rule == "train"]
    assert train["TresPerJob"] == "gres:gpu:1", train  # the rule's gpu=1 became --gpus=1
    assert train["CpusPerTres"] == "gres:gpu:1", train  # cpus_per_gpu (= threads) became --cpus-per-gpu=1
    assert train["TimeLimit"] == "04:00:00", train  # the rule's runtime on the first attempt: 240 min
    assert train["MinMemoryNode"] == "500M", train  # the test profile's set-resources
    assert all("TresPerJob" not in job for rule, job in jobs.values() if rule != "train")

    # The training job saw the GPU SLURM gave it (a fake one: torch finds no CUDA and trains on the CPU).
    train_log = (on_slurm / "logs/a/train/main/number/seed0.log").read_text()
    assert "device cpu, CUDA_VISIBLE_DEVICES=0" in train_log, train_log[:2000]

    # The same results as a local run, byte for byte.
    assert checkpoint_hashes(on_slurm) == checkpoint_hashes(local)
    assert [step for step, _ in checkpoint_hashes(local)] == [0, 20, 40, 60]
    for name in ("results/a/train/main/number/seed0/metrics.csv", "results/a/train/main/number/seed0/train_log.csv", TARGET):
        assert (on_slurm / name).read_bytes() == (local / name).read_bytes(), name
