"""Edit, rebuild exactly that, see what changed (issue 30), on the session's tiny pipeline run (tests/conftest.py).

Code edits are dry runs in the shared run, each undone with its file's bytes and modification time; what needs a
real run (a moved folder, a changed setting's new report) runs in a copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml

from conftest import TINY, planned_jobs, snakemake

HEAD_SCORES = Path("workflow/posym/studies/a/head_scores.py")
OPT_OUT = ("--rerun-triggers", "mtime", "params", "input", "software-env")


def edited(workdir, path, old, new, *args, configfiles=(TINY,)):
    """Planned jobs of ``snakemake -n ARGS`` with ``old`` replaced by ``new`` in ``path``, the file restored after."""
    path = Path(workdir) / path
    original, stat = path.read_bytes(), path.stat()
    text = original.decode()
    assert old in text
    try:
        path.write_text(text.replace(old, new, 1))
        return planned_jobs(snakemake(workdir, "-n", *args, configfiles=configfiles))
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# a line inside key_swaps, a function only the scores job runs
CODE_OLD = "return torch.combinations(torch.arange(n_keys), r=2)"
CODE_NEW = "return torch.combinations(torch.arange(n_keys), r=2).clone()"


def test_a_code_edit_of_an_analysis_reruns_it_and_its_readers_not_the_training(tiny_run):
    jobs = edited(tiny_run, HEAD_SCORES, CODE_OLD, CODE_NEW)
    assert jobs == {"a_scores": 2, "a_notebook_scores": 1, "a_notebook_compute": 1, "report": 1, "all": 1}


def test_a_definition_added_beside_the_code_reruns_nothing(tiny_run):
    """A new function no job calls yet changes no output; once a job's code uses it, that code has changed."""
    assert edited(tiny_run, HEAD_SCORES, "def key_swaps(", "def _unused():\n    return 0\n\n\ndef key_swaps(") == {}


def test_a_docstring_or_comment_edit_reruns_nothing(tiny_run):
    text = (tiny_run / HEAD_SCORES).read_text()
    docstring = text.split('"""')[1]
    assert edited(tiny_run, HEAD_SCORES, docstring, docstring + " Edited.") == {}
    assert edited(tiny_run, HEAD_SCORES, "def key_swaps(", "# a comment\ndef key_swaps(") == {}


def test_leaving_out_the_code_trigger_opts_out(tiny_run):
    assert edited(tiny_run, HEAD_SCORES, CODE_OLD, CODE_NEW, *OPT_OUT) == {}


def test_editing_a_study_that_is_off_plans_nothing(tiny_run, tmp_path):
    change = tmp_path / "off.yaml"
    change.write_text(yaml.safe_dump({"b": {"train": {"learning_rate": 0.002}}, "c": {"training": {"seeds": [0, 1, 2]}}}))
    assert planned_jobs(snakemake(tiny_run, "-n", configfiles=(TINY, change))) == {}


def test_no_params_hold_an_absolute_path(tiny_run):
    records = list((tiny_run / ".snakemake" / "metadata").iterdir())
    assert records
    for record in records:
        params = json.dumps(json.loads(record.read_text()).get("params"))
        assert str(tiny_run) not in params, record


def test_a_moved_folder_is_up_to_date_and_a_changed_setting_reports_what_moved(tiny_run, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.copytree(tiny_run, moved, symlinks=True)  # copy2: modification times kept
    assert planned_jobs(snakemake(moved, "-n")) == {}
    assert "Nothing to be done" in snakemake(moved).stderr
    # the same report again (forced) is the same version from identical inputs: reused, not refused
    (before,) = json.loads((moved / "results/reports/history.json").read_text())["versions"]
    snakemake(moved, "--forcerun", "report")
    assert json.loads((moved / "results/reports/latest.json").read_text())["version"] == before
    # a changed setting: a new version that names the previous one and lists the tables that moved
    change = tmp_path / "scores.yaml"
    change.write_text(yaml.safe_dump({"a": {"scores": {"samples": 8}}}))
    snakemake(moved, configfiles=(TINY, change))
    after = json.loads((moved / "results/reports/latest.json").read_text())["version"]
    assert after != before
    page = (moved / "reports" / after / "index.html").read_text()
    assert f"Changes since {before}" in page
    changes = json.loads((moved / "reports" / after / "manifest.json").read_text())["changes"]
    assert changes["before"] == before
    assert any("fig2b_scores_final" in t["table"] and t["largest"] for t in changes["tables_moved"])
    assert {"key": "a.scores.samples", "before": 16, "after": 8} in changes["config"]
    items = json.loads((moved / "reports" / after / "manifest.json").read_text())["studies"]["a"]["items"]
    assert all(len(i["code"]) == 12 for i in items.values() if i["applicable"])
