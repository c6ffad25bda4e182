"""Paper C's DAG end to end (tests/configs/c.yaml): the published tables from the authors' cache, the checks on
random heads, both notebooks and the report, with every claim's verdict."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import CONFIG_MATRIX, copy_repo, planned_jobs, report_dir, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c_run(tmp_path_factory):
    workdir = copy_repo(tmp_path_factory.mktemp("c"))
    snakemake(workdir, configfiles=CONFIG_MATRIX["c"])
    return workdir


def test_every_claim_passes_and_the_report_shows_the_tables(c_run):
    tables = c_run / "results" / "c" / "tables"
    for claim in ("C1", "C2", "C3", "C5"):
        verdicts = pd.read_csv(tables / f"claims_{claim}.csv")
        assert len(verdicts) and (verdicts["verdict"] == "pass").all(), claim
    table2 = pd.read_csv(tables / "table2.csv")
    assert len(table2) == 7 and (table2["top5_percentile"] - table2["top5_percentile (paper)"]).abs().max() <= 0.005
    assert (c_run / "results" / "c" / "figures" / "fig2a.png").is_file()
    report = report_dir(c_run)
    html = (report / "index.html").read_text()
    assert "paper C" in html and "C-5" in html


def test_a_changed_bootstrap_setting_reruns_the_statistics_only(c_run, tmp_path):
    more = tmp_path / "more.yaml"
    more.write_text("c:\n  published:\n    bootstrap_draws: 101\n")
    jobs = planned_jobs(snakemake(c_run, "-n", configfiles=[*CONFIG_MATRIX["c"], more]))
    assert jobs.get("c_published") == 1 and "c_checks" not in jobs
