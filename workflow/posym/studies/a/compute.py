"""Table 4 of paper A: the compute this run used, per stage and task, beside the paper's (App. I)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from posym.pipeline import config
from posym.pipeline.provenance import bf16_units

from .wall_times import duration

from . import paper

#: Which rules' wall times make up each stage of Table 4 (benchmark folders are named after the rules).
STAGES = {
    "train": "training",
    "evaluate_test": "evaluation",
    "evaluate_length": "evaluation",
    "scores": "scores",
    "frequency": "analyses",
    "geometry": "analyses",
    "discrepancy": "analyses",
    "flow": "analyses",
    "theory": "theory",
    "llm_probe": "LLM probes",
}

#: The committed result of benchmarks/gpu_check.sh on a GPU, which Table 4 shows when the repository has one.
GPU_CHECK = "gpu_check_cuda.json"
GPU_CHECK_STAGE = "GPU check: one task-seed of the paper config"
#: The committed training-rate benchmark (benchmarks/train_throughput.py), which Table 4 cites: one task-seed of the
#: paper config (its steps × its batch) at the rate measured for posym's compiled step and for HF GPT-J.
THROUGHPUT = "train_throughput.json"
THROUGHPUT_STAGE = "benchmark: one task-seed of the paper config at the measured training rate"
#: The contenders of train_throughput.json that Table 4 cites, in its order, each with what it is.
THROUGHPUT_CONTENDERS = {"posym_compiled_bf16": "posym", "posym_compiled": "posym", "hf_gptj": "HF GPT-J + AdamW"}


def compute_table(benchmarks: pd.DataFrame, hardware: str, gpu_check: Mapping | None = None, throughput: Mapping | None = None) -> pd.DataFrame:
    """Table 4: wall time per stage and task of this run beside the paper's, the GPU check's row, and the rows of
    the training-rate benchmark.

    A row's time is the mean over its jobs, a job being the stage's work for one seed or, for a training job
    that packs several seeds into one model, for all of them at once: ``seeds per job`` says how many seeds
    the time covers, so a packed job's time is never shown as one seed's. ``benchmarks`` is
    :func:`posym.studies.a.wall_times.read_benchmarks` of the run's files; ``gpu_check`` the JSON of
    benchmarks/gpu_check.sh (:func:`committed_result`), if any; ``throughput`` that of benchmarks/train_throughput.py
    (:func:`committed_result`), if any.
    """
    # One stage's jobs of the same seed(s) are one job of the table (evaluation: the test and length jobs).
    per_job = benchmarks.groupby(["stage", "task", "seed", "seeds"], dropna=False)["seconds"].sum().reset_index()
    ours = per_job.groupby(["stage", "task", "seeds"], dropna=False, sort=False)["seconds"].agg(["mean", "count"]).reset_index()
    published = _published_training()
    scores = " + ".join(r.duration for r in paper.COMPUTE.itertuples() if r.stage.startswith("scores"))
    rows = []
    for r in ours.itertuples():
        reference = published.get((r.stage, r.task), f"{scores} per model" if r.stage == "scores" else "")
        rows.append(
            {
                "stage": r.stage,
                "task": r.task,
                "ours (per job)": duration(r.mean),
                "seeds per job": "" if pd.isna(r.seeds) else int(r.seeds),
                "jobs": int(r.count),
                "ours: hardware": hardware,
                "paper (per seed)": reference,
                "paper: hardware": paper.COMPUTE_HARDWARE if reference else "",
            }
        )
    if gpu_check is not None:
        rows.append(gpu_check_row(gpu_check))
    if throughput is not None:
        rows += throughput_rows(throughput)
    return pd.DataFrame(rows)


def _published_training() -> dict[tuple[str, str], str]:
    """The paper's training time of one seed, by (stage, task)."""
    return {("training", r.task): r.duration for r in paper.COMPUTE.itertuples() if r.stage == "training"}


def gpu_check_row(check: Mapping) -> dict:
    """Table 4's row of benchmarks/gpu_check.sh: its training job of one task-seed, beside the paper's for that task.

    Only a check of the paper's configuration compares with the paper: a ``--size min`` check is refused. A check
    whose workflow stage did not finish has no job time: its row says so, with the step it reached and its measured
    seconds per step, never a time it did not take."""
    if check.get("benchmark") != "gpu_check" or check.get("size") != "paper":
        raise ValueError(f"not a paper-size result of benchmarks/gpu_check.sh (size {check.get('size')!r})")
    row = {"stage": GPU_CHECK_STAGE, "seeds per job": 1, "jobs": 1, "paper: hardware": paper.COMPUTE_HARDWARE}
    if "end_to_end" not in check:
        status = check.get("stages", {}).get("workflow", {}).get("status", "not run").replace("_", " ")
        reached = check.get("workflow_progress", {})
        rate = reached.get("seconds_per_step_median")
        ours = f"not finished ({status}" + (f" at step {reached['newest_checkpoint_step']}" if reached.get("newest_checkpoint_step") else "") + ")"
        if rate:
            ours += f"; {1000 * rate:.0f} ms a step, so {reached['steps']} steps ≈ {duration(reached['steps'] * rate)} without checkpoints"
        task = "number"  # the check's task-seed (benchmarks/gpu_check_summary.py: TASK, SEED)
        return {**row, "task": task, "ours (per job)": ours, "ours: hardware": check["machine"]["device"],
                "paper (per seed)": _published_training().get(("training", task), "")}  # fmt: skip
    run = check["end_to_end"]
    return {
        **row,
        "task": run["task"],
        "ours (per job)": duration(run["train_job_seconds"]),
        "ours: hardware": f"{check['machine']['device']} ({run['steps']} steps, {run['checkpoints']} checkpoints, {run['precision']})",
        "paper (per seed)": _published_training().get(("training", run["task"]), ""),
    }


def throughput_rows(result: Mapping) -> list[dict]:
    """Table 4's rows of benchmarks/train_throughput.py: one task-seed of the paper config at the rate it measured
    for posym's compiled step (bf16 and fp32) and for HF GPT-J in fp32, on the machine it names, with the share of
    that machine's matmul peak and the ratio to HF, beside the paper's training of that task.

    Only a paper-size result whose rates count the config's batch is cited: a ``--size min`` result, or one whose
    samples per second are not the config's batch per measured step (before 2026-12-04 the benchmark counted posym
    at 64 while it trained at 192), gives no rows. The batch is read from the rates themselves, so that a result
    written before the JSON recorded ``batch_per_member`` is checked as well."""
    if result.get("benchmark") != "train_throughput" or result.get("size") != "paper":
        return []
    train = config.study_defaults("a")["train"]
    cited = {name: r for name, r in result["results"].items() if name in THROUGHPUT_CONTENDERS}
    counted = {round(r["samples_per_second"] * r["step_seconds_median"] / r.get("members", 1)) for r in cited.values()}
    if not cited or counted != {train["batch_size"]}:
        return []
    about = result["machine"]
    flags = f", bf16 units: {bf16_units(about['cpu_flags'])}" if "cpu_flags" in about else ""
    rows = []
    for name, what in THROUGHPUT_CONTENDERS.items():
        r = cited.get(name)
        if r is None:
            continue
        step = f", {r.get('step', 'compiled')} step" if name.startswith("posym") else ""
        versus = "" if name == "hf_gptj" else f", {result['ratios'][f'{name} / HF at fp32']:.2f}× HF GPT-J fp32"
        rows.append(
            {
                "stage": THROUGHPUT_STAGE,
                "task": "number",  # the benchmark's task
                "ours (per job)": duration(train["steps"] * train["batch_size"] / r["samples_per_second"]),
                "seeds per job": 1,
                "jobs": "",  # a time from a measured rate, not a job of this run
                "ours: hardware": (
                    f"{about['device']} ({about['threads']} threads{flags}): {what}{step}, {r['precision']}, "
                    f"{r['samples_per_second']:.0f} samples/s, {100 * r['share_of_peak']:.0f} % of the {r['precision']} "
                    f"matmul peak ({result['peak_gflops'][r['precision']]:.0f} GFLOP/s){versus}"
                ),
                "paper (per seed)": _published_training().get(("training", "number"), ""),
                "paper: hardware": paper.COMPUTE_HARDWARE,
            }
        )
    return rows


def committed_result(paths: Iterable[str | Path] | None, name: str) -> dict | None:
    """The committed benchmark result called ``name`` (:data:`GPU_CHECK`, :data:`THROUGHPUT`) among ``paths``
    (benchmarks/results/*.json), or None."""
    found = [Path(p) for p in paths or () if Path(p).name == name]
    return json.loads(found[0].read_text()) if found else None
