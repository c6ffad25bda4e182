"""The benchmark scripts run and write the JSON the report shows (their figures are not asserted:
speed is measured by the benchmarks themselves, never by timed tests)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_throughput_writes_every_contender_and_ratio(tmp_path):
    out = tmp_path / "train_throughput.json"
    command = [sys.executable, "benchmarks/train_throughput.py", "--rounds", "1", "--steps", "1", "--packed", "2", "--threads", "1", "--size", "min", "--out", str(out)]  # fmt: skip
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["size"] == "min" and report["flops_per_sample"] < 1e7  # the tiny model: seconds on any CPU
    results = report["results"]
    assert set(results) == {"posym", "hf_gptj", "posym_packed2", "posym_bf16", "hf_gptj_bf16", "posym_packed2_bf16"}
    for name, r in results.items():
        assert r["samples_per_second"] > 0 and r["matmul_seconds_per_step"] > 0, name
        # Matmuls are part of a step: the matmul-only rate bounds the measured one.
        assert r["samples_per_second_if_only_matmuls"] > r["samples_per_second"], name
    expected = results["posym_packed2_bf16"]["samples_per_second"] / results["hf_gptj"]["samples_per_second"]
    assert report["ratios"]["posym_packed2_bf16 / HF at fp32"] == expected
    assert set(report["peak_gflops"]) == {"fp32", "bf16"}
    assert report["device"] == "cpu" and report["machine"]["device"]
    assert report["summary"]


def read_tiny() -> dict:
    import yaml

    return yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())["a"]


def test_the_benchmarks_refuse_what_they_cannot_run():
    """Bad arguments, and CUDA where torch sees none, stop the scripts before they train anything."""
    bad = {  # command -> what its error says
        ("bash", "benchmarks/gpu_check.sh", "--device", "tpu"): "--device cuda or cpu, not tpu",
        ("bash", "benchmarks/gpu_check.sh", "--size", "huge"): "--size paper or min, not huge",
        (sys.executable, "benchmarks/pack_seeds.py", "--seeds", "1"): "--seeds must be at least 2",
    }
    import torch

    if not torch.cuda.is_available():
        bad[("bash", "benchmarks/gpu_check.sh", "--device", "cuda")] = "torch sees no CUDA device"
        bad[(sys.executable, "benchmarks/train_throughput.py", "--device", "cuda")] = "no CUDA device is available"
    for command, message in bad.items():
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (command, result.stdout, result.stderr)
    usage = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--help"], cwd=REPO, capture_output=True, text=True, check=True)
    assert "--device cuda|cpu" in usage.stdout and "set -euo" not in usage.stdout


@pytest.mark.slow
def test_pack_seeds_times_separate_and_packed_jobs(tmp_path):
    out = tmp_path / "pack_seeds.json"
    command = [
        sys.executable, "benchmarks/pack_seeds.py", "--seeds", "2", "--cores", "2", "--steps", "4", "--n-layer", "1",
        "--d-model", "16", "--train-samples", "256", "--test-samples", "128", "--checkpoints", "1", "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    median = report["wall_seconds_median"]
    assert set(median) == {"separate", "packed", "one_seed"} and all(s > 0 for s in median.values())
    assert report["ratios"]["separate / packed"] == median["separate"] / median["packed"]
    assert report["wall_seconds_per_seed"]["packed"] == median["packed"] / 2
    (separate,), (packed,), (one,) = (report["train_seconds"][name] for name in ("separate", "packed", "one_seed"))
    assert len(separate) == 2 and len(one) == 1
    # The packed seeds trained in one trainer: one training time, recorded by each seed.
    assert len(packed) == 2 and packed[0] == packed[1] > 0
    # A process's wall time holds its trainer's time and the start-up around it.
    assert median["one_seed"] > one[0] and median["packed"] > packed[0]
    assert report["settings"]["train"]["steps"] == 4 and report["settings"]["train"]["device"] == "cpu"
    assert report["summary"] and report["machine"]["cores_used"] == 2


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_at_min_size(tmp_path):
    committed = REPO / "benchmarks" / "results" / "train_throughput.json"
    before = committed.read_bytes()
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    command = ["bash", "benchmarks/gpu_check.sh", "--device", "cpu", "--size", "min", "--out", str(out), "--scratch", str(scratch)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert committed.read_bytes() == before  # the committed CPU benchmark is not a min-size run's
    throughput = json.loads((out / "train_throughput_cpu.json").read_text())
    assert throughput["device"] == "cpu" and {"posym", "hf_gptj", "posym_packed5", "posym_packed5_bf16"} <= set(throughput["results"])
    check = json.loads((out / "gpu_check_cpu.json").read_text())
    assert (check["benchmark"], check["device"], check["size"]) == ("gpu_check", "cpu", "min")
    assert check["gpu_tests"]["exit_code"] in (0, 5) and check["gpu_tests"]["failures"] == check["gpu_tests"]["errors"] == 0
    assert check["throughput"]["results"] == throughput["results"]
    tiny, run = read_tiny()["train"], check["end_to_end"]
    assert (run["task"], run["seed"], run["device"], run["precision"]) == ("number", 0, "cpu", "fp32")
    assert run["steps"] == tiny["steps"] and run["checkpoints"] == tiny["steps"] // tiny["checkpoint_every"] + 1
    assert run["test_samples"] == read_tiny()["data"]["test_samples"] and 0 <= run["test_accuracy"] <= 1
    # The training job's process holds its trainer; the workflow ran it and then the evaluation.
    assert 0 < run["trainer_seconds"] < run["train_job_seconds"]
    assert run["workflow_seconds"] > run["train_job_seconds"] + run["evaluate_job_seconds"]
    assert check["five_seeds_packed_estimate"]["seeds"] == 5
    # A tiny model is not compared with the paper's training, nor held to the GPU targets.
    assert not {"paper", "targets"} & set(check) and check["summary"]
    assert (scratch / "workflow" / "results" / "a" / "benchmarks" / "train" / "main" / "number-seed0.tsv").is_file()


def test_qk_fingerprint_speed_compares_each_path_with_its_reference(tmp_path):
    out = tmp_path / "qk.json"
    command = [sys.executable, "benchmarks/qk_fingerprint_speed.py", "--repeats", "1", "--checkpoints", "1", "--out", str(out)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["heads"] == 12 and set(report["ratios"]) == {"null: whole frames / posym", "model: rank-k core / posym"}
    assert all(ratio > 0 for ratio in report["ratios"].values())
    # the fast null draws the same distribution as the spec's frames (R = 300: Monte Carlo error ~0.01)
    ours, frames = report["null_means"]["posym"], report["null_means"]["two whole frames per draw"]
    assert abs(ours["dir_frac"] - frames["dir_frac"]) < 0.01 and abs(ours["D_head"] - frames["D_head"]) < 0.02
    assert report["summary"]


def test_llm_probe_speed_compares_batches_with_the_loop_on_the_same_items(tmp_path):
    pytest.importorskip("transformers")
    from conftest import build_tiny_llm

    model = build_tiny_llm(tmp_path / "tiny-llm")
    out = tmp_path / "llm.json"
    command = [sys.executable, "benchmarks/llm_probe_speed.py", "--model", str(model), "--items", "3", "--windows", "12", "24"]
    command += ["--batch-size", "4", "--threads", "1", "--out", str(out)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["items"] == 2 * 2 * 3 and set(report["seconds"]) == {"loop", "batched", "batched, bf16"}
    assert set(report["ratios"]) == {"batched / loop", "batched, bf16 / loop"} and all(r > 0 for r in report["ratios"].values())
    # in fp32, batching changes no answer of this model (tests/studies/a/test_a_llm.py checks the scores)
    assert report["agreement_with_loop"]["batched"] == {"greedy": 1.0, "restricted": 1.0}
    assert report["summary"]
