"""Table 4 (paper A's compute): wall times of single-seed and packed jobs, the GPU check's row and the training-rate benchmark's rows."""

import json
from pathlib import Path

import pandas as pd
import pytest

from posym.studies.a import wall_times
from posym.studies.a import compute, paper


def write_benchmark(folder, name, seconds):
    """A Snakemake benchmark file (its `s` column is the wall seconds) at ``folder/name``."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"s": [seconds], "h:m:s": ["-"], "max_rss": [1.0]}).to_csv(path, sep="\t", index=False)
    return path


@pytest.fixture
def packed_run(tmp_path):
    """The benchmark files of a run whose Number seeds trained packed and whose Letter seeds trained apart."""
    bench = tmp_path / "results" / "a" / "benchmarks"
    return [
        write_benchmark(bench, "train/number-seed0+1+2.tsv", 900.0),
        write_benchmark(bench, "train/letter-seed0.tsv", 400.0),
        write_benchmark(bench, "train/letter-seed1.tsv", 600.0),
        write_benchmark(bench, "evaluate_test/number-seed0.tsv", 10.0),
        write_benchmark(bench, "evaluate_length/number-seed0.tsv", 30.0),
        write_benchmark(bench, "evaluate_test/number-seed1.tsv", 20.0),
        write_benchmark(bench, "evaluate_length/number-seed1.tsv", 60.0),
        write_benchmark(bench, "theory.tsv", 5.0),
    ]


def test_read_benchmarks_names_the_seeds_of_a_packed_job(packed_run):
    frame = wall_times.read_benchmarks(packed_run, compute.STAGES)
    theory = frame[frame["rule"] == "theory"].iloc[0]
    assert theory["task"] == "all" and pd.isna(theory["seed"]) and pd.isna(theory["seeds"])  # not a per-seed job
    rows = frame.set_index(["rule", "task", "seed"])
    assert rows.loc[("train", "number", "0+1+2"), "seeds"] == 3
    assert rows.loc[("train", "letter", "1"), "seeds"] == 1
    assert rows.loc[("train", "number", "0+1+2"), "seconds"] == 900.0
    assert rows.loc[("train", "number", "0+1+2"), "stage"] == "training"


def test_a_packed_job_is_one_job_of_all_its_seeds(packed_run):
    table = compute.compute_table(wall_times.read_benchmarks(packed_run, compute.STAGES), "this machine")
    rows = table.set_index(["stage", "task"])
    packed, apart = rows.loc[("training", "number")], rows.loc[("training", "letter")]
    # The packed job's 15 min cover 3 seeds: shown as one job of 3 seeds, not as 3 seeds of 15 min or 5 min each.
    assert (packed["ours (per job)"], packed["seeds per job"], packed["jobs"]) == ("15 min 0 s", 3, 1)
    assert (apart["ours (per job)"], apart["seeds per job"], apart["jobs"]) == ("8 min 20 s", 1, 2)
    published = paper.COMPUTE.set_index(["stage", "task"])
    assert packed["paper (per seed)"] == published.loc[("training", "number"), "duration"]
    # A seed's evaluation is its test and length jobs together.
    evaluation = rows.loc[("evaluation", "number")]
    assert (evaluation["ours (per job)"], evaluation["seeds per job"], evaluation["jobs"]) == ("1 min 0 s", 1, 2)
    assert rows.loc[("theory", "all"), "seeds per job"] == ""
    assert compute.GPU_CHECK_STAGE not in table["stage"].tolist()


def test_packed_and_single_jobs_of_one_task_are_rows_of_their_own(tmp_path):
    bench = tmp_path / "benchmarks"
    files = [write_benchmark(bench, "train/number-seed0+1.tsv", 100.0), write_benchmark(bench, "train/number-seed2.tsv", 70.0)]
    table = compute.compute_table(wall_times.read_benchmarks(files, compute.STAGES), "here")
    assert sorted(zip(table["seeds per job"], table["ours (per job)"])) == [(1, "1 min 10 s"), (2, "1 min 40 s")]


def gpu_check(size="paper", seconds=42.0):
    """The fields of gpu_check_<device>.json that Table 4 reads (benchmarks/gpu_check.sh writes them)."""
    return {
        "benchmark": "gpu_check",
        "size": size,
        "device": "cuda",
        "machine": {"device": "NVIDIA H200"},
        "end_to_end": {"task": "number", "seed": 0, "steps": 6750, "checkpoints": 136, "precision": "bf16", "train_job_seconds": seconds},
    }


def test_the_gpu_check_is_a_row_beside_the_papers_training(packed_run, tmp_path):
    (tmp_path / "perf").mkdir()
    path = tmp_path / "perf" / compute.GPU_CHECK
    path.write_text(json.dumps(gpu_check(seconds=75.0)))
    other = tmp_path / "perf" / "train_throughput.json"
    other.write_text("{}")
    check = compute.committed_result([other, path], compute.GPU_CHECK)
    table = compute.compute_table(wall_times.read_benchmarks(packed_run, compute.STAGES), "this machine", check)
    row = table.iloc[-1]
    assert row["stage"] == compute.GPU_CHECK_STAGE and row["task"] == "number"
    assert row["ours (per job)"] == "1 min 15 s" and row["seeds per job"] == 1
    assert row["paper (per seed)"] == paper.COMPUTE.set_index(["stage", "task"]).loc[("training", "number"), "duration"]
    assert "NVIDIA H200" in row["ours: hardware"] and "6750 steps" in row["ours: hardware"]
    assert row["paper: hardware"] == paper.COMPUTE_HARDWARE


def test_without_a_committed_gpu_check_there_is_no_row(tmp_path):
    other = tmp_path / "train_throughput.json"
    other.write_text("{}")
    assert compute.committed_result([other], compute.GPU_CHECK) is None
    assert compute.committed_result(None, compute.GPU_CHECK) is None


def test_a_min_size_gpu_check_is_not_set_beside_the_paper():
    with pytest.raises(ValueError, match="paper-size"):
        compute.gpu_check_row(gpu_check(size="min"))


def test_a_gpu_check_whose_workflow_did_not_finish_shows_how_far_it_got_not_a_time():
    check = {**gpu_check(), "stages": {"workflow": {"status": "timed_out"}},
             "workflow_progress": {"newest_checkpoint_step": 3550, "seconds_per_step_median": 0.055, "steps": 6750}}  # fmt: skip
    del check["end_to_end"]
    row = compute.gpu_check_row(check)
    assert row["ours (per job)"] == "not finished (timed out at step 3550); 55 ms a step, so 6750 steps ≈ 6 min 11 s without checkpoints"
    assert row["paper (per seed)"] == paper.COMPUTE.set_index(["stage", "task"]).loc[("training", "number"), "duration"]
    del check["workflow_progress"]
    assert compute.gpu_check_row(check)["ours (per job)"] == "not finished (timed out)"


def throughput(size="paper", counted=192, **extra):
    """The fields of train_throughput.json that Table 4 reads, as benchmarks/train_throughput.py writes them; each
    rate counts ``counted`` samples per measured step."""

    def result(rate, precision, step):
        return {"precision": precision, "step": step, "members": 1, "samples_per_second": rate, "step_seconds_median": counted / rate, "share_of_peak": 0.3}

    return {
        "benchmark": "train_throughput",
        "size": size,
        "machine": {"device": "AMD EPYC", "threads": 2, "cpu_flags": {"avx512_bf16": True, "amx_bf16": False}},
        "peak_gflops": {"fp32": 156.0, "bf16": 380.0},
        "results": {
            "posym": result(300.0, "fp32", "eager"), "posym_compiled": result(400.0, "fp32", "compiled"), "hf_gptj": result(225.0, "fp32", "hf"),
            "posym_compiled_bf16": result(900.0, "bf16", "compiled"), "hf_gptj_bf16": result(300.0, "bf16", "hf"),
        },  # fmt: skip
        "ratios": {"posym_compiled_bf16 / HF at fp32": 4.0, "posym_compiled / HF at fp32": 400 / 225},
        **extra,
    }


def test_the_training_rate_benchmark_is_cited_as_rows_of_one_task_seed(packed_run, tmp_path):
    path = tmp_path / compute.THROUGHPUT
    path.write_text(json.dumps(throughput()))
    found = compute.committed_result([tmp_path / compute.GPU_CHECK, path], compute.THROUGHPUT)
    table = compute.compute_table(wall_times.read_benchmarks(packed_run, compute.STAGES), "this machine", None, found)
    rows = table[table["stage"] == compute.THROUGHPUT_STAGE]
    assert list(rows["ours (per job)"]) == ["24 min 0 s", "54 min 0 s", "1 h 36 min"]  # 6750 steps x 192 samples at 900, 400, 225 samples/s
    assert set(rows["task"]) == {"number"} and set(rows["seeds per job"]) == {1}
    bf16, fp32, hf = (row["ours: hardware"] for _, row in rows.iterrows())
    assert bf16 == "AMD EPYC (2 threads, bf16 units: AVX-512 BF16, no AMX): posym, compiled step, bf16, 900 samples/s, 30 % of the bf16 matmul peak (380 GFLOP/s), 4.00× HF GPT-J fp32"
    assert fp32.endswith("posym, compiled step, fp32, 400 samples/s, 30 % of the fp32 matmul peak (156 GFLOP/s), 1.78× HF GPT-J fp32")
    assert hf.endswith("HF GPT-J + AdamW, fp32, 225 samples/s, 30 % of the fp32 matmul peak (156 GFLOP/s)")
    assert set(rows["paper (per seed)"]) == {paper.COMPUTE.set_index(["stage", "task"]).loc[("training", "number"), "duration"]}


def test_the_committed_training_rate_benchmark_is_cited():
    """The committed JSON, written before the benchmark recorded the CPU's flags and each contender's step kind,
    is cited with what it records."""
    committed = compute.committed_result([Path(__file__).resolve().parents[3] / "benchmarks" / "results" / compute.THROUGHPUT], compute.THROUGHPUT)
    rows = compute.throughput_rows(committed)
    assert len(rows) == 3 and all(row["ours: hardware"].startswith(committed["machine"]["device"]) for row in rows)
    assert "posym, compiled step, bf16" in rows[0]["ours: hardware"]


def test_a_min_size_or_miscounted_training_rate_is_not_cited():
    assert compute.throughput_rows(throughput(size="min")) == []
    # before 2026-12-04 the rates counted 64 samples a step while posym trained at 192
    assert compute.throughput_rows(throughput(counted=64)) == []
    assert compute.committed_result(None, compute.THROUGHPUT) is None
    table = compute.compute_table(pd.DataFrame(columns=["stage", "task", "seed", "seeds", "seconds"]), "here", None, throughput(size="min"))
    assert table.empty
