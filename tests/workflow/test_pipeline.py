"""The real Snakemake DAG on the tiny config: report contents, reruns, lint and format.

The tiny pipeline runs once per session in a copy of the repository (`tiny_run`, tests/conftest.py).
"""

import json
import re
import subprocess
from html import escape

import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY, assert_untrained_models_decide_nothing, planned_jobs, report_dir, snakemake
from posym.pipeline import figures, report, study

PAPER_A = study.load("a")

def test_an_item_whose_tables_hold_no_rows_is_not_listed_as_rendered(tmp_path):
    # paper B's RoPE-heads item in a grid without partial RoPE: its notebook runs and writes a table of headers only
    table = tmp_path / "rope_heads.csv"
    table.write_text("k,variant,ours,seeds,paper\n")
    item = {"applicable": True, "key": "fig-rope-heads", "outputs": [{"kind": "figure", "files": {}}, {"kind": "table", "files": {"csv": str(table)}}]}
    assert ">rendered without data: no run of this configuration feeds it</a>" in report._status("b", item)
    table.write_text("k,variant,ours,seeds,paper\n1,partial_rope_1,95.1,1,≈ 90\n")
    assert ">rendered</a>" in report._status("b", item)


def test_a_markdown_table_formats_the_columns_it_is_told_apart():
    table = pd.DataFrame({"arm": ["a|b"], "median": [1300.0], "final_ce_pred": [0.28180453], "sd": [float("nan")]})
    markdown = figures.to_markdown(table, ".0f", {"final_ce_pred": ".3f"})
    assert markdown.splitlines()[-1] == "| a\\|b | 1300 | 0.282 |  |"  # Table 4's loss once read 0 at ".0f"
    with pytest.raises(KeyError, match="final_ce"):
        figures.to_markdown(table, ".0f", {"final_ce": ".3f"})


def test_report_holds_its_figures_tables_and_notebooks(tiny_run):
    report = report_dir(tiny_run) / "a"
    for stem in ("fig2a_accuracy", "fig5b_length"):
        assert (report / "figures" / f"{stem}.png").stat().st_size > 1000
        assert (report / "figures" / f"{stem}.svg").read_text().lstrip().startswith("<?xml")
    for stem in ("fig2a_crossings", "fig2a_final_accuracy", "fig5b_length"):
        assert (report / "tables" / f"{stem}.csv").is_file()
        assert (report / "tables" / f"{stem}.md").read_text().startswith("| ")
    for name in ("training.ipynb", "length.ipynb"):
        executed = json.loads((report / "notebooks" / name).read_text())
        assert not executed["metadata"]["papermill"]["exception"]
        assert any(cell.get("outputs") for cell in executed["cells"] if cell["cell_type"] == "code")
    html = (report.parent / "index.html").read_text()
    assert 'src="a/figures/fig2a_accuracy.png"' in html and 'src="a/figures/fig5b_length.png"' in html
    for item in PAPER_A.items:
        assert f"<td>{item.id}</td>" in html
    # every table and figure of the study's table, every output file of it and every claim's verdicts; all but
    # the fidelity study's, which the tiny config does not run
    # the LLM probes' items show the paper's values alone when no model is set (the tiny config), and say so
    assert html.count(">published values only</a>") == len([i for i in PAPER_A.items if i.notebook == "llm"]) == 3
    assert html.count(">rendered</a>") == len([i for i in PAPER_A.items if i.notebook not in ("fidelity", "llm")])
    for output in PAPER_A.outputs():
        if output.name.startswith("fidelity_"):
            continue
        for path in output.files().values():
            assert (report / f"{output.kind}s" / path.split("/")[-1]).is_file(), path
    assert html.count('<td class="verdict-') == len(PAPER_A.claims)


def test_the_title_follows_the_verdicts(tiny_run):
    """The tiny run fails claims, so its title says how many are reproduced, never "paper A reproduced", and counts
    the claims decided on the models it trained apart from the theorem (A-6) and the substitute model (A-7)."""
    from posym.pipeline import claims

    report = report_dir(tiny_run)
    manifest = json.loads((report / "manifest.json").read_text())
    verdicts = pd.DataFrame(manifest["verdicts"]["a"])
    html = (report / "index.html").read_text()
    assert claims.REPRODUCED in set(verdicts["verdict"])  # A-6 (a theorem) reproduces
    assert f"<h1>posym: {escape(claims.headline('paper A', verdicts, manifest['scale']['a']))}</h1>" in html
    assert "paper A (trained below the paper&#x27;s size): 5 trained claims not reproduced; also its theory claim reproduced" in html
    assert "all 7" not in html and "of 7 claims" not in html
    assert html.count("<td>trained</td>") == 5 + 1 and "How to read the verdicts" in html  # A-1 … A-5, and the legend
    # each claim not reproduced says why: its failing checks, with what was measured and what was expected
    for claim in json.loads((report / "manifest.json").read_text())["verdicts"]["a"]:
        if claim["verdict"] in (claims.NOT_REPRODUCED, claims.PARTLY):
            assert claim["why"].startswith("fails: ") and f'<div class="why">{escape(claim["why"].split(" | ")[0])}</div>' in html


def test_no_deciding_check_passes_on_the_tiny_runs_untrained_models(tiny_run):
    """The tiny config's models end at 1-3 % test accuracy: a check they pass decides nothing."""
    assert_untrained_models_decide_nothing(tiny_run, "a")


def test_every_page_and_claim_row_says_the_size_it_was_judged_at(tiny_run):
    from posym.pipeline import scale

    report = report_dir(tiny_run)
    manifest = json.loads((report / "manifest.json").read_text())
    size = manifest["scale"]["a"]
    assert size["ours"]["layers"] == 2 and size["ours"]["steps"] == 60 and size["paper"]["layers"] == 12
    assert {"layers", "steps", "batch"} <= set(size["below"]) and size["line"] == scale.line(scale.Scale(**size["ours"]), scale.Scale(**size["paper"]))
    html = (report / "index.html").read_text()
    assert f'<p class="scale">Scale: {escape(size["line"])}. <strong class="below">Below the paper\'s size.</strong></p>' in html
    assert "judged at 2 layers × 1 head, 17 positions, 60 steps × batch 32, 1 seed; the paper 12 layers × 1 head" in size["line"]
    rows = {row["claim"]: row for row in manifest["verdicts"]["a"]}
    assert all(rows[c]["judged at"] == size["short"] for c in ("A-1", "A-2", "A-3", "A-4", "A-5")) and "(below the paper's in layers" in size["short"]
    assert rows["A-6"]["judged at"] == "exact computation, no training" and rows["A-7"]["judged at"] == "a substitute model"


def test_length_table_sets_ours_beside_the_paper(tiny_run):
    table = pd.read_csv(report_dir(tiny_run) / "a" / "tables" / "fig5b_length.csv")
    assert set(table["task"]) == {"number", "letter"}
    assert sorted(table["extra_tokens"].unique()) == [0, 20, 60]
    assert {"ours", "paper"} <= set(table.columns)
    assert table["paper"].notna().all()


def test_the_length_protocol_item_ranks_every_rule_against_fig_5b(tiny_run):
    """On the tiny run's models: the table is rules x lengths with the paper's row, the distances follow from the
    runs' tables, the finding names the closest rule, and the uniform rule's accuracies are Fig 5B's."""
    from posym.studies.a import length_protocol
    from posym.studies.a.tasks.multihop import FILLER_RULES

    tables = report_dir(tiny_run) / "a" / "tables"
    table = pd.read_csv(tables / "length_protocol.csv")
    assert table.columns.tolist() == ["task", "filler", "+0", "+20", "+100"]
    assert table["filler"].tolist() == [*FILLER_RULES, "paper (Fig 5B)"] * 2
    runs = {task: tiny_run / f"results/a/analysis/main/{task}/seed0/length_protocol.csv" for task in ("number", "letter")}
    frame = pd.concat([pd.read_csv(path, dtype={"hop": str}).assign(task=task, seed=0) for task, path in runs.items()])
    assert len(frame) == 2 * len(FILLER_RULES) * 3 * 5 and (frame.loc[frame["hop"] == "all", "n"] == 128).all()
    distances = pd.read_csv(tables / "length_protocol_distance.csv")
    expected = length_protocol.protocol_distances(frame)
    assert distances["mean |gap|"].tolist() == pytest.approx(expected["mean |gap|"].tolist(), abs=1e-12)
    assert distances["gap at +100"].tolist() == pytest.approx(expected["gap at +100"].tolist(), abs=1e-12)
    assert (distances["at +100"] == "measured").all() and (distances.groupby("task")["closest"].sum() >= 1).all()
    finding = pd.read_csv(tables / "length_protocol_finding.csv")
    for row in finding.itertuples():
        closest = distances[(distances["task"] == row.task) & distances["closest"]]["filler"].tolist()
        assert row.closest == " and ".join(closest) and f"{row.closest} come" in row.finding
    # the protocol's uniform sets are Fig 5B's (the same base samples and filler streams): equal where both measure
    for task in ("number", "letter"):
        fig5b = pd.read_csv(tiny_run / f"results/a/eval/main/{task}/seed0/length.csv", dtype={"hop": str})
        ours = frame[(frame["task"] == task) & (frame["filler"] == "uniform")]
        shared = fig5b.merge(ours, on=["extra_tokens", "hop"], suffixes=("_fig5b", "_protocol"))
        assert len(shared) == 2 * 5  # +0 and +20, every hop and "all"
        assert shared["accuracy_fig5b"].tolist() == shared["accuracy_protocol"].tolist()
    html = (report_dir(tiny_run) / "index.html").read_text()
    assert 'src="a/figures/length_protocol.png"' in html and "closest to Fig 5B" in html


def test_manifest_records_provenance(tiny_run):
    report = report_dir(tiny_run)
    manifest = json.loads((report / "manifest.json").read_text())
    assert manifest["version"] == report.name
    assert manifest["config"]["a"]["train"]["steps"] == 60
    assert manifest["packages"]["torch"].startswith("2.13.0")
    assert len(manifest["data"]) == 6  # train, test and length sets of two tasks
    assert all(len(entry["sha256"]) == 64 for entry in manifest["data"].values())
    runs = manifest["checkpoints"]
    assert len(runs) == 2 and all([c["step"] for c in r["checkpoints"]] == [0, 20, 40, 60] for r in runs.values())
    wall = manifest["wall_seconds"]
    assert {f"results/a/benchmarks/train/main/{t}-seed0.tsv" for t in ("number", "letter")} <= set(wall)
    assert manifest["total_wall_seconds"] == pytest.approx(sum(wall.values())) and all(s > 0 for s in wall.values())
    assert set(manifest["files"]) >= {"index.html", "a/figures/fig2a_accuracy.png", "a/tables/fig5b_length.csv"}
    items = manifest["studies"]["a"]["items"]
    assert set(items) == {i.id for i in PAPER_A.items} | {c.id for c in PAPER_A.claims}
    assert items["Fig 2A"]["applicable"] and "a/figures/fig2a_accuracy.png" in items["Fig 2A"]["files"]
    assert re.fullmatch(r".+-cfg[0-9a-f]{10}", report.name)


def test_nothing_to_do_on_a_second_run(tiny_run):
    result = snakemake(tiny_run, "-n")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_changing_the_length_grid_reruns_evaluation_only(tiny_run, tmp_path):
    changed = tmp_path / "grid.yaml"
    changed.write_text(yaml.safe_dump({"a": {"length": {"extra_tokens": [0, 30]}}}))
    result = snakemake(tiny_run, "-n", configfiles=(TINY, changed))
    jobs = planned_jobs(result)
    # Everything downstream of the length sets, and nothing else.
    expected = {"a_length_sets", "a_evaluate_length", "a_discrepancy", "a_notebook_length", "a_notebook_discrepancy"}
    # Table 4 (compute) reads the jobs' wall times, so it follows every rerun.
    assert set(jobs) == expected | {"a_notebook_compute", "report", "all"}
    assert "Params have changed since last execution" in result.stdout + result.stderr


def test_changing_a_training_setting_retrains(tiny_run, tmp_path):
    changed = tmp_path / "lr.yaml"
    changed.write_text(yaml.safe_dump({"a": {"train": {"learning_rate": 1.0e-3}}}))
    jobs = planned_jobs(snakemake(tiny_run, "-n", configfiles=(TINY, changed)))
    assert jobs["train"] == 2 and "split" not in jobs
    assert {"evaluate_test", "a_evaluate_length", "a_notebook_training", "a_notebook_length", "report"} <= set(jobs)


def test_changing_the_final_checkpoint_choice_reanalyses_without_training(tiny_run, tmp_path):
    index = json.loads((tiny_run / "results/a/train/main/number/seed0/checkpoints.json").read_text())
    assert index["final"]["choice"] == "best_validation" and [c["step"] for c in index["final"]["validation"]] == [20, 40, 60]
    changed = tmp_path / "last.yaml"
    changed.write_text(yaml.safe_dump({"a": {"final_checkpoint": {"choice": "last"}}}))
    jobs = planned_jobs(snakemake(tiny_run, "-n", configfiles=(TINY, changed)))
    assert jobs["train_outputs"] == 2 and "train" not in jobs and "split" not in jobs
    assert {"evaluate_test", "a_scores", "a_frequency", "a_evaluate_length", "a_notebook_scores", "report"} <= set(jobs)


def test_snakemake_report_builds(tiny_run):
    snakemake(tiny_run, "--report", "report.zip")
    assert (tiny_run / "report.zip").stat().st_size > 10_000


def test_existing_report_version_is_never_overwritten(tiny_run):
    """The same version from other inputs is refused, naming what differs (here: no datasets or checkpoints)."""
    report = report_dir(tiny_run)
    for name in ("index.html", "manifest.json"):  # written read-only
        assert (report / name).stat().st_mode & 0o222 == 0
    before = {p: p.read_bytes() for p in report.rglob("*") if p.is_file()}
    config = json.loads((report / "manifest.json").read_text())["config"]  # the same config: the same version
    again = subprocess.run(
        ["posym", "report", "build", "--reports", "reports", "--history", "results/again-history.json"]
        + ["--config", json.dumps(config), "--receipt", "results/again.json"],
        capture_output=True,
        text=True,
        cwd=tiny_run,
    )
    assert again.returncode != 0 and "never overwritten" in again.stderr
    assert "data (" in again.stderr and "checkpoints (" in again.stderr, again.stderr
    assert not (tiny_run / "results" / "again.json").exists()
    assert not (tiny_run / "results" / "again-history.json").exists()
    assert {p: p.read_bytes() for p in report.rglob("*") if p.is_file()} == before


def test_lint_and_format_are_clean():
    # every study on, and paper A's fidelity rules (included only when a.fidelity is set), so that all rules are linted
    every_rule = ["--configfile", str(TINY), str(REPO / "tests" / "configs" / "fidelity.yaml"), "--config", "studies=[a,b,c]"]
    lint = subprocess.run(["snakemake", "--lint", *every_rule], cwd=REPO, capture_output=True, text=True)
    assert "Congratulations, your workflow is in a good condition!" in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    studies = [str(p.relative_to(REPO)) for p in (REPO / "workflow" / "posym" / "studies").glob("*/*.smk")]
    fmt = subprocess.run(["snakefmt", "--check", "Snakefile", "workflow/rules", *studies], cwd=REPO, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stderr
