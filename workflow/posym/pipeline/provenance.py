"""What produced a result: code version, configuration, package versions, hashes, the machine."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Iterable

from posym.pipeline.config import canonical, digest

PACKAGES = ("posym", "torch", "numpy", "pandas", "safetensors", "snakemake", "papermill", "matplotlib", "seaborn", "jsonschema", "pyyaml")


def _git(repo: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip()


def code_version(repo: Path | str) -> dict:
    """``git describe --always --dirty`` plus, for a dirty tree, a hash of the uncommitted diff.

    The diff hash gives every distinct uncommitted state of tracked files its own report version,
    so a report is never overwritten by one made from other code. (Untracked files are left out:
    the pipeline's own outputs are untracked until someone commits a report.)
    """
    repo = Path(repo)
    describe = _git(repo, "describe", "--always", "--dirty")
    if describe is None:
        return {"describe": "nogit", "commit": None, "dirty": None, "label": "nogit"}
    commit = _git(repo, "rev-parse", "HEAD")
    dirty = describe.endswith("-dirty")
    label = describe
    if dirty:
        diff = _git(repo, "diff", "HEAD", "--binary") or ""
        label = f"{describe}.{hashlib.sha256(diff.encode()).hexdigest()[:8]}"
    return {"describe": describe, "commit": commit, "dirty": dirty, "label": label}


def report_version(config: dict, repo: Path | str) -> str:
    """``<code>-cfg<hash>``: names the code and the (validated) configuration a report was made from
    (:func:`posym.pipeline.config.canonical`: what of the configuration the hash covers)."""
    return f"{code_version(repo)['label']}-cfg{digest(canonical(config))}"


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["python"] = platform.python_version()
    return versions


def _cpuinfo(field: str) -> str | None:
    """The value of the first ``field`` line of Linux's /proc/cpuinfo, or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle if line.startswith(field))
    except (OSError, StopIteration):
        return None


def cpu_name() -> str:
    """This machine's processor, by its model name where Linux tells it."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


#: The CPU features that decide what bf16 costs: AMX tiles (Intel Sapphire Rapids and later: several times the fp32
#: matmul rate), AVX-512 BF16 dot products (AMD Zen 4, Intel Cooper Lake: about twice), or neither (bf16 emulated).
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_flags() -> dict[str, bool]:
    """Which of :data:`CPU_FLAGS` this CPU has, by Linux's /proc/cpuinfo (all False where it cannot be read)."""
    flags = set((_cpuinfo("flags") or "").split())
    return {flag: flag in flags for flag in CPU_FLAGS}


def bf16_units(flags: dict[str, bool]) -> str:
    """In words, what a CPU with ``flags`` (:func:`cpu_flags`) has for bf16 matmuls."""
    if flags.get("amx_bf16"):
        return "AMX"
    if flags.get("avx512_bf16"):
        return "AVX-512 BF16, no AMX"
    return "none (bf16 emulated)"


def hardware_description(devices: Iterable[str]) -> str:
    """This machine's processor and the devices the training runs used."""
    return f"{cpu_name()}, {os.cpu_count()} cores; training on {', '.join(sorted(set(devices)))}"
