"""A study's table (study.yaml): checked when it is loaded, applied to a configuration (what runs, what does not
apply and why), and turned into notebook inputs and parameters."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import REPO
from posym import registry
from posym.pipeline import config, study

TOY = REPO / "tests" / "toy_study"


@pytest.fixture
def studies_dir(tmp_path, monkeypatch):
    """A studies folder holding a copy of the toy study, which a test may break."""
    folder = tmp_path / "studies"
    shutil.copytree(TOY, folder / "toy")
    monkeypatch.setattr(registry, "STUDIES_DIR", folder)
    study.load.cache_clear()
    yield folder / "toy"
    study.load.cache_clear()


def edit(folder, change) -> None:
    path = folder / "study.yaml"
    table = yaml.safe_load(path.read_text())
    change(table)
    path.write_text(yaml.safe_dump(table, sort_keys=False))


def test_the_toy_table_loads(studies_dir):
    toy = study.Study("toy")
    assert [i.id for i in toy.items] == ["Fig 1"] and [c.id for c in toy.claims] == ["T-1"]
    assert [o.name for o in toy.outputs("summary")] == ["toy_accuracy", "toy_final_accuracy", "claims_T1"]
    assert toy.outputs()[0].files() == {"png": "results/toy/figures/toy_accuracy.png", "svg": "results/toy/figures/toy_accuracy.svg"}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t["items"][0].update(notebook="nowhere"), "Fig 1: no notebook 'nowhere'"),
        (lambda t: t["items"][0].update(claim="T-9"), "Fig 1: no claim 'T-9'"),
        (lambda t: t["items"][0]["outputs"].append({"figure": "no_caption"}), "no_caption: no caption"),
        (lambda t: t["items"].append(dict(t["items"][0])), "Fig 1 is listed twice"),
        (lambda t: t["items"][0]["outputs"].append({"figure": "toy_accuracy"}), "toy_accuracy.png is written twice"),
        (lambda t: t["items"][0].pop("category"), "items.0: 'category' is a required property"),
        (lambda t: t["items"][0]["outputs"].append({"figure": "a", "table": "b"}), "items.0.outputs.2"),
        (lambda t: t["notebooks"].update(extra={}), "notebook extra: no"),
    ],
    ids=["notebook", "claim", "caption", "duplicate id", "duplicate file", "required", "figure and table", "missing notebook"],
)
def test_a_malformed_table_is_refused_with_the_reason(studies_dir, change, message):
    edit(studies_dir, change)
    with pytest.raises(study.StudyError, match="study.yaml") as err:
        study.Study("toy")
    assert message in str(err.value)


def test_what_does_not_apply_is_left_out_with_the_reason():
    paper_a = study.load("a")
    alibi = config.validate({"a": {"model": {"position": "alibi"}, "tasks": ["letter"]}})
    runnable = {nb.name for nb in paper_a.runnable(alibi)}
    assert {"frequency", "geometry"}.isdisjoint(runnable) and {"scores", "training", "length"} <= runnable
    assert paper_a.unmet("frequency", alibi).startswith("not applicable to this model: a.model.position is 'alibi', not rope")
    letter_only = config.validate({"a": {"tasks": ["letter"]}})
    assert paper_a.unmet("geometry", letter_only).startswith("not applicable to this configuration: a.tasks is ['letter'], not number")
    plan = paper_a.plan(alibi)
    table1 = next(i for i in plan["items"] if i["id"] == "Table 1")
    assert not table1["applicable"] and "alibi" in table1["reason"]
    assert "results/a/notebooks/frequency.ipynb" not in plan["notebooks"]


def test_paper_a_names_the_files_its_rules_write_and_paper_c_reads():
    assert study.load("a").resolve("a:scores") == "results/a/scores/{variant}/{task}/seed{seed}/scores.csv"
    assert study.load("c").resolve("b:ablation") == "results/b/ablation/{variant}/{task}/seed{seed}/heads.csv"


def test_inputs_expand_over_runs_and_follow_their_conditions():
    paper_a = study.load("a")
    two_seeds = config.validate({"a": {"seeds": [0, 3]}})
    inputs = paper_a.notebook_inputs("scores", two_seeds)
    assert inputs["scores"] == [f"results/a/scores/main/{t}/seed{s}/scores.csv" for t in ("number", "letter") for s in (0, 3)]
    assert paper_a.notebook_inputs("geometry", two_seeds)["coordinates"] == [f"results/a/analysis/main/number/seed{s}/geometry.csv" for s in (0, 3)]
    assert paper_a.notebook_inputs("theory", two_seeds)["discrepancy"] == "results/a/analysis/theory/discrepancy.csv"
    assert paper_a.notebook_inputs("llm", two_seeds) == {}  # no model configured: the probe's files are not inputs
    with_model = config.validate({"a": {"llm": {"endpoint_model": "m"}}})
    assert set(paper_a.notebook_inputs("llm", with_model)) == {"probe_items", "probe_summary"}
    claims = two_seeds["a"]["claims"]  # claims A-2 and A-3's thresholds (the scores notebook judges them)
    assert paper_a.notebook_parameters("scores", two_seeds) == {
        "tasks": ["number", "letter"], "seeds": [0, 3], "gammas": [0.1, 0.05], "a2": claims["a2"], "a3": claims["a3"],
        "runs": paper_a.runs(two_seeds),
    }
    assert paper_a.workflow_inputs("compute", "wall_times") == ["benchmarks"]
    assert paper_a.workflow_inputs("compute", "performance") == ["performance"]


def test_named_paths_are_spelled_once_and_a_wrong_name_is_refused(studies_dir):
    def name_it(table):
        table["paths"] = {"final_copy": "copies/{run}/final.csv"}
        table["notebooks"]["summary"]["inputs"]["copies"] = "toy:final_copy"

    edit(studies_dir, name_it)
    toy = study.Study("toy")
    assert toy.path("final_copy") == "results/toy/copies/{variant}/{task}/seed{seed}/final.csv"
    assert toy.resolve("toy:final_copy") == toy.path("final_copy")
    with pytest.raises(study.StudyError, match="names no path 'final'"):
        toy.path("final")
    edit(studies_dir, lambda table: table["notebooks"]["summary"]["inputs"].update(copies="toy:finals"))
    with pytest.raises(study.StudyError, match="input copies names 'toy:finals', which is not under paths"):
        study.Study("toy")
