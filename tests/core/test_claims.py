"""Claim verdict tables, the report's claims summary, and the studies' one template for judging claims."""

import ast
import re

import pandas as pd

from posym.pipeline import claims, config, study

# Paper A's claim rows as the report gets them (study.yaml applied to the default configuration).
CLAIMS = study.load("a").plan(config.validate({}))["claims"]
SPEC = "spec §A12"


def test_seed_summary_counts_only_tested_seeds_and_needs_all_to_pass():
    rows = [
        claims.row("A-4", "layers 0-3: ID <= 3", "L0 1", "ID <= 3", True, source=SPEC, task="number", seed=0),
        claims.row("A-4", "layers 0-3: ID <= 3", "L0 9", "ID <= 3", False, source=SPEC, task="number", seed=1),
        claims.row("A-4", "layers 0-3: ID <= 3", "-", "ID <= 3", None, source=SPEC, task="number", seed=2),
        claims.row("A-4", "layer 0 in 10-30", "L0 18", "10-30", True, source=SPEC, task="letter", seed=0),
        claims.row("A-4", "layer 0 in 10-30", "L0 19", "10-30", True, source=SPEC, task="letter", seed=1),
    ]
    table = claims.with_seed_summary(rows).set_index(["task", "seed"])
    assert table.loc[("number", claims.ALL_SEEDS), "measured"] == "1 of 2 seeds pass"
    assert table.loc[("number", claims.ALL_SEEDS), "verdict"] == "fail"
    assert table.loc[("letter", claims.ALL_SEEDS), "verdict"] == "pass"
    assert len(table) == 7


def test_single_seed_tables_get_no_summary_row():
    table = claims.with_seed_summary([claims.row("A-1", "acc", "0.999", ">= 0.99", True, source=SPEC, task="number", seed=0)])
    assert table["seed"].tolist() == ["0"]


def test_summary_covers_every_claim_and_grades_mixed_results():
    a1 = claims.with_seed_summary(
        [
            claims.row("A-1", "acc", "0.999", ">= 0.99", True, source=SPEC, task="number", seed=0),
            claims.row("A-1", "acc", "0.999", ">= 0.99", True, source=SPEC, task="letter", seed=0),
        ]
    )
    a5 = claims.with_seed_summary(
        [
            claims.row("A-5", "letter >= 0.9 at 500", "0.95", ">= 0.9", True, source=SPEC, seed=0),
            claims.row("A-5", "letter >= 0.9 at 500", "0.80", ">= 0.9", False, source=SPEC, seed=1),
            claims.row("A-5", "number <= 0.85 at 100", "0.5", "<= 0.85", True, source=SPEC, seed=0),
            claims.row("A-5", "number <= 0.85 at 100", "0.6", "<= 0.85", True, source=SPEC, seed=1),
        ]
    )
    a2 = [  # judged on the one check that could be tested
        claims.row("A-2", "spread", "1350", ">= 1000", True, source=SPEC),
        claims.row("A-2", "order", "too few layers", "strict", None, source=SPEC),
    ]
    summary = claims.summary([a1, a5, pd.DataFrame(a2)], CLAIMS).set_index("claim")
    assert summary.loc["A-2", "verdict"] == "pass" and summary.loc["A-2", "ours"] == "1 of 1 checks pass (1 not tested)"
    assert list(summary.index) == [f"A-{i}" for i in range(1, 8)]
    assert summary.loc["A-1", "verdict"] == "pass" and summary.loc["A-1", "ours"] == "2 of 2 checks pass"
    assert summary.loc["A-5", "verdict"] == "partly" and summary.loc["A-5", "ours"] == "1 of 2 checks pass"
    assert summary.loc["A-3", "verdict"] == "not tested"


def test_summary_reads_tables_back_from_csv(tmp_path):
    path = tmp_path / "claims_A6.csv"
    claims.with_seed_summary([claims.row("A-6", "exact", "800 of 800", "all", True, source=SPEC)]).to_csv(path, index=False)
    summary = claims.summary([pd.read_csv(path, dtype=str, keep_default_na=False)], CLAIMS).set_index("claim")
    assert summary.loc["A-6", "verdict"] == "pass"


def test_a_claim_that_does_not_apply_says_why():
    rows = [dict(c, applicable=c["id"] != "A-4", reason="not applicable to this model: a.model.position is 'alibi'") for c in CLAIMS]
    summary = claims.summary([], rows).set_index("claim")
    assert summary.loc["A-4", "verdict"] == claims.NOT_APPLICABLE and "alibi" in summary.loc["A-4", "ours"]
    assert summary.loc["A-1", "verdict"] == "not tested"


def test_every_row_says_where_its_threshold_comes_from_and_the_seed_summary_keeps_it():
    rows = [claims.row("A-1", "acc", f"{a}", ">= 0.99", a >= 0.99, source="spec §A12 A-1", task="number", seed=s) for s, a in ((0, 0.999), (1, 0.98))]
    table = claims.with_seed_summary(rows)
    assert list(table.columns) == claims.COLUMNS and "source" in claims.COLUMNS
    assert (table["source"] == "spec §A12 A-1").all() and table["seed"].tolist() == ["0", "1", claims.ALL_SEEDS]


def test_summary_reads_a_table_written_before_the_source_column():
    older = claims.with_seed_summary([claims.row("A-6", "exact", "800 of 800", "all", True, source=SPEC)]).drop(columns="source")
    assert claims.summary([older], CLAIMS).set_index("claim").loc["A-6", "verdict"] == "pass"


# ------------------------------------------------------------------------------------------ one template


def top_level_functions(study_id: str) -> dict[str, list[str]]:
    """Every top-level function name defined in a study's package, with the modules that define it."""
    folder = study.load(study_id).folder
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, []).append(str(path.relative_to(folder)))
    return found


def judge(claim_id: str) -> str:
    """The name of the function that judges a claim: claim_a2 for A-2."""
    return "claim_" + claim_id.replace("-", "").lower()


def test_every_claim_is_judged_by_one_function_claim_id_that_its_notebook_calls():
    for study_id in ("a", "b", "c"):
        table, functions = study.load(study_id), top_level_functions(study_id)
        for claim in table.claims:
            name = judge(claim.id)
            assert len(functions.get(name, [])) == 1, f"{claim.id}: {name} defined in {functions.get(name)}"
            notebook = table.notebooks[claim.notebook].source.read_text()
            assert re.search(rf"\b{name}\b", notebook), f"{claim.id}: notebook {claim.notebook} does not call {name}"
        # the names before the convention (claims, claims_a4, ...) are gone
        assert not [f for f in functions if f == "claims" or f.startswith("claims_")], study_id


def test_paper_a_claims_read_their_thresholds_from_the_schema():
    table = study.load("a")
    thresholds = config.study_defaults("a")["claims"]
    for claim in table.claims:
        key = "claims." + claim.id.replace("-", "").lower()
        assert key.split(".")[1] in thresholds, claim.id
        assert key in table.notebooks[claim.notebook].config, f"{claim.id}: notebook {claim.notebook} is not given {key}"


def test_every_study_keeps_its_published_values_in_paper_py():
    for study_id in ("a", "b", "c"):
        assert (study.load(study_id).folder / "paper.py").is_file(), study_id
