"""The jobs tables (posym.pipeline.jobs): each study's commands' parsers and its rules' command lines come from one
table, so that a rule and its command cannot disagree unnoticed."""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from snakemake.iocontainers import Namedlist

from conftest import REPO, TINY, clean_env
from posym import cli, registry
from posym.pipeline import code
from posym.pipeline import config as posym_config
from posym.pipeline import jobs
from posym.pipeline.jobs import File, Job, JobMismatch, Value

#: Every jobs table, by study (None: the core's).
TABLES = {None: jobs.CORE}
for study_id in registry.known():
    if (module := registry.study_module(study_id, "jobs")) is not None:
        TABLES[study_id] = module.JOBS
EVERY_JOB = [(study_id, job) for study_id, table in TABLES.items() for job in table]


def rule_files(job: Job):
    """Inputs, outputs and wildcards of a rule that runs ``job`` (several paths where it takes several)."""
    inputs = {name: [f"in/{name}-1", f"in/{name}-2"] if file.several else f"in/{name}" for name, file in job.inputs.items()}
    outputs = {name: f"out/{name}.csv" for name in job.outputs} if job.out is None else ["out/table.csv"]
    wildcards = {name: "7" if value.type is int else (value.choices or ["x"])[0] for name, value in job.values.items()}
    return inputs, outputs, wildcards


@pytest.fixture(scope="module")
def parser():
    return cli.parser()


def test_study_tables_are_found():
    assert {"a", "b", "c"} <= set(TABLES)


@pytest.mark.parametrize("study_id, job", EVERY_JOB, ids=[f"{s or 'core'}-{j.name}" for s, j in EVERY_JOB])
def test_the_command_parses_what_its_rule_runs(parser, study_id, job):
    inputs, outputs, wildcards = rule_files(job)
    args = parser.parse_args(jobs.command_words(study_id, TABLES[study_id], job.name, inputs, outputs, wildcards))
    for name, paths in inputs.items():
        assert getattr(args, name) == ([Path(p) for p in paths] if isinstance(paths, list) else Path(paths))
    if job.out is None:
        assert {name: getattr(args, f"out_{name}") for name in outputs} == {n: Path(p) for n, p in outputs.items()}
    else:
        assert args.out == Path(outputs[0])
    for name, value in wildcards.items():
        assert getattr(args, name) == job.values[name].type(value)
    assert args.func == job.run  # the parser is the table's
    assert hasattr(args, "settings") == bool(job.settings)
    module, _, function = job.function.partition(":")
    assert callable(getattr(importlib.import_module(module), function)), job.function


def words(study_id, command, inputs, outputs, wildcards=None):
    return jobs.command_words(study_id, TABLES[study_id], command, inputs, outputs, wildcards or {})


def test_a_rule_and_its_command_that_disagree_are_named_by_the_flag():
    with pytest.raises(JobMismatch, match=r"posym b probe: the rule gives input --train-data, which the command"):
        words("b", "probe", {"index": "i", "data": "d", "train_data": "t"}, ["o"])
    with pytest.raises(JobMismatch, match=r"posym b probe: the rule gives no input --data, which the command needs"):
        words("b", "probe", {"index": "i"}, ["o"])
    with pytest.raises(JobMismatch, match="no input --data"):  # an empty list is no input
        words("b", "probe", {"index": "i", "data": []}, ["o"])
    with pytest.raises(JobMismatch, match="2 paths to --data, which takes one"):
        words("b", "probe", {"index": "i", "data": ["d1", "d2"]}, ["o"])
    with pytest.raises(JobMismatch, match="no output --out-purity"):
        words("a", "scores", {"index": "i", "data": "d"}, {"scores": "s"})
    with pytest.raises(JobMismatch, match="gives unnamed output o; the command takes --out-scores, --out-purity"):
        words("a", "scores", {"index": "i", "data": "d"}, ["o"])
    with pytest.raises(JobMismatch, match="gives --out-table; the command takes one unnamed output, --out"):
        words("b", "probe", {"index": "i", "data": "d"}, {"table": "o"})
    with pytest.raises(JobMismatch, match=r"the rule has no wildcard \{task\} for --task"):
        words("a", "flow", {"index": "i"}, {"grid": "g", "summary": "s"}, {"variant": "main"})
    with pytest.raises(JobMismatch, match="study b has no command 'scores'"):
        words("b", "scores", {}, [])


def test_an_optional_input_a_rule_goes_without_is_left_out():
    outputs = {"probe_items": "i.csv", "probe_summary": "s.csv"}
    assert words("a", "llm-probe", {"model": []}, outputs, {"llm": "endpoint"}) == [
        "a", "llm-probe", "--out-probe-items", "i.csv", "--out-probe-summary", "s.csv", "--llm", "endpoint",
    ]  # fmt: skip


def test_rule_params_are_the_command_line_and_the_settings_it_reads():
    config = posym_config.validate({"studies": ["a", "c"]})
    params = jobs.rule_params(config, "a scores")
    input = Namedlist(fromdict={"index": "i.json", "data": "t.safetensors"})  # as Snakemake gives them
    output = Namedlist(fromdict={"scores": "s.csv", "purity": "p.csv"})
    wildcards = Namedlist(fromdict={"variant": "main", "task": "number", "seed": "0"})
    assert params["job"](wildcards, input, output) == (
        "a scores --index i.json --data t.safetensors --out-scores s.csv --out-purity p.csv"
    )
    assert params["settings"] == shlex.join(["--settings", json.dumps({"scores": config["a"]["scores"]}, sort_keys=True)])

    params = jobs.rule_params(config, "c real-model", omit=("models",))
    assert json.loads(shlex.split(params["settings"])[1])["real_models"] == {
        k: v for k, v in config["c"]["real_models"].items() if k != "models"
    }
    assert jobs.rule_params(config, "evaluate")["settings"] == ""
    assert jobs.rule_params(config, "evaluate")["job"](wildcards, input, Namedlist(["acc.csv"])) == (
        "evaluate --index i.json --data t.safetensors --out acc.csv"
    )


# --------------------------------------------------------------------------- recipe: add an analysis job


def cmd_count_rows(args) -> None:
    """The recipe's analysis: the rows of a table, times a setting."""
    settings = posym_config.command_settings(args, "b", "probe")["probe"]
    rows = len(args.table.read_text().splitlines()) - 1
    args.out.write_text(f"{args.task},{rows * settings['samples']}\n")


def test_an_analysis_job_is_one_entry_in_the_table_and_its_function(tmp_path):
    job = Job(
        "count-rows",
        "the rows of a table",
        f"{__name__}:cmd_count_rows",
        inputs={"table": File("a table")},
        out="the count",
        values={"task": Value("the run's task")},
        settings=("probe",),
    )
    table = (*TABLES["b"], job)
    parser = argparse.ArgumentParser()
    jobs.add_commands(parser.add_subparsers(dest="command", required=True), table)
    (tmp_path / "t.csv").write_text("a\n1\n2\n")
    command = jobs.command_words("b", table, "count-rows", {"table": str(tmp_path / "t.csv")}, [str(tmp_path / "n.csv")], {"task": "count"})
    args = parser.parse_args([*command[1:], "--set", "probe.samples=10"])
    args.func(args)
    assert (tmp_path / "n.csv").read_text() == "count,20\n"


def test_a_dry_run_fails_where_a_rule_and_its_command_disagree(tmp_path):
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        "from posym.pipeline import jobs\n"
        "from posym.pipeline.config import validate\n"
        "config.update(validate({'studies': ['b']}))\n"
        "rule probe:\n"
        "    input: index='i.json', data='t.safetensors', labels='l.csv'\n"
        "    output: 'probe.csv'\n"
        "    params: **jobs.rule_params(config, 'b probe')\n"
        "    shell: 'posym {params.job} {params.settings} --threads {threads}'\n"
    )
    for name in ("i.json", "t.safetensors", "l.csv"):
        (tmp_path / name).touch()
    command = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(tmp_path), "-n", "-p", "--cores", "1"]
    result = subprocess.run(command, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert result.returncode != 0
    assert "posym b probe: the rule gives input --labels, which the command does not take" in result.stdout + result.stderr


# --------------------------------------------------------------------------- the real workflow


def test_every_command_the_workflow_runs_parses(tmp_path, parser):
    """A dry run of every job of studies a, b and c (their test configurations merged, a local LLM and a
    converted model among the probes' models): each ``posym`` command it prints parses."""
    (tmp_path / "results" / "tiny-llm").mkdir(parents=True)  # the models the configurations name
    (tmp_path / "results" / "tiny-llm.gguf").touch()
    (tmp_path / "all.yaml").write_text("studies: [a, b, c]\n")
    configs = [TINY, *(REPO / "tests" / "configs" / f"{name}.yaml" for name in ("b", "c", "llm", "ac")), tmp_path / "all.yaml"]
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "1"]
    command += ["-n", "-p", "--forceall", "--configfile", *map(str, configs)]
    result = subprocess.run(command, capture_output=True, text=True, env=clean_env(), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    printed = [line.removeprefix("Shell command: ") for line in result.stdout.splitlines() if line.startswith("Shell command: ")]
    # every job's command starts with the no-op that carries its code fingerprint (": posym code <digest>; ",
    # posym.pipeline.code); only rule all's job runs none, which Snakemake prints as "None"
    assert printed.count("None") == 1
    assert not [line for line in printed if line != "None" and not code.MARK.match(line)]
    shells = [command for command in (code.MARK.sub("", line, count=1) for line in printed) if command.startswith("posym ")]
    assert len(shells) > 20
    failed = []
    for shell in shells:
        words = shlex.split(shell)
        try:
            parser.parse_args(words[1 : words.index(">")])
        except SystemExit:
            failed.append(shell)
    assert not failed, "\n".join(failed)
    ran = {tuple(shlex.split(shell)[1:3]) for shell in shells if shell.split()[1] in TABLES}
    assert ran >= {(study_id, job.name) for study_id, job in EVERY_JOB if study_id}  # every study command
