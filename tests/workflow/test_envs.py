"""The conda environments (envs/*.yaml): their structure, their pins, and that Snakemake can create them.

Conda cannot be reached on our machines, so CI cannot build the environments. What it checks instead: each file
is a conda-forge environment with a pinned pip section whose pins are pyproject.toml's; every rule names one;
and, with a stand-in `conda` that does what `conda env create` does with a pip section (write the pip lines to a
requirements file beside the environment file and run pip there), `snakemake --sdm conda
--conda-create-envs-only` creates every environment with posym installed from the repository the workflow runs
from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from conftest import CONFIG_MATRIX, REPO, TINY, clean_env, copy_repo, snakemake_command, workflow_rules

ENVS = sorted((REPO / "envs").glob("*.yaml"))
EDITABLE = "-e ${POSYM_REPO}"  # pip expands ${POSYM_REPO}; the workflow sets it (workflow/rules/common.smk)
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][0-9A-Za-z.+!-]*)$")


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def pyproject_pins() -> dict[str, str]:
    """Package -> pinned version over pyproject's dependencies and every optional group."""
    project = pyproject()["project"]
    requirements = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        requirements += group
    pins = {}
    for text in requirements:
        requirement = Requirement(text)
        (spec,) = requirement.specifier  # exact pins only: reproducible to the byte
        assert spec.operator == "==", f"pyproject.toml: {text} is not an exact pin"
        name = canonicalize_name(requirement.name)
        assert pins.get(name, spec.version) == spec.version, f"pyproject.toml pins {name} twice, differently"
        pins[name] = spec.version
    return pins


def env_parts(path: Path) -> tuple[list[str], list[str]]:
    """(conda dependencies, pip lines) of an environment file."""
    dependencies = yaml.safe_load(path.read_text())["dependencies"]
    conda = [d for d in dependencies if isinstance(d, str)]
    pip_sections = [d["pip"] for d in dependencies if isinstance(d, dict)]
    assert len(pip_sections) == 1, f"{path.name}: expected one pip section"
    return conda, pip_sections[0]


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.name)
def test_env_file_is_a_conda_forge_env_with_a_pinned_pip_section(path):
    env = yaml.safe_load(path.read_text())
    assert set(env) == {"channels", "dependencies"}, f"{path.name}: unexpected keys {sorted(env)}"
    # conda-forge only: `defaults` needs a licence at many sites and mixes badly with conda-forge
    assert env["channels"] == ["conda-forge", "nodefaults"]
    conda, pip = env_parts(path)
    assert len(conda) == 2, f"{path.name}: conda installs python and pip only, everything else comes from pip"
    python = next(d for d in conda if d.startswith("python="))
    version = python.removeprefix("python=")
    assert re.fullmatch(r"3\.\d+", version), python
    assert SpecifierSet(pyproject()["project"]["requires-python"]).contains(f"{version}.0"), python
    assert any(re.fullmatch(r"pip=\d+(\.\d+)*", d) for d in conda), conda
    for line in pip:
        assert line == EDITABLE or PIN.match(line), f"{path.name}: pip line {line!r} is neither a pin nor posym"
    assert pip.count(EDITABLE) == 1, f"{path.name}: posym must be installed editable, once: {EDITABLE}"
    pinned = [PIN.match(line).group("name") for line in pip if line != EDITABLE]
    assert "torch" in pinned, f"{path.name}: torch must be pinned (posym depends on it)"


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.name)
def test_env_pins_agree_with_pyproject(path):
    pins = pyproject_pins()
    _, pip = env_parts(path)
    for line in pip:
        if line == EDITABLE:
            continue
        match = PIN.match(line)
        name = canonicalize_name(match.group("name"))
        assert name in pins, f"{path.name}: {name} is not a dependency in pyproject.toml"
        assert match.group("version") == pins[name], (
            f"{path.name} pins {name}=={match.group('version')}, pyproject.toml {pins[name]}"
        )


def test_training_env_takes_pypis_cuda_build_of_torch():
    """PyPI's Linux wheel of torch 2.13.0 is the CUDA 13 build; a local version (+cpu) or index would replace it."""
    _, pip = env_parts(REPO / "envs" / "training.yaml")
    assert f"torch=={pyproject_pins()['torch']}" in pip
    assert not [line for line in pip if "+" in line or "index-url" in line or "find-links" in line], pip


def test_every_rule_that_runs_something_names_an_environment():
    """Asked of the workflow Snakemake builds (rules generated from the studies' tables and `use rule` variants
    included), on the tiny config with the LLM probe's rule present."""
    checked = []
    for rule in workflow_rules(CONFIG_MATRIX["llm"]):
        if rule.shellcmd is None and not rule.is_run:
            continue  # e.g. `rule all`: nothing runs
        assert rule.conda_env is not None, f"rule {rule.name} has no conda: directive"
        assert Path(rule.conda_env).resolve() in [e.resolve() for e in ENVS], f"rule {rule.name} names {rule.conda_env}"
        checked.append(rule.name)
    assert {"split", "train", "evaluate_test", "a_scores", "a_llm_probe", "a_notebook_training", "report"} <= set(checked)


FAKE_CONDA = '''#!{python}
"""Stand-in for `conda`: answers what Snakemake asks and, for `env create`, does what conda does with the pip
section (pip lines into a requirements file beside the environment file, pip run in that folder), resolving
only the editable install (a dry run); the pins are checked against pyproject.toml elsewhere."""
import json, os, subprocess, sys, tempfile
import yaml

args = sys.argv[1:]
if args == ["--version"]:
    print("conda 24.11.3")
elif args[:2] == ["info", "--json"]:
    print(json.dumps({{"conda_prefix": "/nonexistent/conda", "platform": "linux-64", "conda_version": "24.11.3"}}))
elif args[:2] == ["config", "--get"]:
    print(json.dumps({{"get": {{"channel_priority": "strict"}}, "success": True, "warnings": []}}))
elif args[:2] == ["env", "create"]:
    file = args[args.index("--file") + 1].strip('"')
    prefix = args[args.index("--prefix") + 1].strip('"')
    pip = [d for d in yaml.safe_load(open(file))["dependencies"] if isinstance(d, dict)][0]["pip"]
    folder = os.path.dirname(os.path.abspath(file))
    with tempfile.NamedTemporaryFile("w", prefix="condaenv.", suffix=".requirements.txt", dir=folder, delete=False) as req:
        req.write("\\n".join(line for line in pip if line.startswith("-e")) + "\\n")
    report = os.path.join(folder, "pip-report.json")
    result = subprocess.run(
        [{python!r}, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-build-isolation", "--ignore-installed",
         "--quiet", "--report", report, "-r", req.name],
        cwd=folder, capture_output=True, text=True,
    )
    os.unlink(req.name)
    with open(os.environ["FAKE_CONDA_LOG"], "a") as log:
        installed = json.load(open(report))["install"] if result.returncode == 0 else []
        log.write(json.dumps({{"file": file, "prefix": prefix, "pip": pip, "returncode": result.returncode,
                              "stderr": result.stderr, "installed": installed}}) + "\\n")
    if result.returncode:
        sys.exit(result.stderr)
    os.makedirs(os.path.join(prefix, "bin"), exist_ok=True)
elif args[:1] == ["clean"]:  # Snakemake's clean-up of package tarballs
    pass
else:
    sys.exit(f"fake conda: unexpected arguments {{args}}")
'''


def test_snakemake_creates_every_env_with_posym_from_the_workflow_repository(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "conda").write_text(FAKE_CONDA.format(python=sys.executable))
    (fakebin / "conda").chmod(0o755)
    log = tmp_path / "conda.log"
    env = {**clean_env(), "PATH": f"{fakebin}{os.pathsep}{os.environ['PATH']}", "FAKE_CONDA_LOG": str(log)}
    env.pop("POSYM_REPO", None)  # the workflow must set it itself
    command = snakemake_command(repo, "--sdm", "conda", "--conda-create-envs-only", configfiles=(TINY,), cores=1)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    created = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(created) == len(ENVS), created
    sources = set()
    for entry in created:
        # Snakemake hands conda a copy of the file in .snakemake/conda/: a path relative to envs/ would break
        assert Path(entry["file"]).parent == repo / ".snakemake" / "conda", entry["file"]
        assert entry["returncode"] == 0, entry["stderr"]
        (posym,) = entry["installed"]
        assert posym["metadata"]["name"] == "posym"
        assert posym["download_info"] == {"url": repo.as_uri(), "dir_info": {"editable": True}}
        sources.add(tuple(entry["pip"]))
    assert sources == {tuple(env_parts(path)[1]) for path in ENVS}
