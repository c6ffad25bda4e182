"""gpu_check_<device>.json, the last step of benchmarks/gpu_check.sh: what each stage found, from the files it left.

Every stage's status, exit code, time and deadline (``stages``), and for those that passed their results: the GPU
tests' counts and the names of the failed ones (``gpu_tests``), the throughput run (``throughput``, its own JSON
beside this one), the workflow's job of one task-seed (``end_to_end``) or, where that stage did not finish, the
newest checkpoint it reached (``workflow_progress``). At paper size, the paper's training time for that task and
the issue's targets for an H100/H200-class GPU. ``summary`` holds the lines the report shows. Exits 1 when a stage
that was asked for did not pass, so that the check's exit code says so.

    python benchmarks/gpu_check_summary.py --device cuda --size paper --scratch DIR --out DIR --budget 420 --started EPOCH
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmark_report import write_report

TASK, SEED = "number", 0
#: The statuses of a stage that count as done (no_tests: no test carries the gpu mark, nothing to check).
DONE = ("passed", "no_tests")
#: At most this many files come back from the GPU machine's $OUT (/work/.library/device/README.md).
MAX_FILES = 8


def read_stages(path: Path) -> dict[str, dict]:
    """The stage file of gpu_check.sh: one ``name status exit seconds deadline`` line per stage that was asked for."""
    stages = {}
    with open(path, newline="") as handle:
        for name, status, code, seconds, limit in csv.reader(handle, delimiter="\t"):
            stages[name] = {
                "status": status,
                "exit_code": int(code) if code else None,
                "seconds": float(seconds),
                "deadline_seconds": int(limit),
            }
    return stages


def gpu_tests(xml: Path) -> dict | None:
    """The GPU tests' counts from pytest's JUnit XML, and the tests that failed, by name."""
    if not xml.is_file():
        return None
    suite = ET.parse(xml).getroot().find("testsuite")
    counts = {key: int(suite.get(key)) for key in ("tests", "failures", "errors", "skipped")}
    cases = suite.findall("testcase")
    failed = sorted(c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None)
    skipped = {c.get("name") for c in cases if c.find("skipped") is not None}
    # The tests that hold a step to no host synchronisation (torch.cuda.set_sync_debug_mode("error")).
    sync = [c.get("name") for c in cases if "synchronise" in c.get("name")]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "passed": passed, "failed": failed, "sync_free_tests": sync,
            "sync_free": bool(sync) and not (set(sync) & (set(failed) | skipped))}  # fmt: skip


def end_to_end(workflow: Path, seconds: float) -> dict:
    """The workflow's training and evaluation jobs of the task-seed, from their outputs and Snakemake's benchmarks."""
    import pandas as pd

    index = json.loads((workflow / f"results/a/train/main/{TASK}/seed{SEED}/checkpoints.json").read_text())
    bench = workflow / "results/a/benchmarks"
    job_seconds = float(pd.read_csv(bench / f"train/main/{TASK}-seed{SEED}.tsv", sep="\t")["s"].iloc[-1])
    eval_seconds = float(pd.read_csv(bench / f"evaluate_test/main/{TASK}-seed{SEED}.tsv", sep="\t")["s"].iloc[-1])
    test = pd.read_csv(workflow / f"results/a/eval/main/{TASK}/seed{SEED}/test.csv")
    return {
        "task": TASK,
        "seed": SEED,
        "device": index["device"],
        "precision": index["train"]["precision"],  # as the trainer resolved it ("auto": bf16 on CUDA, fp32 on a CPU)
        "steps": index["train"]["steps"],
        "checkpoints": len(index["checkpoints"]),
        "eval_samples": index["train"]["eval_samples"],
        "train_job_seconds": job_seconds,  # Snakemake's benchmark of the training job: the whole process
        "trainer_seconds": index["train_seconds"],  # the trainer's own time: steps and checkpoints
        "evaluate_job_seconds": eval_seconds,
        "workflow_seconds": seconds,  # the whole DAG: data, training, tables, evaluation
        "test_accuracy": float(test["accuracy"].iloc[-1]),  # the overall row comes last
        "test_samples": int(test["n"].iloc[-1]) if "n" in test else None,
    }


#: The trainer's logging-window line: "step 300/6750 loss 4.5900 lr 3.99e-05  0.048 s/step (1 members)".
STEP_LINE = re.compile(r"step (\d+)/(\d+) loss \S+ lr \S+\s+([0-9.]+) s/step")


def step_rate(lines) -> dict:
    """The training job's seconds per step over its logging windows (steps only: checkpoints and their evaluations
    fall between windows), and the steps of the whole run at that rate."""
    windows = [(int(m.group(1)), int(m.group(2)), float(m.group(3))) for line in lines if (m := STEP_LINE.search(line))]
    if not windows:
        return {}
    median = statistics.median(w[2] for w in windows)
    steps = windows[-1][1]
    return {"logged_windows": len(windows), "last_logged_step": windows[-1][0], "seconds_per_step_median": median,
            "steps": steps, "projected_step_minutes": steps * median / 60}  # fmt: skip


def progress(workflow: Path) -> dict:
    """How far an unfinished workflow stage trained: its newest checkpoint's step (None before the first), and the
    training job's measured seconds per step from its log."""
    steps = [int(m.group(1)) for p in workflow.glob(f"results/a/train/main/{TASK}/seed{SEED}/checkpoints/step-*")
             if (m := re.fullmatch(r"step-(\d+)", p.name))]  # fmt: skip
    lines = [line for log in sorted(workflow.glob(f"logs/a/train/**/{TASK}/**/*.log")) for line in log.read_text(errors="replace").splitlines()]
    return {"newest_checkpoint_step": max(steps, default=None), **step_rate(lines)}


def packed_estimate(throughput: dict, precision: str) -> tuple[dict, str | None]:
    """Every seed of the packed contender through its training steps at ``precision`` (checkpoints left out), and the
    key of its ratio to HF at that precision (train_throughput.py's names: posym_packed5_bf16)."""
    suffix = "" if precision == "fp32" else f"_{precision}"
    results = throughput["results"]
    found = [m for m in (re.fullmatch(rf"posym_packed(\d+){suffix}", name) for name in results) if m]
    if not found:
        return {}, None
    packed, members = found[0].group(0), int(found[0].group(1))
    estimate = {"contender": packed, "seeds": members, "minutes": results[packed]["minutes_per_paper_task_seed"] * members}
    return estimate, f"{packed} / HF at {precision}"


def machine(device: str) -> dict:
    import torch

    from posym.pipeline.provenance import cpu_name

    name = torch.cuda.get_device_name(0) if device == "cuda" else cpu_name()
    return {"platform": platform.platform(), "device": name, "cpus": os.cpu_count(), "cuda": torch.version.cuda}


def summarise(args) -> dict:
    import torch

    from posym.studies.a import paper

    out, workflow = args.out, args.scratch / "workflow"
    stages = read_stages(args.scratch / "stages.tsv")
    done = {name for name, stage in stages.items() if stage["status"] in DONE}
    check = {
        "benchmark": "gpu_check",
        "what": "GPU tests, training throughput (posym, posym packed, HF GPT-J) and one task-seed of the config trained end to end",
        "size": args.size,
        "device": args.device,
        "machine": machine(args.device),
        "torch": torch.__version__,
        "budget_seconds": args.budget,
        "stages": stages,
    }
    tests = gpu_tests(out / "gpu_tests.xml") if "tests" in stages else None
    if tests is not None:
        check["gpu_tests"] = {"exit_code": stages["tests"]["exit_code"], **tests}
    throughput_path = out / f"train_throughput_{args.device}.json"
    # A run cut inside its profile has written its timings already: they count, marked unprofiled.
    throughput = json.loads(throughput_path.read_text()) if "throughput" in stages and throughput_path.is_file() else None
    if throughput is not None:
        check["throughput"] = {"file": throughput_path.name, "results": throughput["results"], "ratios": throughput["ratios"],
                               "profiled": throughput.get("profiled_steps") is not None}  # fmt: skip
    run = end_to_end(workflow, stages["workflow"]["seconds"]) if "workflow" in done else None
    if run is not None:
        check["end_to_end"] = run
    elif "workflow" in stages:
        check["workflow_progress"] = progress(workflow)

    # The packed seeds at the precision the job trained at (the trainer's "auto": bf16 on a GPU, fp32 on a CPU).
    precision = run["precision"] if run else ("bf16" if args.device == "cuda" else "fp32")
    estimate, ratio_key = packed_estimate(throughput, precision) if throughput else ({}, None)
    ratios = throughput["ratios"] if throughput else {}
    if estimate:
        check["five_seeds_packed_estimate"] = estimate
    compared = {}
    # Only the paper's configuration compares with the paper's time and the targets (for an H100/H200-class
    # GPU); a min-size run trains a tiny model.
    if args.size == "paper":
        published = paper.COMPUTE.set_index(["stage", "task"]).loc[("training", TASK)]
        reference = {"seconds": int(published["seconds"]), "duration": published["duration"], "hardware": paper.COMPUTE_HARDWARE}
        check["paper"] = reference
        targets = {}
        if run:
            check["ratios"] = {"paper / ours (training job)": reference["seconds"] / run["train_job_seconds"]}
            targets["one task-seed, training job <= 60 s"] = run["train_job_seconds"] <= 60
            compared = {
                f"paper: the same on {reference['hardware']}": reference["duration"],
                "paper / ours": f"{check['ratios']['paper / ours (training job)']:.1f}",
            }
        if estimate:
            targets[f"{estimate['seeds']} seeds packed (estimate) <= 90 s"] = estimate["minutes"] * 60 <= 90
        if ratio_key in ratios:
            targets[f"{ratio_key} >= 10"] = ratios[ratio_key] >= 10
        if tests is not None and tests["sync_free_tests"]:
            targets["no host sync in a step (the GPU tests under sync debug mode)"] = tests["sync_free"]
        check["targets"] = targets
    check["check_seconds"] = time.time() - args.started

    minutes = lambda s: f"{s / 60:.1f} min ({s:.0f} s)"
    config = "the paper config" if args.size == "paper" else "tests/configs/tiny.yaml"
    lines = {"device": f"{check['machine']['device']} ({args.device}, torch {torch.__version__})"}
    for name, stage in stages.items():
        if stage["status"] == "skipped":
            lines[f"stage {name}"] = f"skipped: the {args.budget} s budget was spent"
        else:
            lines[f"stage {name}"] = f"{stage['status'].replace('_', ' ')}, {stage['seconds']:.0f} s of its {stage['deadline_seconds']} s deadline"
    if tests is not None:
        failed = tests["failures"] + tests["errors"]
        lines["GPU tests"] = f"{tests['passed']} passed, {tests['skipped']} skipped, {failed} failed" + (f" ({', '.join(tests['failed'])})" if failed else "")
    if run:
        label = f"training job, {TASK} seed {SEED} of {config} ({run['steps']} steps, {run['checkpoints']} checkpoints, {run['precision']})"
        lines[label] = minutes(run["train_job_seconds"])
        lines.update(compared)
        lines["test accuracy"] = f"{run['test_accuracy']:.4f}"
        lines["whole workflow (data, training, evaluation)"] = minutes(run["workflow_seconds"])
    elif "workflow" in stages:
        reached = check["workflow_progress"]["newest_checkpoint_step"]
        lines["workflow"] = f"{stages['workflow']['status'].replace('_', ' ')}; newest checkpoint: " + ("none" if reached is None else f"step {reached}")
        rate = check["workflow_progress"]
        if "seconds_per_step_median" in rate:
            lines["training steps, median of the logged windows"] = (
                f"{1000 * rate['seconds_per_step_median']:.0f} ms a step; {rate['steps']} steps would take {rate['projected_step_minutes']:.1f} min (checkpoints not counted)"
            )
    if estimate:
        lines[f"{estimate['seeds']} seeds packed, estimated from throughput (steps only)"] = minutes(estimate["minutes"] * 60)
    if ratio_key in ratios:
        lines[ratio_key] = f"{ratios[ratio_key]:.2f}"
    lines.update({f"target: {name}": "met" if met else "not met" for name, met in check.get("targets", {}).items()})
    lines["whole check"] = f"{minutes(check['check_seconds'])} of a {args.budget} s budget"
    check["summary"] = lines
    check["files"] = sorted({p.name for p in out.iterdir() if p.is_file()} | {f"gpu_check_{args.device}.json"})
    if len(check["files"]) > MAX_FILES or any(p.is_dir() for p in out.iterdir()):
        raise SystemExit(f"gpu_check_summary.py: {out} holds more than {MAX_FILES} flat files: {sorted(p.name for p in out.iterdir())}")
    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", required=True, choices=["cuda", "cpu"])
    parser.add_argument("--size", required=True, choices=["paper", "min"])
    parser.add_argument("--scratch", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--budget", required=True, type=int)
    parser.add_argument("--started", required=True, type=float, help="when the check started (seconds since the epoch)")
    args = parser.parse_args(argv)
    check = summarise(args)
    write_report(check, args.out / f"gpu_check_{args.device}.json")
    missed = [name for name, stage in check["stages"].items() if stage["status"] not in DONE]
    if missed:
        print(f"gpu_check: not done: {', '.join(missed)} (the stages' logs are in {args.out})", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
