"""A study's jobs as one table, from which both its commands' parsers and its rules' command lines come.

A :class:`Job` declares a command ``posym <study> <name>`` as the rule that runs it sees it: its file inputs
(``--<name>``), its outputs (``--out-<name>``, or one ``--out``), the wildcards it takes (``--<wildcard>``), the keys
of the study's config section it reads (``--settings``) and the options only a person passes. A study's table is
``JOBS`` in ``posym/studies/<id>/jobs.py``. :func:`add_commands` builds the commands' parsers from it;
:func:`rule_params` gives a rule its params (``params: **posym("a scores")``), and the command line they make is
checked against the table (:func:`command_words`), so a rule and its command that disagree stop a dry run instead
of a job. Adding an analysis job is one entry in the table and its function.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from posym import registry
from posym.pipeline.config import add_settings_arguments


class JobMismatch(ValueError):
    """A rule's inputs, outputs or wildcards are not the ones its command declares."""


@dataclass(frozen=True)
class File:
    """A file input: one path, or several (``several``: nargs="+"); ``optional``: a rule may go without it (give
    an empty list)."""

    help: str
    several: bool = False
    optional: bool = False


@dataclass(frozen=True)
class Value:
    """A value: one of the rule's wildcards (:attr:`Job.values`) or an option only a person passes
    (:attr:`Job.extras`)."""

    help: str
    type: Callable[[str], Any] = str
    choices: Sequence | None = None
    optional: bool = False


@dataclass(frozen=True)
class Job:
    """A command and the rule's job that runs it.

    ``function``: "module:function", called with the parsed arguments; imported only when the command runs, so
    that the rules read the tables without the commands' imports. ``inputs``: the rule's named inputs.
    ``outputs``: its named outputs (name → help); ``out``: instead, the help of its one unnamed output. ``values``:
    the rule's wildcards the command takes. ``settings``: the keys of the study's section it reads (``("scores",)``:
    ``config["a"]["scores"]``). ``extras``: options a person may pass; the rules never do.
    """

    name: str
    help: str
    function: str
    inputs: Mapping[str, File] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    out: str | None = None
    values: Mapping[str, Value] = field(default_factory=dict)
    settings: tuple[str, ...] = ()
    extras: Mapping[str, Value] = field(default_factory=dict)

    def __post_init__(self):
        if bool(self.outputs) == (self.out is not None):
            raise ValueError(f"job {self.name}: give either its named outputs or its one output (out)")

    def run(self, args: argparse.Namespace) -> None:
        module, _, name = self.function.partition(":")
        getattr(importlib.import_module(module), name)(args)


#: The core's commands that rules run through :func:`rule_params`; posym/cli.py declares its others itself.
CORE = (
    Job(
        "evaluate",
        "accuracy of a run's final checkpoint on stored sets",
        "posym.cli:cmd_evaluate",
        inputs={
            "index": File("the run's checkpoints.json"),
            "data": File("the stored sets (a split, or paper A's length-extended sets)"),
        },
        out="the table to write (.csv)",
    ),
)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_commands(sub, jobs: Sequence[Job]) -> None:
    """A subcommand of ``sub`` (a study's subparsers) for each job of the table ``jobs``."""
    for job in jobs:
        s = sub.add_parser(job.name, help=job.help)
        if job.settings:
            add_settings_arguments(s)
        s.add_argument("--threads", type=int, help="torch CPU threads")
        for name, file in job.inputs.items():
            nargs = "+" if file.several else None
            s.add_argument(flag(name), type=Path, nargs=nargs, required=not file.optional, help=file.help)
        for name, text in job.outputs.items():
            s.add_argument(flag(f"out_{name}"), type=Path, required=True, help=text)
        if job.out is not None:
            s.add_argument("--out", type=Path, required=True, help=job.out)
        for name, value in {**job.values, **job.extras}.items():
            s.add_argument(
                flag(name), type=value.type, choices=value.choices, required=not value.optional, help=value.help
            )
        s.set_defaults(func=job.run)


def find(study_id: str | None, jobs: Sequence[Job], command: str) -> Job:
    for job in jobs:
        if job.name == command:
            return job
    owner = f"study {study_id}" if study_id else "the core"
    raise JobMismatch(f"{owner} has no command {command!r} (its commands: {', '.join(j.name for j in jobs)})")


def command_words(
    study_id: str | None,
    jobs: Sequence[Job],
    command: str,
    inputs: Mapping[str, str | Sequence[str]],
    outputs: Mapping[str, str] | Sequence[str],
    wildcards: Mapping[str, Any],
) -> list[str]:
    """The words of ``posym <study_id> <command>`` as a rule runs it: ``--<name>`` and its paths for each of the
    rule's named ``inputs`` in its order (one given as an empty list is left out), ``--out-<name>`` for each named
    output (``outputs`` a mapping) or ``--out`` for a single unnamed one (a sequence), ``--<name>`` for each
    wildcard of the job's. Raises :class:`JobMismatch`, naming the flag, where they are not the job's."""
    job = find(study_id, jobs, command)
    prefix = f"posym {' '.join(filter(None, (study_id, command)))}"
    entry = f"posym/studies/{study_id}/jobs.py" if study_id else "posym/pipeline/jobs.py, CORE"

    def mismatch(text: str) -> JobMismatch:
        return JobMismatch(f"{prefix}: {text} (its entry in {entry})")

    given = {name: [value] if isinstance(value, str) else list(value) for name, value in inputs.items()}
    given = {name: paths for name, paths in given.items() if paths}
    words = [word for word in (study_id, command) if word]
    for name, paths in given.items():
        if name not in job.inputs:
            raise mismatch(f"the rule gives input {flag(name)}, which the command does not take")
        if len(paths) > 1 and not job.inputs[name].several:
            raise mismatch(f"the rule gives {len(paths)} paths to {flag(name)}, which takes one")
        words += [flag(name), *map(str, paths)]
    for name, file in job.inputs.items():
        if name not in given and not file.optional:
            raise mismatch(f"the rule gives no input {flag(name)}, which the command needs")
    named = outputs if isinstance(outputs, Mapping) else {}
    unnamed = [] if isinstance(outputs, Mapping) else list(outputs)
    if job.out is not None:
        if named or len(unnamed) != 1:
            raise mismatch(f"the rule gives {_outputs(named, unnamed)}; the command takes one unnamed output, --out")
        words += ["--out", str(unnamed[0])]
    else:
        if unnamed:
            raise mismatch(f"the rule gives {_outputs(named, unnamed)}; the command takes {_outputs(job.outputs, [])}")
        if extra := [flag(f"out_{name}") for name in named if name not in job.outputs]:
            raise mismatch(f"the rule gives output {', '.join(extra)}, which the command does not take")
        if missing := [flag(f"out_{name}") for name in job.outputs if name not in named]:
            raise mismatch(f"the rule gives no output {', '.join(missing)}, which the command needs")
        for name, path in named.items():
            words += [flag(f"out_{name}"), str(path)]
    for name in job.values:
        if name not in wildcards:
            raise mismatch(f"the rule has no wildcard {{{name}}} for {flag(name)}")
        words += [flag(name), str(wildcards[name])]
    return words


def _outputs(named: Mapping, unnamed: Sequence) -> str:
    flags = [flag(f"out_{name}") for name in named] + [f"unnamed output {path}" for path in unnamed]
    return ", ".join(flags) or "no output"


def lookup(command: str) -> tuple[str | None, Sequence[Job], str]:
    """The study, table and command name of ``command``: "a scores" (study a's), or a core command ("evaluate")."""
    first, _, rest = command.partition(" ")
    if first not in registry.known():
        return None, CORE, command
    module = registry.study_module(first, "jobs")
    if module is None:
        raise JobMismatch(f"study {first} has no jobs table (posym/studies/{first}/jobs.py)")
    return first, module.JOBS, rest


def settings_json(section: Mapping, keys: Sequence[str], omit: Sequence[str] = ()) -> str:
    """The settings ``keys`` of a study's ``section``, as the JSON a command takes with --settings, without the
    names ``omit`` within those that are mappings."""
    chosen = {key: section[key] for key in keys}
    for key, value in chosen.items():
        if isinstance(value, dict):
            chosen[key] = {name: v for name, v in value.items() if name not in omit}
    return json.dumps(chosen, sort_keys=True)


def rule_params(config: Mapping, command: str, *, omit: Sequence[str] = ()) -> dict:
    """The params of a rule that runs ``posym <command>`` ("a scores"; a core command: "evaluate"), for
    ``params: **posym(command)``, with the shell ``posym {params.job} {params.settings} --threads {threads}``.

    ``job``: a function of the job's wildcards, input and output giving the command line (:func:`command_words`:
    it fails, and with it the dry run, where the rule and the table disagree). ``settings``: the --settings of
    the job's settings keys. They are a param of their own, the one Snakemake compares between runs (a param
    computed from the job's files is not), so an edit of a setting reruns exactly the jobs that read it; ``omit``
    leaves out names within those settings (of the ones that are mappings) that the job does not read.
    """
    study_id, jobs, name = lookup(command)
    job = find(study_id, jobs, name)

    def words(wildcards, input, output) -> str:  # Snakemake passes a params function's arguments by these names
        named = dict(output.items())
        return shlex.join(
            command_words(study_id, jobs, name, dict(input.items()), named or list(output), dict(wildcards.items()))
        )

    words.command = command  # for posym.pipeline.code.check_rule: the command whose code the rule's shell must carry
    settings = ""
    if job.settings:
        settings = shlex.join(["--settings", settings_json(config[study_id], job.settings, omit)])
    return {"job": words, "settings": settings}
