"""Packing seeds on a CPU: N seeds trained as N separate ``posym train`` jobs against one packed job.

On the same cores, in one run, each as the workflow would run it (whole processes, wall clock):

* ``separate``: one ``posym train`` process per seed, 1 thread each, at most ``--cores`` at a time
  (``snakemake --cores C`` with ``threads: 1``);
* ``packed``: one ``posym train`` process of all the seeds packed into one model, ``--cores`` threads
  (the training job of ``train.pack_seeds: true``);
* ``one_seed``: one process of one seed with ``--cores`` threads. A pack of one seed is the same job
  as a separate job of that seed (the same command), so this is both (c) and (d): what packing
  leaves the default configuration (one seed per task).

The result is the ratio of wall times separate / packed (> 1: packing is faster). The variants
alternate within each round, so a busy machine slows them alike. Every seed trains on its own
stored splits, made beforehand with ``posym data`` (not timed), as the pipeline's jobs do.

The default size is paper A's task ``number`` at the quick configuration's model (6 layers,
d_model 128, batch 64) for 100 steps: 2-3 minutes in all on 2 quiet cores. The options shrink it.
Other work on the same cores falsifies the comparison (a job of 2 threads on 2 cores that share one with
another process slows down many times, one of 1 thread much less): the JSON records the load average
before and after.

    python benchmarks/pack_seeds.py [--seeds 3] [--cores N] [--steps 100] [--rounds 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark_report import write_report
from posym.pipeline.provenance import cpu_name

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TASK = "number"
SEED_OFFSET = 42  # dataset seed = 42 + run seed, as paper A's pipeline makes its splits


def posym(*words) -> list[str]:
    """A ``posym`` command through this interpreter (the entry point may not be on PATH)."""
    return [sys.executable, "-m", "posym.cli", *map(str, words)]


def environment(threads: int) -> dict[str, str]:
    """The environment of a job with ``threads`` threads: this repository's posym first on the path, and
    the thread variables Snakemake sets for a job (idle OpenMP threads spin and steal the other jobs' cores)."""
    path = os.pathsep.join(filter(None, [str(REPO / "workflow"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def make_data(work: Path, seeds: list[int], train_samples: int, test_samples: int) -> dict[int, tuple[Path, Path]]:
    """Each seed's stored train and test splits, made by ``posym data`` as the pipeline's ``split`` jobs make
    them (in this process: the splits are not timed, and a process start per split costs seconds)."""
    sys.path.insert(0, str(REPO / "workflow"))  # this repository's posym, as the jobs get it
    from posym import cli

    files = {}
    for seed in seeds:
        folder = work / "data" / f"seed{seed}"
        train, test = folder / "train.safetensors", folder / "test.safetensors"
        for split, n, path in (("train", train_samples, train), ("test", test_samples, test)):
            if cli.main(["data", "--task", TASK, "--split", split, "--n", str(n), "--seed", str(SEED_OFFSET + seed), "--out", str(path)]):
                raise SystemExit(f"posym data --split {split} --seed {SEED_OFFSET + seed} failed")
        files[seed] = (train, test)
    return files


def train_command(seeds: list[int], data: dict, out: Path, settings: str, threads: int) -> list[str]:
    """``posym train`` of ``seeds`` (several: packed into one model), each into ``out/seed<s>``."""
    return posym(
        "train", "--task", TASK,
        "--seed", *seeds,
        "--train-data", *(data[s][0] for s in seeds),
        "--test-data", *(data[s][1] for s in seeds),
        "--out", *(out / f"seed{s}" for s in seeds),
        "--settings", settings, "--threads", threads,
    )  # fmt: skip


def run_jobs(jobs: list[tuple[list[str], int]], at_once: int, logs: Path) -> float:
    """Wall seconds of running ``jobs`` (command, threads), at most ``at_once`` at a time, each next one
    started as soon as one ends, as a scheduler does. A failed job fails the benchmark, with its log."""
    logs.mkdir(parents=True, exist_ok=True)
    pending, running = list(enumerate(jobs)), []
    start = time.perf_counter()
    while pending or running:
        while pending and len(running) < at_once:
            i, (command, threads) = pending.pop(0)
            log = open(logs / f"job{i}.log", "w")
            running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment(threads)), log))
        time.sleep(0.02)  # jobs take seconds: polling this often costs nothing measurable
        for proc, log in [job for job in running if job[0].poll() is not None]:
            running.remove((proc, log))
            log.close()
            if proc.returncode != 0:
                for other, _ in running:
                    other.kill()
                raise SystemExit(f"{' '.join(proc.args)} failed ({proc.returncode}):\n{Path(log.name).read_text()[-3000:]}")
    return time.perf_counter() - start


def variants(seeds: list[int], data: dict, settings: str, cores: int) -> dict[str, tuple[list[int], list, int]]:
    """Each variant: the seeds it trains, its jobs (command, threads) given its output folder, and how many
    of them run at once."""
    return {
        "separate": (seeds, lambda out: [(train_command([s], data, out, settings, 1), 1) for s in seeds], cores),
        "packed": (seeds, lambda out: [(train_command(seeds, data, out, settings, cores), cores)], 1),
        "one_seed": (seeds[:1], lambda out: [(train_command(seeds[:1], data, out, settings, cores), cores)], 1),
    }


def train_seconds(out: Path, seeds: list[int]) -> list[float]:
    """The seconds each seed's trainer spent training (its checkpoints.json): the wall time without the
    process start, data loading and table writing."""
    return [json.loads((out / f"seed{s}" / "checkpoints.json").read_text())["train_seconds"] for s in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="cores all variants share (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the three variants (median reported)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--n-layer", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--train-samples", type=int, default=None, help="default: one epoch, steps x 64")
    parser.add_argument("--test-samples", type=int, default=1000, help="also the samples scored at each checkpoint")
    parser.add_argument("--checkpoints", type=int, default=4, help="checkpoints after step 0")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "pack_seeds.json")
    args = parser.parse_args()
    if args.seeds < 2 or args.cores < 1:
        parser.error("--seeds must be at least 2 (packing one seed is the one_seed variant) and --cores at least 1")
    seeds = list(range(args.seeds))
    batch = 64
    train_samples = args.train_samples or args.steps * batch
    # Paper A's section with the quick configuration's sizes: the schema's defaults fill the rest.
    settings = {
        "model": {"n_layer": args.n_layer, "d_model": args.d_model},
        "train": {
            "steps": args.steps,
            "batch_size": batch,
            "learning_rate": 1.0e-3,
            "warmup_steps": max(1, args.steps // 15),
            "checkpoint_every": max(1, args.steps // args.checkpoints),
            "eval_samples": args.test_samples,
            "device": "cpu",
            "precision": args.precision,  # explicit: "auto" would also be fp32 on a CPU, but says less
        },
    }
    load_before = os.getloadavg()[0]
    names = ("separate", "packed", "one_seed")
    wall = {name: [] for name in names}
    inner = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="pack_seeds-") as tmp:
        work = Path(tmp)
        data = make_data(work, seeds, train_samples, args.test_samples)
        plan = variants(seeds, data, json.dumps(settings, sort_keys=True), args.cores)
        for round_ in range(args.rounds):
            for name, (trained, jobs, at_once) in plan.items():
                out = work / f"round{round_}" / name
                wall[name].append(run_jobs(jobs(out), at_once, out / "logs"))
                inner[name].append(train_seconds(out, trained))
                shutil.rmtree(out)  # a later round must train afresh, not resume from these checkpoints
    median = {name: statistics.median(values) for name, values in wall.items()}
    ratio = median["separate"] / median["packed"]
    per_seed = {name: median[name] / len(trained) for name, (trained, _, _) in plan.items()}
    report = {
        "benchmark": "pack_seeds",
        "what": (
            f"{args.seeds} seeds of paper A's task {TASK} on {args.cores} cores: {args.seeds} separate posym train"
            f" processes (1 thread, at most {args.cores} at a time) against one packed process ({args.cores} threads),"
            f" and one process of one seed ({args.cores} threads); variants alternate within each round"
        ),
        "machine": {"platform": platform.platform(), "processor": cpu_name(), "cpus": os.cpu_count(), "cores_used": args.cores},
        # Above 0 before the run, something else was using the cores; after it, this run's own jobs count too.
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "torch": _torch_version(),
        "device": "cpu",
        "seeds": args.seeds,
        "rounds": args.rounds,
        "settings": settings,
        "train_samples": train_samples,
        "wall_seconds": wall,
        "wall_seconds_median": median,
        # The trainers' own training seconds (per process, per seed): the wall time less process start-up,
        # data loading and table writing, which separate jobs pay once each.
        "train_seconds": inner,
        "wall_seconds_per_seed": per_seed,
        "ratios": {
            "separate / packed": ratio,
            "packed per seed / one seed": per_seed["packed"] / per_seed["one_seed"],
        },
    }
    every = settings["train"]["checkpoint_every"]
    checkpoints = 1 + args.steps // every + (args.steps % every != 0)  # step 0, every `every` steps, the last
    model = f"{args.n_layer} layers, d_model {args.d_model}, {args.steps} steps of batch {batch}, {args.precision}"
    report["summary"] = {
        "configuration": f"task {TASK}; {model}; {checkpoints} checkpoints of {args.test_samples} test samples",
        f"{args.seeds} seeds as {args.seeds} separate jobs (1 thread, ≤ {args.cores} at a time)": f"{median['separate']:.1f} s",
        f"{args.seeds} seeds packed in one job ({args.cores} threads)": f"{median['packed']:.1f} s",
        "separate / packed (> 1: packing is faster)": f"{ratio:.2f}",
        f"1 seed, one job ({args.cores} threads; a pack of one seed is this job)": f"{median['one_seed']:.1f} s",
        "packed per seed / one seed": f"{report['ratios']['packed per seed / one seed']:.2f}",
    }
    write_report(report, args.out)


def _torch_version() -> str:
    """The version the jobs ran with, without importing torch into this process (it only starts jobs)."""
    from importlib.metadata import version

    return version("torch")


if __name__ == "__main__":
    main()
