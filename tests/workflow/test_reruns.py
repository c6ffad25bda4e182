"""Rerun only what changed, on the session's tiny pipeline run (tests/conftest.py, shared with test_pipeline.py).

The oracle for "what is downstream" is Snakemake itself: a changed setting must plan exactly the jobs that
`--forcerun <the rule that reads it>` plans, i.e. that rule and everything downstream of it, and nothing else.
Every check is a dry run: the shared run is left as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
import yaml

from conftest import TINY, planned_jobs, snakemake

NO_OP_LIMIT_S = 5.0


def timed(workdir, *args) -> tuple[float, subprocess.CompletedProcess]:
    """The fastest of two runs (the machine is shared; the first run also warms the file cache)."""
    best, result = float("inf"), None
    for _ in range(2):
        start = time.perf_counter()
        result = snakemake(workdir, *args)
        best = min(best, time.perf_counter() - start)
    return best, result


def test_a_no_op_rerun_schedules_nothing_within_5_s(tiny_run, record_property):
    dry_s, dry = timed(tiny_run, "-n")
    real_s, real = timed(tiny_run)
    record_property("dry_run_s", round(dry_s, 2))
    record_property("no_op_run_s", round(real_s, 2))
    print(f"no-op: snakemake -n {dry_s:.2f} s, snakemake --cores 2 {real_s:.2f} s")
    for result in (dry, real):
        assert "Nothing to be done" in result.stdout + result.stderr
        assert planned_jobs(result) == {}
    assert dry_s <= NO_OP_LIMIT_S and real_s <= NO_OP_LIMIT_S, (dry_s, real_s)


def jobs_and_reasons(result) -> tuple[dict[str, int], dict[str, set[str]]]:
    """Planned jobs per rule and, per rule, the reasons Snakemake gives (from the job blocks of a dry run)."""
    reasons: dict[str, set[str]] = {}
    rule = None
    for line in (result.stdout + result.stderr).splitlines():
        if match := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = match.group(1)
        elif rule and (match := re.match(r"^\s+reason: (.*)$", line)):
            reasons.setdefault(rule, set()).update(r.split(":")[0].strip() for r in match.group(1).split("; "))
            rule = None
    return planned_jobs(result), reasons


_FORCED: dict[str, dict[str, int]] = {}


def downstream_of(workdir, rule: str) -> dict[str, int]:
    """The jobs of `rule` and of everything downstream of it (what --forcerun plans)."""
    if rule not in _FORCED:
        _FORCED[rule] = planned_jobs(snakemake(workdir, "-n", "--forcerun", rule))
    return _FORCED[rule]


def dry_run_with(workdir, tmp_path, change: dict):
    path = tmp_path / "change.yaml"
    path.write_text(yaml.safe_dump(change))
    return jobs_and_reasons(snakemake(workdir, "-n", configfiles=(TINY, path)))


def test_editing_a_notebook_reruns_it_and_the_report_only(tiny_run):
    path = tiny_run / "workflow" / "posym" / "studies" / "a" / "notebooks" / "length.ipynb"
    original, stat = path.read_bytes(), path.stat()
    notebook = json.loads(original)
    notebook["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "An edit."})
    try:
        path.write_text(json.dumps(notebook, indent=1))
        jobs, reasons = jobs_and_reasons(snakemake(tiny_run, "-n"))
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # The report reruns (and, the tree being dirty, names a new version, reports/<commit>-dirty.<diff>-cfg...).
    assert jobs == {"a_notebook_length": 1, "report": 1, "all": 1}
    assert reasons["a_notebook_length"] == {"Updated input files"}
    assert reasons["report"] == {"Input files updated by another job"}


@pytest.mark.parametrize(
    "change, rule",
    [
        ({"a": {"scores": {"samples": 8}}}, "a_scores"),
        ({"a": {"frequency": {"samples": 16}}}, "a_frequency"),
        ({"a": {"discrepancy": {"samples": 32}}}, "a_discrepancy"),
        ({"a": {"length_protocol": {"fillers": ["uniform", "fixed"]}}}, "a_length_protocol"),
        ({"a": {"theory": {"random_inputs": 3}}}, "a_theory"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_changing_an_analysis_setting_reruns_that_analysis_and_no_training(tiny_run, tmp_path, change, rule):
    jobs, reasons = dry_run_with(tiny_run, tmp_path, change)
    assert jobs == downstream_of(tiny_run, rule)
    assert not {"split", "a_length_sets", "train", "evaluate_test", "a_evaluate_length"} & set(jobs)
    assert "Params have changed since last execution" in reasons[rule]


def test_changing_a_training_setting_reruns_training_and_everything_downstream(tiny_run, tmp_path):
    jobs, reasons = dry_run_with(tiny_run, tmp_path, {"a": {"train": {"learning_rate": 1.0e-3}}})
    assert jobs == downstream_of(tiny_run, "train")
    assert jobs["train"] == 2  # both tasks' runs
    assert {"evaluate_test", "a_evaluate_length", "a_scores", "a_flow", "a_frequency", "a_discrepancy", "report"} <= set(jobs)
    assert not {"split", "a_length_sets", "a_theory", "a_notebook_tasks", "a_notebook_theory"} & set(jobs)
    assert reasons["train"] == {"Params have changed since last execution"}


def test_a_run_writes_nothing_outside_results_logs_and_reports(tiny_run):
    """Every file a run makes is where Snakemake can track and clean it (git-ignored results/ and logs/, reports/)."""
    status = subprocess.run(
        ["git", "-C", str(tiny_run), "status", "--porcelain", "--untracked-files=all", "--ignored=no"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    stray = [line for line in status if not line[3:].startswith(("reports/", "report.zip"))]
    assert not stray, f"files outside results/, logs/ and reports/: {stray}"
