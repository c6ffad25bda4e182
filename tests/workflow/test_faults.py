"""Faults, through the real workflow: a run killed mid-training, damaged files, two runs at once, a failing job.

Each test runs Snakemake in its own copy of the repository (tests/conftest.py) on the tiny config, with
training made long enough (240 steps, a checkpoint every 20) to be caught in the middle.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import TINY, clean_env, copy_repo, planned_jobs, report_dir, snakemake, snakemake_command

pytestmark = pytest.mark.slow

TRAIN = "results/a/train/main/number/seed0"
TRAIN_TARGET = f"{TRAIN}/checkpoints.json"  # split x2 -> train
EVAL_TARGET = "results/a/eval/main/number/seed0/test.csv"
TRAIN_OUTPUTS = ("checkpoints.json", "metrics.csv", "train_log.csv")
PACK = "results/a/train/main/number/packs/seed0.json"  # the training job's output, its record
PACK_LOG = "logs/a/train/main/number/packs/seed0.log"
LONGER = {"a": {"train": {"steps": 240, "checkpoint_every": 20}}}  # about 10 s of training on 2 cores
WAIT_S = 300


@pytest.fixture(scope="module")
def longer(tmp_path_factory) -> tuple[Path, Path]:
    """The config files of these tests: tiny.yaml and longer training."""
    path = tmp_path_factory.mktemp("config") / "longer.yaml"
    path.write_text(yaml.safe_dump(LONGER))
    return TINY, path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, longer) -> Path:
    """A repository copy in which the training of number/seed0 ran without interruption."""
    workdir = copy_repo(tmp_path_factory.mktemp("reference"))
    snakemake(workdir, TRAIN_TARGET, configfiles=longer)
    return workdir


def checkpoint_hashes(workdir: Path) -> list[tuple[int, str]]:
    index = json.loads((workdir / TRAIN_TARGET).read_text())
    return [(c["step"], c["sha256"]) for c in index["checkpoints"]]


def assert_same_training(workdir: Path, reference: Path) -> None:
    assert checkpoint_hashes(workdir) == checkpoint_hashes(reference)
    assert [step for step, _ in checkpoint_hashes(reference)] == list(range(0, 241, 20))
    for name in ("metrics.csv", "train_log.csv"):
        assert (workdir / TRAIN / name).read_bytes() == (reference / TRAIN / name).read_bytes(), name


def start(workdir: Path, *args, configfiles) -> subprocess.Popen:
    """snakemake in the background, as the leader of a new process group (its jobs join that group)."""
    command = snakemake_command(workdir, *args, configfiles=configfiles)
    with open(workdir / "background-snakemake.log", "w") as log:  # the child keeps its own copy of the handle
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True)


def wait_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert process.poll() is None, f"snakemake ended before {path.name} appeared"
        assert time.monotonic() < deadline, f"no {path} after {WAIT_S} s"
        time.sleep(0.02)


def live_members(group: int) -> list[int]:
    """Processes of a process group that are still running (zombies excluded)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def rerun_like_a_user(workdir: Path, *args, configfiles):
    """Run again; when Snakemake asks for --unlock or --rerun-incomplete, do that. Returns (result, what was done)."""
    done, extra = [], []
    for _ in range(3):
        result = snakemake(workdir, *args, *extra, configfiles=configfiles, check=False)
        text = result.stdout + result.stderr
        if result.returncode == 0:
            return result, done
        if "Directory cannot be locked" in text and "--unlock" not in done:
            snakemake(workdir, "--unlock", *args, configfiles=configfiles)
            done.append("--unlock")
        elif "--rerun-incomplete" in text and "--rerun-incomplete" not in done:
            extra.append("--rerun-incomplete")
            done.append("--rerun-incomplete")
        else:
            break
    raise AssertionError(f"the rerun failed after {done}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def test_a_run_killed_mid_training_resumes_from_its_last_checkpoint(tmp_path, longer, reference):
    workdir = copy_repo(tmp_path / "repo")
    run = start(workdir, TRAIN_TARGET, configfiles=longer)
    try:
        wait_for(workdir / TRAIN / "checkpoints" / "step-000060", run)
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # kill -9 of snakemake and its jobs
        run.wait()
    deadline = time.monotonic() + 30
    while live_members(run.pid):
        assert time.monotonic() < deadline, f"processes {live_members(run.pid)} outlived kill -9 of their group"
        time.sleep(0.1)
    assert not any((workdir / TRAIN / name).exists() for name in TRAIN_OUTPUTS)  # nothing half-written

    _, done = rerun_like_a_user(workdir, TRAIN_TARGET, configfiles=longer)
    log = (workdir / "logs/a/train/main/number/seed0.log").read_text()
    assert "resuming from step " in log, log[:3000]
    resumed_from = int(log.split("resuming from step ")[1].split()[0])
    assert resumed_from >= 60, log[:3000]
    assert "--unlock" in done  # kill -9 leaves Snakemake's lock behind; the user is told to unlock
    assert_same_training(workdir, reference)


def test_a_run_stopped_while_retraining_after_an_edit_retrains_on_the_next(tmp_path, longer, reference):
    """Snakemake removes the outputs of the jobs it stops, here the training's pack record, and never reruns a job
    whose missing output only up-to-date jobs read (snakemake/snakemake#1978): unless train_outputs knows what
    trained its run, the next run would find the old training's tables, plan nothing, and report them as the
    edited config's."""
    workdir = tmp_path / "repo"
    shutil.copytree(reference, workdir, symlinks=True)
    edit = tmp_path / "edit.yaml"
    edit.write_text(yaml.safe_dump({"a": {"train": {"learning_rate": 1.0e-3}}}))
    configfiles = (*longer, edit)
    (workdir / PACK_LOG).unlink()  # its return marks the retraining's start
    run = start(workdir, TRAIN_TARGET, configfiles=configfiles)
    try:
        wait_for(workdir / PACK_LOG, run)
    finally:
        os.killpg(run.pid, signal.SIGTERM)  # as a session's end or a scancel stops it
        run.wait(timeout=WAIT_S)
    assert not (workdir / PACK).exists()
    assert (workdir / TRAIN_TARGET).exists()  # the old training's tables, still in place

    result = snakemake(workdir, "-n", TRAIN_TARGET, configfiles=configfiles)
    assert planned_jobs(result) == {"train": 1, "train_outputs": 1}, result.stdout[-3000:]


def test_a_second_run_in_the_same_directory_is_refused_and_changes_nothing(tmp_path, longer, reference):
    workdir = copy_repo(tmp_path / "repo")
    first = start(workdir, TRAIN_TARGET, configfiles=longer)
    try:
        wait_for(workdir / TRAIN / "checkpoints" / "step-000020", first)
        os.killpg(first.pid, signal.SIGSTOP)  # hold the first run mid-training, lock taken
        try:
            before = snapshot(workdir)
            second = snakemake(workdir, TRAIN_TARGET, configfiles=longer, check=False)
            after = snapshot(workdir)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        assert first.wait(timeout=WAIT_S) == 0, (workdir / "background-snakemake.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert second.returncode != 0
    assert "Directory cannot be locked" in second.stdout + second.stderr
    assert after == before  # the refused run wrote nothing
    assert_same_training(workdir, reference)  # and the first run finished as if alone
    again = snakemake(workdir, "-n", TRAIN_TARGET, configfiles=longer)  # the lock is gone with the first run
    assert "Nothing to be done" in again.stdout + again.stderr


def snapshot(workdir: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file the workflow writes, and of Snakemake's own records."""
    files = {}
    for folder in ("results", "logs", ".snakemake/metadata", ".snakemake/incomplete"):
        for path in (workdir / folder).rglob("*"):
            if path.is_file():
                stat = path.stat()
                files[str(path.relative_to(workdir))] = (stat.st_size, stat.st_mtime_ns)
    return files


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def failed_job_log(result, workdir: Path, rule: str) -> str:
    text = result.stdout + result.stderr
    assert result.returncode != 0, text[-3000:]
    assert f"Error in rule {rule}:" in text, text[-3000:]
    log = text.split(f"Error in rule {rule}:")[1].split("log: ")[1].split()[0]
    return (workdir / log).read_text()


def test_a_truncated_checkpoint_fails_its_job_naming_the_file(tmp_path, longer, reference):
    workdir = tmp_path / "repo"
    shutil.copytree(reference, workdir, symlinks=True)
    damaged = workdir / TRAIN / "checkpoints/step-000240/model.safetensors"
    truncate(damaged)
    result = snakemake(workdir, EVAL_TARGET, configfiles=longer, check=False)
    log = failed_job_log(result, workdir, "evaluate_test")
    assert f"{TRAIN}/checkpoints/step-000240/model.safetensors: sha256 does not match" in log, log
    assert "Traceback" not in log  # a one-line error, not a stack trace
    assert not (workdir / EVAL_TARGET).exists()


def test_a_truncated_dataset_fails_its_job_naming_the_file(tmp_path, longer, reference):
    workdir = tmp_path / "repo"
    shutil.copytree(reference, workdir, symlinks=True)
    truncate(workdir / "results/a/data/number/seed0/test.safetensors")
    result = snakemake(workdir, EVAL_TARGET, configfiles=longer, check=False)
    # the damaged file is newer than the training that read it, so training runs again and refuses it
    log = failed_job_log(result, workdir, "train")
    assert "results/a/data/number/seed0/test.safetensors: sha256" in log, log
    assert "Traceback" not in log
    assert not (workdir / EVAL_TARGET).exists()
    assert (workdir / TRAIN / "checkpoints/step-000240").is_dir()  # the checkpoints survive the failed job


NOTEBOOK_OUTPUTS = (
    "results/a/notebooks/tasks.ipynb",
    "results/a/figures/fig1_tasks.png",
    "results/a/figures/fig1_tasks.svg",
    "results/a/tables/table2_prompts.csv",
    "results/a/tables/table2_prompts.md",
)
FAILING_CELL = """import os
written = [p for name in ("fig1_tasks", "table2_prompts") for p in outputs[name].values() if os.path.exists(p)]
raise RuntimeError(f"injected failure after writing {len(written)} of 4 outputs")"""


def test_a_failed_job_is_retried_with_more_memory_and_leaves_none_of_its_outputs(tmp_path):
    workdir = copy_repo(tmp_path / "repo")
    path = workdir / "workflow/posym/studies/a/notebooks/tasks.ipynb"
    notebook = json.loads(path.read_text())
    notebook["cells"].append({"cell_type": "code", "metadata": {}, "source": FAILING_CELL, "outputs": [], "execution_count": None})
    path.write_text(json.dumps(notebook))

    result = snakemake(workdir, NOTEBOOK_OUTPUTS[0], "--retries", "1", check=False)
    log = failed_job_log(result, workdir, "a_notebook_tasks")
    assert "injected failure after writing 4 of 4 outputs" in log, log[-3000:]
    leftovers = [name for name in NOTEBOOK_OUTPUTS if (workdir / name).exists()]
    assert not leftovers, f"a failed job left {leftovers}"
    # The second try asked for twice the memory and time (what the SLURM profile's retries: 1 relies on).
    tries = [line for line in result.stdout.splitlines() + result.stderr.splitlines() if line.strip().startswith("resources:")]
    assert len(tries) == 2, tries
    assert "mem_mb=2000" in tries[0] and "runtime=30" in tries[0], tries
    assert "mem_mb=4000" in tries[1] and "runtime=60" in tries[1], tries


def test_rerunning_the_report_leaves_an_existing_version_intact(tiny_run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(tiny_run, workdir, symlinks=True)  # the shared run stays as it is
    version = report_dir(workdir)
    before = {p: p.read_bytes() for p in version.rglob("*") if p.is_file()}
    # Made again from the same inputs, the version is reused as it is (a version made from other inputs is refused,
    # naming what differs: test_pipeline.py); either way it is never overwritten.
    result = snakemake(workdir, "--forcerun", "report", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {p: p.read_bytes() for p in version.rglob("*") if p.is_file()} == before
