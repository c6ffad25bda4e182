"""What ``posym report diff`` and a report's "Changes since" say (posym.pipeline.changes), on hand-made report
folders: timing tables apart from results, identifier columns as row keys rather than moves, and what differs in
what produced a claim whose verdict or checks changed."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posym.pipeline import changes

TRAIN_CODE = {"train": "t1", "evaluate": "e1", "b probe": "p1", "notebook b/accuracy": "n1", "c train": "x1"}
MODULES = {"posym.training.trainer": "1", "posym.nn.packing": "1", "posym.studies.b.results": "1", "posym.studies.c.training": "1"}


def _report(root, version, tables, *, study="b", verdicts=None, config=None, commands=None, modules=None, commit=None):
    """A report version folder: ``tables`` {name: DataFrame} under ``<study>/tables/``; ``verdicts`` {claim:
    (verdict, distance)}, each claim an item whose files are its claims_<claim less its dash>.csv (when among ``tables``).
    ``commands`` None: a manifest of before code fingerprints were recorded."""
    folder = root / version
    (folder / study / "tables").mkdir(parents=True)
    files = {}
    for name, frame in tables.items():
        path = folder / study / "tables" / f"{name}.csv"
        frame.to_csv(path, index=False)
        files[f"{study}/tables/{name}.csv"] = "sha-" + path.read_text()
    verdicts = verdicts or {}
    items = {name: {"applicable": True, "files": [f"{study}/tables/{name}.csv"]} for name in tables}
    for claim in verdicts:
        items[claim] = {"applicable": True, "files": [f"{study}/tables/claims_{claim.replace('-', '')}.csv"]}
    code = {"label": commit or version, "commit": commit or version, "dirty": False}
    if commands is not None:
        code.update(commands=commands, modules=modules or {})
    manifest = {
        "version": version,
        "studies": {study: {"items": items}},
        "verdicts": {study: [{"claim": c, "verdict": v, "distance": d, "ours": ""} for c, (v, d) in verdicts.items()]},
        "files": files,
        "config": config if config is not None else {study: {"train": {"lr": 1}}},
        "code": code,
        "packages": {"torch": "2.13.0+cpu"},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


# ------------------------------------------------------------------------------------------------ 1. timings


COMPUTE = pd.DataFrame({"stage": ["training", "analyses"], "task": ["number", "number"], "ours (per job)": ["39 min 5 s", "3 min 17 s"]})
RERUN = COMPUTE.assign(**{"ours (per job)": ["38 min 51 s", "3 min 20 s"]})


def test_a_timing_table_is_listed_apart_not_among_the_moved_results(tmp_path):
    # paper A's Table 4 (category Compute in its study.yaml) and a results table, both with changed text cells
    prompts = pd.DataFrame({"task": ["number"], "template": ["a"]})
    before = _report(tmp_path, "v1", {"table4_compute": COMPUTE, "table2_prompts": prompts}, study="a", config={})
    after = _report(tmp_path, "v2", {"table4_compute": RERUN, "table2_prompts": prompts.assign(template="b")}, study="a", config={})
    found = changes.compare(before, after)
    assert [t["table"] for t in found["tables_moved"]] == ["a/tables/table2_prompts.csv"]
    assert [t["table"] for t in found["timings_moved"]] == ["a/tables/table4_compute.csv"]
    text = changes.text(found)
    moved_section = text.split("Tables whose numbers moved")[1].split("\n\n")[0]
    assert "table4_compute" not in moved_section and "table2_prompts" in moved_section
    assert "Timings that differ" in text and "not results" in text


def test_a_timing_table_alone_moves_no_result(tmp_path):
    before = _report(tmp_path, "v1", {"table4_compute": COMPUTE}, study="a", config={})
    after = _report(tmp_path, "v2", {"table4_compute": RERUN}, study="a", config={})
    found = changes.compare(before, after)
    assert not found["tables_moved"]
    assert "Tables whose numbers moved" not in changes.text(found)
    assert "Tables whose numbers moved" not in "\n".join(changes.html_section(found))


def test_which_tables_are_timings_comes_from_the_item_category_not_the_name(tmp_path, monkeypatch):
    study = tmp_path / "z"
    study.mkdir()
    (study / "study.yaml").write_text(
        "items:\n"
        "  - {id: Cost, category: Compute, outputs: [{table: my_costs}]}\n"
        "  - {id: Table 4, category: Accuracy, outputs: [{table: table4_compute}, {figure: fig_costs}]}\n"
    )
    monkeypatch.setattr(changes.registry, "folder", lambda sid: tmp_path / sid)
    assert changes.timing_tables(["z", "missing"]) == {"z/tables/my_costs.csv"}


def test_paper_a_table4_is_a_timing_table():
    assert "a/tables/table4_compute.csv" in changes.timing_tables(["a"])
    assert "a/tables/fig5b_length.csv" not in changes.timing_tables(["a"])


# ------------------------------------------------------------------------------------------------ 2. identifiers


def _move(tmp_path, old: pd.DataFrame, new: pd.DataFrame):
    old.to_csv(tmp_path / "old.csv", index=False)
    new.to_csv(tmp_path / "new.csv", index=False)
    return changes.table_move(tmp_path / "old.csv", tmp_path / "new.csv")


def test_an_identifier_column_is_never_the_largest_move(tmp_path):
    old = pd.DataFrame({"task": ["number", "letter"], "seed": [0, 0], "step": [100, 100], "accuracy": [0.90, 0.80]})
    new = pd.DataFrame({"task": ["number", "letter"], "seed": [1000, 1000], "step": [6750, 6750], "accuracy": [0.91, 0.80]})
    move = _move(tmp_path, old, new)
    assert move["largest"]["column"] == "accuracy"
    assert move["largest"]["before"] == pytest.approx(0.90) and move["largest"]["after"] == pytest.approx(0.91)
    assert move["cells"] == 1  # the seeds and steps are no moved numbers
    assert move["identifiers"] == ["seed", "step"] and "identifiers changed: seed, step" in move["what"]
    assert "task=number" in move["largest"]["at"]


def test_identifier_only_changes_still_show(tmp_path):
    old = pd.DataFrame({"claim": ["A-1"], "seed": [1], "measured": [0.5]})
    move = _move(tmp_path, old, old.assign(seed=2))
    assert move is not None and move["cells"] == 0 and move["largest"] is None and move["identifiers"] == ["seed"]


def test_rows_are_matched_by_their_key_columns(tmp_path):
    old = pd.DataFrame({"variant": ["rope", "nope", "mla"], "layer": [0, 0, 0], "ours": [94.6, 80.0, 50.0]})
    reordered = old.iloc[[2, 0, 1]].reset_index(drop=True)
    assert _move(tmp_path, old, reordered) is None  # the same rows in another order: nothing moved
    fewer = pd.DataFrame({"variant": ["nope", "rope"], "layer": [0, 0], "ours": [80.0, 97.95]})
    move = _move(tmp_path, old, fewer)
    assert move["keys"] == ["variant"] and move["rows_removed"] == 1 and move["rows_added"] == 0
    assert move["cells"] == 1 and move["largest"]["at"] == "variant=rope"
    assert move["largest"]["before"] == pytest.approx(94.6) and move["largest"]["after"] == pytest.approx(97.95)


def test_report_diff_names_the_measurement_not_the_seed(tmp_path, capsys):
    from posym import cli

    old = pd.DataFrame({"claim": ["B-1", "B-1"], "task": ["count", "distance"], "seed": [0, 0], "ours": [55.0, 94.6]})
    before = _report(tmp_path, "v1", {"claims_B1": old})
    after = _report(tmp_path, "v2", {"claims_B1": old.assign(seed=[7, 7], ours=[55.0, 95.1])})
    cli.main(["report", "diff", str(before), str(after)])
    out = capsys.readouterr().out
    assert "largest ours at claim=B-1, task=distance: 94.6 → 95.1" in out
    assert "largest seed" not in out


# ------------------------------------------------------------------------------------------------ 3. why claims changed


CLAIMS = pd.DataFrame({"claim": ["B-2"], "task": ["count"], "check": ["NoPE − RoPE"], "seed": [0], "ours": [-27.7]})


def _claim_pair(tmp_path, *, new_config=None, new_commands=None, new_modules=None, old_commands=TRAIN_CODE, commits=(None, None)):
    config = {"b": {"train": {"lr": 1}}, "c": {"steps": 1}, "report": {"title": "t"}}
    before = _report(tmp_path, "v1", {"claims_B2": CLAIMS}, verdicts={"B-2": ("not reproduced", "NoPE − RoPE: -27.7 vs 8.26")},
                     config=config, commands=old_commands, modules=MODULES, commit=commits[0])
    after = _report(tmp_path, "v2", {"claims_B2": CLAIMS.assign(ours=4.5)}, verdicts={"B-2": ("reproduced", "NoPE − RoPE: 4.5 vs 8.26")},
                    config=new_config or config, commands=new_commands or TRAIN_CODE, modules=new_modules or MODULES,
                    commit=commits[1])
    return changes.compare(before, after)


def test_a_flip_with_the_same_code_and_config_is_called_nondeterminism(tmp_path):
    found = _claim_pair(tmp_path, new_config={"b": {"train": {"lr": 1}}, "c": {"steps": 2}, "report": {"title": "other"}})
    # another study's settings and the report's title change nothing paper B's claims were judged on
    assert found["causes"]["b"]["same"]
    assert [c["key"] for c in found["config"]] == ["report.title"]  # c is in neither report: its settings not compared
    assert found["verdicts"][0]["distance"] == ["NoPE − RoPE: -27.7 vs 8.26", "NoPE − RoPE: 4.5 vs 8.26"]
    text = changes.text(found)
    assert "b B-2: not reproduced → reproduced" in text
    assert "same code and configuration: the change is run-to-run nondeterminism" in text
    assert "run-to-run nondeterminism" in "\n".join(changes.html_section(found))


def test_a_flip_names_the_config_keys_and_the_code_that_differ(tmp_path):
    found = _claim_pair(
        tmp_path,
        new_config={"b": {"train": {"lr": 2}}, "c": {"steps": 1}, "report": {"title": "t"}},
        new_commands={**TRAIN_CODE, "train": "t2", "c train": "x2"},
        new_modules={**MODULES, "posym.training.trainer": "2", "posym.studies.c.training": "2"},
    )
    cause = found["causes"]["b"]
    assert cause["config"] == ["b.train.lr"] and not cause["same"]
    assert cause["commands"] == ["train"]  # c's command is not paper B's code
    assert cause["modules"] == ["posym.training.trainer"]
    line = changes.cause_line("b", cause)
    assert "configuration b.train.lr" in line and "code of train (modules changed: posym.training.trainer)" in line
    assert "nondeterminism" not in changes.text(found)
    assert line in changes.text(found)


def test_a_value_that_moves_under_the_same_verdict_is_explained_too(tmp_path):
    before = _report(tmp_path, "v1", {"claims_B2": CLAIMS}, verdicts={"B-2": ("not reproduced", "-27.7 vs 8.26")}, commands=TRAIN_CODE)
    after = _report(tmp_path, "v2", {"claims_B2": CLAIMS.assign(ours=-4.1)}, verdicts={"B-2": ("not reproduced", "-4.1 vs 8.26")},
                    commands=TRAIN_CODE)
    found = changes.compare(before, after)
    (entry,) = found["verdicts"]
    assert entry["before"] == entry["after"] == "not reproduced"
    assert entry["checks_moved"] == ["b/tables/claims_B2.csv"]
    assert "b: same code and configuration" in changes.text(found)


def test_unchanged_claims_get_no_explanation(tmp_path):
    before = _report(tmp_path, "v1", {"claims_B2": CLAIMS}, verdicts={"B-2": ("reproduced", "x")}, commands=TRAIN_CODE)
    after = _report(tmp_path, "v2", {"claims_B2": CLAIMS}, verdicts={"B-2": ("reproduced", "x")}, commands=TRAIN_CODE)
    found = changes.compare(before, after)
    assert not found["verdicts"] and not found["causes"]


def test_without_fingerprints_the_commit_decides(tmp_path):
    other = _claim_pair(tmp_path / "1", old_commands=None, commits=("0c7e222", "19eb8c1"))
    assert not other["causes"]["b"]["same"] and not other["causes"]["b"]["code_recorded"]
    assert "code 0c7e222 → 19eb8c1 (which of it differs is not known" in changes.text(other)
    assert "no code fingerprints recorded in v1" in changes.text(other)
    assert not other["code"]["modules"]["added"]  # not every module listed as added
    same = _claim_pair(tmp_path / "2", old_commands=None, commits=("0c7e222", "0c7e222"))
    assert same["causes"]["b"]["same"]
    assert "same commit (0c7e222) and configuration: the change is run-to-run nondeterminism" in changes.text(same)


def test_the_changes_are_json(tmp_path):
    found = _claim_pair(tmp_path, new_commands={**TRAIN_CODE, "train": "t2"})
    assert json.loads(json.dumps(found))["causes"]["b"]["commands"] == ["train"]


def test_only_the_study_s_own_and_the_shared_settings_count_for_its_claims():
    code = {"recorded": True, "commands": TRAIN_CODE, "all_modules": MODULES, "commit": "x", "label": "x"}
    manifest = {"code": code, "packages": {}}
    config = [{"key": k, "before": 1, "after": 2} for k in ("b.train.lr", "c.steps", "report.title", "threads")]
    cause = changes.causes(manifest, manifest, "b", config, {"a", "b", "c"})
    assert cause["config"] == ["b.train.lr", "threads"] and not cause["same"]
    assert changes.causes(manifest, manifest, "b", config[1:3], {"a", "b", "c"})["same"]
