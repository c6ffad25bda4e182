"""CONTRIBUTING.md's recipes, each done as the recipe says on a toy study (tests/toy_study/) in a copy of the
repository, and run through the real workflow: add a study, a figure, a task, a position scheme, a variant grid."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from conftest import REPO, TINY, copy_repo, planned_jobs, snakemake

TOY = REPO / "tests" / "toy_study"
pytestmark = pytest.mark.slow


def commit(workdir) -> None:
    """Commit the recipe's edits, as a contributor would before running (the report version names the commit)."""
    for command in (["add", "-A"], ["commit", "-q", "-m", "recipe"]):
        subprocess.run(["git", "-C", str(workdir), *command], check=True, capture_output=True)


def toy_config(workdir, **section) -> tuple:
    path = workdir / "toy.yaml"
    path.write_text(yaml.safe_dump({"studies": ["toy"], "toy": section}))
    return (path,)


def report_of(workdir, version_glob="*"):
    """The newest report version of a run."""
    return max((workdir / "reports").glob(version_glob), key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """Recipe "add a study": the toy study's folder copied in, switched on in the config, and run."""
    workdir = copy_repo(tmp_path_factory.mktemp("toy"))
    shutil.copytree(TOY, workdir / "workflow" / "posym" / "studies" / "toy")
    snakemake(workdir, configfiles=toy_config(workdir))
    return workdir


def copy_of(toy_run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(toy_run, workdir, symlinks=True)
    return workdir


def test_a_new_study_is_one_folder_and_one_config_section(toy_run):
    report = report_of(toy_run)
    html = (report / "index.html").read_text()
    assert "Toy study: A toy study that follows the recipes of CONTRIBUTING.md" in html
    assert html.count(">rendered</a>") == 1 and 'src="toy/figures/toy_accuracy.png"' in html
    assert (report / "toy" / "tables" / "claims_T1.csv").is_file()
    assert (toy_run / "results" / "toy" / "train" / "main" / "first_token" / "seed0" / "checkpoints.json").is_file()
    assert not (toy_run / "results" / "a").exists()  # paper A is off
    manifest = json.loads((report / "manifest.json").read_text())
    assert set(manifest["studies"]) == {"toy"} and manifest["config"]["report"]["title"] is None
    verdict = manifest["verdicts"]["toy"][0]["verdict"]  # the title follows it
    assert f"<h1>posym: toy study: {'its trained claim reproduced' if verdict == 'reproduced' else '1 trained claim ' + verdict}" in html


def test_studies_run_side_by_side_in_one_dag(toy_run, tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump({"studies": ["a", "toy"]}))
    jobs = planned_jobs(snakemake(toy_run, "-n", configfiles=(TINY, both)))
    assert jobs["train"] == 2 and jobs["report"] == 1  # paper A's two runs (tiny); the toy's one is done
    assert jobs.get("toy_notebook_summary", 0) == 0 and jobs["a_notebook_scores"] == 1


def test_a_new_figure_is_a_row_a_cell_and_a_caption(toy_run, tmp_path):
    workdir = copy_of(toy_run, tmp_path)
    study = workdir / "workflow" / "posym" / "studies" / "toy"
    table = yaml.safe_load((study / "study.yaml").read_text())
    table["items"].append(
        {"id": "Fig 2", "title": "Final accuracy", "notebook": "summary", "category": "Training", "outputs": [{"figure": "toy_final_bars"}]}
    )
    (study / "study.yaml").write_text(yaml.safe_dump(table, sort_keys=False, allow_unicode=True))
    notebook = json.loads((study / "notebooks" / "summary.ipynb").read_text())
    cell = 'fig, ax = plt.subplots()\nax.bar(range(len(last)), last["accuracy"])\nfigures.save_figure(fig, outputs["toy_final_bars"])'
    notebook["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": cell})
    (study / "notebooks" / "summary.ipynb").write_text(json.dumps(notebook))
    (study / "captions" / "toy_final_bars.rst").write_text("Final test accuracy per task and seed, as bars.")
    commit(workdir)

    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=toy_config(workdir)))
    assert jobs == {"toy_notebook_summary": 1, "report": 1, "all": 1}  # no data, no training
    snakemake(workdir, configfiles=toy_config(workdir))
    report = report_of(workdir)
    html = (report / "index.html").read_text()
    assert (report / "toy" / "figures" / "toy_final_bars.png").stat().st_size > 1000
    assert "Final test accuracy per task and seed, as bars." in html and html.count(">rendered</a>") == 2


def test_a_new_task_is_one_file(toy_run, tmp_path):
    workdir = copy_of(toy_run, tmp_path)
    (workdir / "workflow" / "posym" / "studies" / "toy" / "tasks" / "second_token.py").write_text(
        '"""A toy task: the answer is the second symbol."""\n\n'
        "from .first_token import FirstToken\n\n\n"
        "class SecondToken(FirstToken):\n"
        '    name = "second_token"\n'
        "    answer_position = 1\n\n\n"
        "TASK = SecondToken()\n"
    )
    commit(workdir)
    config = toy_config(workdir, tasks=["first_token", "second_token"])
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=config))
    assert jobs["split"] == 2 and jobs["train"] == 1 and jobs["evaluate_test"] == 1  # the new task's only
    snakemake(workdir, configfiles=config)
    final = (report_of(workdir) / "toy" / "tables" / "toy_final_accuracy.csv").read_text()
    assert "second_token" in final and "first_token" in final
    # A task name no study defines is refused by its key, before any job runs.
    result = snakemake(workdir, "-n", configfiles=toy_config(workdir, tasks=["third_token"]), check=False)
    assert result.returncode != 0 and "'toy.tasks.0': 'third_token' is not a task of study toy" in result.stdout + result.stderr


def test_a_new_position_scheme_is_a_class_and_a_name(toy_run, tmp_path):
    workdir = copy_of(toy_run, tmp_path)
    with open(workdir / "workflow" / "posym" / "nn" / "positions.py", "a") as positions:
        positions.write(
            '\n\n@register("shifted_rope")\n'
            "class ShiftedRope(Rope):\n"
            '    """RoPE whose positions start at 100: the same relative angles, other absolute ones."""\n\n'
            "    def rotate(self, x, positions):\n"
            "        return super().rotate(x, positions + 100)\n"
        )
    schema_path = workdir / "workflow" / "posym" / "studies" / "toy" / "schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    schema["properties"]["model"]["properties"]["position"]["enum"].append("shifted_rope")
    schema_path.write_text(yaml.safe_dump(schema, sort_keys=False, allow_unicode=True))
    commit(workdir)
    config = toy_config(workdir, model={"position": "shifted_rope"})
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=config))
    assert jobs["train"] == 1 and "split" not in jobs  # a model setting retrains, the data stay
    snakemake(workdir, configfiles=config)
    index = json.loads((workdir / "results" / "toy" / "train" / "main" / "first_token" / "seed0" / "checkpoints.json").read_text())
    assert index["model"]["position"] == "shifted_rope"
    assert (report_of(workdir) / "toy" / "tables" / "claims_T1.csv").is_file()


#: CONTRIBUTING's "Add a variant grid": the toy study's variants module, as the recipe writes it.
TOY_VARIANTS = '''"""The toy study's run grid: the plain run, and a sweep of the learning rate."""

from posym.pipeline import variants


def run_grid(section):
    plain = variants.plain(section)
    sweep = variants.factor_grid({"train.learning_rate": [0.003, 0.01]}, lambda levels: f"lr{levels['learning_rate']:g}")
    rows = [{"variant": v, "task": t, "seed": s} for v in sweep for t in section["tasks"] for s in section["seeds"]]
    return variants.RunGrid({**plain.variants, **sweep}, {**plain.sets, "sweep": rows})
'''


def test_a_variant_grid_is_a_module_and_a_notebook_input(toy_run, tmp_path):
    workdir = copy_of(toy_run, tmp_path)
    study = workdir / "workflow" / "posym" / "studies" / "toy"
    (study / "variants.py").write_text(TOY_VARIANTS)
    table = yaml.safe_load((study / "study.yaml").read_text())
    table["notebooks"]["summary"]["inputs"]["sweep"] = {"path": "core:test_accuracy", "runs": "sweep"}
    (study / "study.yaml").write_text(yaml.safe_dump(table, sort_keys=False, allow_unicode=True))
    commit(workdir)
    config = toy_config(workdir, train={"learning_rate": 0.003})
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=config))
    # the plain run's learning rate is the sweep's first: lr0.003 reads its training; lr0.01 trains
    assert jobs["train"] == 1 and jobs["train_outputs"] == 2 and jobs["evaluate_test"] == 2 and "split" not in jobs
    snakemake(workdir, configfiles=config)
    results = workdir / "results" / "toy"
    trained = json.loads((results / "train" / "lr0.01" / "first_token" / "seed0" / "checkpoints.json").read_text())
    assert trained["train"]["learning_rate"] == 0.01
    shared = json.loads((results / "train" / "lr0.003" / "first_token" / "seed0" / "checkpoints.json").read_text())
    main = json.loads((results / "train" / "main" / "first_token" / "seed0" / "checkpoints.json").read_text())
    assert shared["final"] == main["final"] and not (results / "train" / "lr0.003" / "first_token" / "seed0" / "checkpoints").exists()
    executed = json.loads((results / "notebooks" / "summary.ipynb").read_text())
    injected = "".join(next(c for c in executed["cells"] if "injected-parameters" in c["metadata"].get("tags", []))["source"])
    assert "results/toy/eval/lr0.01/first_token/seed0/test.csv" in injected and '"variant": "lr0.01"' in injected.split("runs_sweep = [")[1].split("]")[0]


#: CONTRIBUTING's "Add an analysis job": the toy study's jobs table, the command's function, its rule.
TOY_JOBS = '''"""The toy study's commands."""

from posym.pipeline.jobs import File, Job

JOBS = (
    Job(
        "answers",
        "how often each answer token is the label of the run's test split",
        "posym.studies.toy.cli:cmd_answers",
        inputs={"data": File("the run's test split")},
        out="the table to write (.csv)",
    ),
)
'''
TOY_CLI = '''"""The toy study's command functions."""

import pandas as pd

from posym.data import datasets
from posym.data.files import write_csv


def cmd_answers(args):
    labels = pd.Series(datasets.load_split(args.data).labels)
    write_csv(args.out, labels.value_counts().sort_index().rename_axis("label").reset_index(name="count"))
'''
TOY_RULE = '''

rule toy_answers:
    input:
        data=paths.of(paths.SPLIT, study="toy", split="test"),
    output:
        posym_study.load("toy").path("answers"),
    log:
        "logs/toy/answers/{task}/seed{seed}.log",
    params:
        **posym("toy answers"),
    shell:
        code("toy answers") + JOB
'''


def test_an_analysis_job_is_one_table_entry_and_its_function(toy_run, tmp_path):
    workdir = copy_of(toy_run, tmp_path)
    study = workdir / "workflow" / "posym" / "studies" / "toy"
    (study / "jobs.py").write_text(TOY_JOBS)
    (study / "cli.py").write_text(TOY_CLI)
    with open(study / "rules.smk", "a") as rules:
        rules.write(TOY_RULE)
    table = yaml.safe_load((study / "study.yaml").read_text())
    table["paths"] = {"answers": "answers/{task}/seed{seed}.csv"}
    table["notebooks"]["summary"]["inputs"]["answers"] = "toy:answers"
    (study / "study.yaml").write_text(yaml.safe_dump(table, sort_keys=False, allow_unicode=True))
    commit(workdir)
    jobs = planned_jobs(snakemake(workdir, "-n", configfiles=toy_config(workdir)))
    assert jobs["toy_answers"] == 1 and "train" not in jobs  # the new job and what reads it, nothing trained again
    snakemake(workdir, configfiles=toy_config(workdir))
    counts = (workdir / "results" / "toy" / "answers" / "first_token" / "seed0.csv").read_text().splitlines()
    assert counts[0] == "label,count" and len(counts) > 2
    # the command's parser comes from the same entry: a rule that gives it another input stops the dry run
    rules_text = (study / "rules.smk").read_text()
    with open(study / "rules.smk", "a") as rules:
        rules.write(TOY_RULE.replace("rule toy_answers", "rule toy_answers_again").replace('data=', 'split=').replace("answers/{task}", "again/{task}").replace('posym_study.load("toy").path("answers")', '"results/toy/again/{task}/seed{seed}.csv"'))
    table["notebooks"]["summary"]["inputs"]["again"] = "again/{task}/seed{seed}.csv"
    (study / "study.yaml").write_text(yaml.safe_dump(table, sort_keys=False, allow_unicode=True))
    result = snakemake(workdir, "-n", configfiles=toy_config(workdir), check=False)
    assert result.returncode != 0 and "posym toy answers: the rule gives input --split, which the command does not take" in result.stdout + result.stderr
    # and a rule whose shell does not carry the code of the command it runs (posym.pipeline.code.check_rule)
    again = TOY_RULE.replace("rule toy_answers", "rule toy_answers_again").replace("answers/{task}", "again/{task}")
    again = again.replace('posym_study.load("toy").path("answers")', '"results/toy/again/{task}/seed{seed}.csv"')
    (study / "rules.smk").write_text(rules_text + again.replace('code("toy answers") + JOB', 'code("data") + JOB'))
    result = snakemake(workdir, "-n", configfiles=toy_config(workdir), check=False)
    expected = "rule toy_answers_again: its shell starts with the code of posym data but it runs posym toy answers"
    assert result.returncode != 0 and expected in result.stdout + result.stderr
