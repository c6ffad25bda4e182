"""Claim verdict tables, the report's claims summary, and the studies' one template for judging claims."""

import ast
import re

import pandas as pd
import pytest

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
    # a claim with a deciding check not tested is at most partly, however many of the others pass
    assert summary.loc["A-2", "verdict"] == claims.PARTLY and summary.loc["A-2", "ours"] == "1 of 1 deciding checks pass (1 not tested)"
    assert list(summary.index) == [f"A-{i}" for i in range(1, 8)]
    assert summary.loc["A-1", "verdict"] == claims.REPRODUCED and summary.loc["A-1", "ours"] == "2 of 2 deciding checks pass"
    assert summary.loc["A-5", "verdict"] == claims.PARTLY and summary.loc["A-5", "ours"] == "1 of 2 deciding checks pass"
    assert summary.loc["A-3", "verdict"] == claims.NOT_TESTABLE and summary.loc["A-1", "evidence"] == "trained"
    # A-7 is decided on a substitute model; with none configured it says what it needs and which config has one
    assert summary.loc["A-7", "verdict"] == claims.NOT_TESTABLE and "configs/llm_offline.yaml" in summary.loc["A-7", "ours"]


def test_a_claim_decided_by_code_checks_alone_is_never_reproduced():
    identity = {"id": "X-1", "statement": "an identity", "paper": "", "evidence": ["code"]}
    rows = [claims.row("X-1", "identity", "1e-15", "< 1e-10", True, source=SPEC)]
    summary = claims.summary([pd.DataFrame(rows)], [identity]).set_index("claim")
    assert summary.loc["X-1", "verdict"] == claims.NOT_TESTABLE and "code checks alone" in summary.loc["X-1", "ours"]


def test_supporting_checks_never_make_a_claim_reproduced():
    theorem = {"id": "X-2", "statement": "a theorem", "paper": "", "evidence": ["theorem"]}
    rows = [
        claims.row("X-2", "bound", "holds", "holds", False, source=SPEC),
        claims.row("X-2", "figure values", "1e-5", "< 1e-3", True, source=SPEC, evidence="code"),
    ]
    summary = claims.summary([pd.DataFrame(rows)], [theorem]).set_index("claim")
    assert summary.loc["X-2", "verdict"] == claims.NOT_REPRODUCED
    assert summary.loc["X-2", "ours"] == "0 of 1 deciding checks pass; supporting checks: 1 of 1 pass"
    only_support = claims.summary([pd.DataFrame(rows[1:])], [theorem]).set_index("claim")
    assert only_support.loc["X-2", "verdict"] == claims.NOT_TESTABLE


def test_observations_are_shown_but_never_counted():
    rows = [
        claims.row("A-6", "bound n >= 2", "holds", "holds", True, source=SPEC),
        claims.row("A-6", "bound at n = 1", "exceeds", "not judged", None, source=SPEC, observation=True),
    ]
    table = claims.with_seed_summary(rows)
    assert table["verdict"].tolist() == ["pass", claims.OBSERVATION]
    assert claims.summary([table], CLAIMS).set_index("claim").loc["A-6", "verdict"] == claims.REPRODUCED


def test_a_check_says_how_far_it_is_from_the_paper_over_seeds():
    rows = [claims.row("A-3", "pure positional heads", f"{n}", ">= 3", n >= 3, source=SPEC, task="number", seed=s, ours=n, paper=4) for s, n in ((0, 2), (1, 3))]
    table = claims.with_seed_summary(rows).set_index("seed")
    assert table.loc["0", "difference"] == -2 and table.loc["0", "relative"] == -0.5
    assert table.loc[claims.ALL_SEEDS, "ours"] == 2.5 and table.loc[claims.ALL_SEEDS, "relative"] == -0.375
    assert table.loc[claims.ALL_SEEDS, "measured"] == "1 of 2 seeds pass; 2.5 ± 0.71 (range 2 … 3)"
    summary = claims.summary([table.reset_index()], CLAIMS).set_index("claim")
    assert summary.loc["A-3", "distance"] == "number: pure positional heads: 2.5 vs 4 (-1.5, -38 %)"
    assert summary.loc["A-1", "distance"] == ""  # no check with the paper's number


def test_a_claim_not_reproduced_says_which_checks_fail_and_which_went_untested():
    rows = [
        claims.row("B-2", "NoPE above RoPE", "-27.7 points", "> 0", False, source=SPEC, task="count"),
        claims.row("B-2", "MLA accuracy", "33 %", ">= 90 %", False, source=SPEC, task="count"),
        claims.row("B-2", "ALiBi accuracy", "not trained", ">= 50 %", None, source=SPEC, task="count"),
        claims.row("B-2", "RoPE learns", "99 %", ">= 90 %", True, source=SPEC, task="count"),
    ]
    b2 = {"id": "B-2", "statement": "count", "paper": "", "evidence": ["trained"]}
    summary = claims.summary([pd.DataFrame(rows)], [b2]).set_index("claim")
    assert summary.loc["B-2", "verdict"] == claims.PARTLY
    assert summary.loc["B-2", "why"] == (
        "fails: count: NoPE above RoPE: -27.7 points (expected > 0); count: MLA accuracy: 33 % (expected >= 90 %)"
        " | not tested: count: ALiBi accuracy: not trained (expected >= 50 %)"
    )
    assert claims.why(pd.DataFrame(rows), shown=1).startswith("fails: count: NoPE above RoPE: -27.7 points (expected > 0); and 1 more")
    reproduced = claims.summary([pd.DataFrame(rows[3:])], [b2]).set_index("claim")
    assert reproduced.loc["B-2", "verdict"] == claims.REPRODUCED and reproduced.loc["B-2", "why"] == ""


def test_an_unknown_kind_of_evidence_names_the_claim():
    with pytest.raises(ValueError, match="claim A-1: unknown kind of evidence 'measured'"):
        claims.row("A-1", "acc", "1", "1", True, source=SPEC, evidence="measured")


def verdict_frame(verdicts, kinds=None) -> pd.DataFrame:
    return pd.DataFrame({"verdict": verdicts, "kind": kinds or ["trained"] * len(verdicts)})


def test_the_headline_says_reproduced_only_when_every_claim_is():
    assert claims.headline("paper B", verdict_frame(["reproduced", "reproduced", "partly", "not reproduced", "not testable here"])) == (
        "paper B: 2 of 5 trained claims reproduced, 1 partly, 1 not reproduced, 1 not testable here"
    )
    assert claims.headline("paper A", verdict_frame(["reproduced"] * 7)) == "paper A: all 7 trained claims reproduced"
    assert claims.headline("paper A", verdict_frame(["not reproduced"] * 2)) == "paper A: 2 trained claims not reproduced"


def test_the_headline_counts_trained_claims_apart_from_theory_released_data_and_code():
    summary = verdict_frame(
        ["reproduced", "not reproduced", "reproduced", "reproduced", "not testable here", "not testable here"],
        ["trained", "trained", "theorem", "released", "code", "code"],
    )
    assert claims.headline("paper C", summary) == (
        "paper C: 1 of 2 trained claims reproduced, 1 not reproduced; also its theory claim reproduced,"
        " its released-data claim reproduced, 2 code claims not testable here"
    )
    # a summary recorded before ``kind`` existed: the kind is the first of its evidence
    recorded = summary.drop(columns="kind").assign(evidence=["trained", "trained", "theorem", "released", "code", "code"])
    assert claims.headline("paper C", recorded) == claims.headline("paper C", summary)
    below = {"below": ["layers", "steps"], "line": "judged at …"}
    assert claims.headline("paper C", summary, below).startswith("paper C (trained below the paper's size): 1 of 2 trained claims")
    assert claims.headline("paper C", summary[summary["kind"] != "trained"]).startswith("paper C: no trained claims; its theory claim")


def test_a_check_an_untrained_model_passes_supports_but_never_decides():
    a3 = [
        claims.row("A-3", "uniform at step 0", "0.999", ">= 0.9", True, source=SPEC, task="number", supporting="every untrained model passes it"),
        claims.row("A-3", "pure symbolic heads", "0", ">= 7", False, source=SPEC, task="number"),
    ]
    summary = claims.summary([pd.DataFrame(a3)], CLAIMS).set_index("claim")
    assert summary.loc["A-3", "verdict"] == claims.NOT_REPRODUCED
    assert summary.loc["A-3", "ours"] == "0 of 1 deciding checks pass; supporting checks: 1 of 1 pass"
    deciding, supporting = claims.split_checks([pd.DataFrame(a3)], next(c for c in CLAIMS if c["id"] == "A-3"))
    assert deciding["check"].tolist() == ["pure symbolic heads"] and supporting["check"].tolist() == ["uniform at step 0"]
    # without the deciding check, the claim is not judged at all: a supporting pass is not a partial result
    assert claims.summary([pd.DataFrame(a3[:1])], CLAIMS).set_index("claim").loc["A-3", "verdict"] == claims.NOT_TESTABLE


def test_checks_on_models_that_did_not_learn_make_a_claim_not_testable_at_this_size():
    rows = [
        claims.row("B-3", "deposit head", "baseline 3 %", "one head", None, source=SPEC, task="distance", untrained=True),
        claims.row("B-3", "no deposit: NoPE", "baseline 4 %", "none dominant", None, source=SPEC, task="count", untrained=True),
    ]
    b3 = {"id": "B-3", "statement": "deposit", "paper": "", "evidence": ["trained"]}
    scale = {"line": "judged at 2 layers × 2 heads; below the paper's size in layers", "below": ["layers"]}
    summary = claims.summary([pd.DataFrame(rows)], [b3], scale).set_index("claim")
    assert summary.loc["B-3", "verdict"] == claims.NOT_TESTABLE_AT_SIZE and "did not learn" in summary.loc["B-3", "ours"]
    assert summary.loc["B-3", "judged at"] == scale["line"] and summary.loc["B-3", "kind"] == "trained"
    # one check not tested for another reason (a variant not trained) leaves it "not testable here"
    other = [rows[0], claims.row("B-3", "no deposit: RoPE", "not trained: rope", "none dominant", None, source=SPEC, task="count")]
    assert claims.summary([pd.DataFrame(other)], [b3]).set_index("claim").loc["B-3", "verdict"] == claims.NOT_TESTABLE
    with pytest.raises(ValueError, match="not tested"):
        claims.row("B-3", "deposit head", "3 %", "one head", False, source=SPEC, untrained=True)
    # the seed summary of a check untested on every seed keeps the reason
    seeds = claims.with_seed_summary([claims.row("B-3", "deposit head", "3 %", "one", None, source=SPEC, seed=s, untrained=True) for s in (0, 1)])
    assert seeds.set_index("seed").loc[claims.ALL_SEEDS, "untrained"] == "yes"


def test_farthest_names_a_failing_check_before_a_passing_one_and_says_when_all_pass():
    rows = [
        claims.row("A-5", "letter at 500", "0.2", ">= 0.9", False, source=SPEC, ours=0.5, paper=0.955),
        claims.row("A-5", "number at 100", "0.05", "<= 0.85", True, source=SPEC, ours=0.05, paper=0.74),
    ]
    summary = claims.summary([pd.DataFrame(rows)], CLAIMS).set_index("claim")
    assert summary.loc["A-5", "distance"].startswith("letter at 500: 0.5 vs 0.955")
    passing = claims.summary([pd.DataFrame(rows[1:])], CLAIMS).set_index("claim")
    assert passing.loc["A-5", "distance"].endswith("(passes)")
    unnumbered = [claims.row("A-5", "letter above number", "0.3", ">= 0.3", False, source=SPEC)]
    assert claims.summary([pd.DataFrame(unnumbered)], CLAIMS).set_index("claim").loc["A-5", "distance"] == claims.NO_NUMBER


def test_summary_reads_tables_back_from_csv(tmp_path):
    path = tmp_path / "claims_A6.csv"
    claims.with_seed_summary([claims.row("A-6", "exact", "800 of 800", "all", True, source=SPEC)]).to_csv(path, index=False)
    summary = claims.summary([pd.read_csv(path, dtype=str, keep_default_na=False)], CLAIMS).set_index("claim")
    assert summary.loc["A-6", "verdict"] == claims.REPRODUCED


def test_a_claim_that_does_not_apply_says_why():
    rows = [dict(c, applicable=c["id"] != "A-4", reason="not applicable to this model: a.model.position is 'alibi'") for c in CLAIMS]
    summary = claims.summary([], rows).set_index("claim")
    assert summary.loc["A-4", "verdict"] == claims.NOT_APPLICABLE and "alibi" in summary.loc["A-4", "ours"]
    assert summary.loc["A-1", "verdict"] == claims.NOT_TESTABLE


def test_every_row_says_where_its_threshold_comes_from_and_the_seed_summary_keeps_it():
    rows = [claims.row("A-1", "acc", f"{a}", ">= 0.99", a >= 0.99, source="spec §A12 A-1", task="number", seed=s) for s, a in ((0, 0.999), (1, 0.98))]
    table = claims.with_seed_summary(rows)
    assert list(table.columns) == claims.COLUMNS and "source" in claims.COLUMNS
    assert (table["source"] == "spec §A12 A-1").all() and table["seed"].tolist() == ["0", "1", claims.ALL_SEEDS]


def test_summary_reads_a_table_written_before_the_source_and_evidence_columns():
    older = claims.with_seed_summary([claims.row("A-6", "exact", "800 of 800", "all", True, source=SPEC)]).drop(columns=["source", "evidence"])
    assert claims.summary([older], CLAIMS).set_index("claim").loc["A-6", "verdict"] == claims.REPRODUCED


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
