"""The SLURM path end to end: a three-job workflow through a real one-node SLURM cluster.

Skipped unless POSYM_SLURM=1. The `slurm_cluster` fixture (tests/conftest.py) uses a cluster that is up
already (scripts/test.sh starts one) or starts one itself and stops it at the end of the session:

    POSYM_SLURM=1 pytest -m slurm

tests/workflow/test_slurm_pipeline.py runs the real pipeline the same way.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cancelling_on_timeout

REPO = Path(__file__).resolve().parents[2]
SMOKE_SNAKEFILE = REPO / "tests" / "slurm" / "Snakefile.smoke"
TEST_PROFILE = REPO / "profiles" / "slurm-test"
SMOKE_RULES = ("numbers", "train", "summary")
SNAKEMAKE_TIMEOUT_S = 600  # about 45 s on a 2-core machine

pytestmark = pytest.mark.slurm


def _run_snakemake(workdir, *args):
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SMOKE_SNAKEFILE), "--directory", str(workdir), *args]
    return run_cancelling_on_timeout(command, SNAKEMAKE_TIMEOUT_S)


def _read_jobinfo(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def _scontrol_show_job(job_id):
    return subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job_id],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout


def _tree(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_smoke_workflow_runs_through_slurm(slurm_cluster, tmp_path):
    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    _run_snakemake(on_slurm, "--executor", "slurm", "--profile", str(TEST_PROFILE))
    _run_snakemake(local, "--cores", "1")

    # Every job ran as a SLURM job of its own, and SLURM remembers it (MinJobAge=300 s).
    jobinfo = {
        rule: _read_jobinfo(on_slurm / "jobinfo" / f"{rule}.txt")
        for rule in SMOKE_RULES
    }
    job_ids = {rule: info["SLURM_JOB_ID"] for rule, info in jobinfo.items()}
    assert all(job_id.isdigit() for job_id in job_ids.values()), jobinfo
    assert len(set(job_ids.values())) == len(SMOKE_RULES), job_ids
    jobs = {rule: _scontrol_show_job(job_id) for rule, job_id in job_ids.items()}
    for rule, job in jobs.items():
        assert "JobState=COMPLETED" in job, job
        # the plugin tags each job with its rule
        assert re.search(rf"\bComment=rule_{rule}\b", job), job
    assert "TresPerJob=gres:gpu:1" in jobs["train"], jobs["train"]

    # The GPU rule got the GPU from SLURM; the others got none.
    assert jobinfo["train"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert jobinfo["numbers"]["CUDA_VISIBLE_DEVICES"] == ""

    # Locally nothing went through SLURM, and the data are byte for byte the same.
    assert _read_jobinfo(local / "jobinfo" / "train.txt")["SLURM_JOB_ID"] == ""
    assert _tree(on_slurm / "results") == _tree(local / "results")
    assert (on_slurm / "results" / "summary.txt").read_text() == "sum of squares 385\n"
