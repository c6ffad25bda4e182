"""The wheels the offline GPU machine lacks (benchmarks/device_wheels.txt), in the ignored folder ``.whl/`` that the
device tool's ``run`` carries to it with the working tree (``carry: [".whl"]``, 64 MiB in all).

    python benchmarks/device_wheels.py build [--python-version 3.12]   # here, from PyPI: 40 wheels, about 11 MB
    python3 benchmarks/device_wheels.py check                         # there (benchmarks/gpu_check.sh runs it)

``build`` downloads each pinned wheel for CPython ``--python-version`` on manylinux x86-64 (the GPU machine's Python is
3.12: ../shared/notes/gpu-device.md), builds the one pin with no wheel on PyPI (pure Python) from its source, writes
``MANIFEST.json`` (the Python, each wheel's size and sha256), and refuses a folder that would not travel: its wheels
and the working tree over 64 MiB. It fills ``.whl.partial/`` and renames it, so ``.whl/`` is whole or absent.

``check`` holds the folder to its manifest and to the pins: every pin's wheel there with its sha256, nothing else, built
for the Python that runs the check. It exits 2 saying what is wrong (a stale folder after a pin changed, a download
cut short, wheels for another Python), before pip would fail on it less clearly. Standard library only: it runs on
the GPU machine before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PINS = REPO / "benchmarks" / "device_wheels.txt"
FOLDER = REPO / ".whl"
MANIFEST = "MANIFEST.json"
#: What one ``run`` carries: the working tree and the carried folders together (/work/.library/device/README.md).
CARRY_LIMIT = 64 * 2**20
#: pip matches a manylinux tag exactly: the tags under which the pins' binary wheels are published.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: Pins with no wheel on PyPI, built here from their source distribution (each pure Python).
FROM_SOURCE = ("connection-pool",)


class WheelsError(RuntimeError):
    """The wheel folder is not what the pins and its manifest say; the message says what to do."""


def normalise(name: str) -> str:
    """A project name as PEP 503 compares them (``GitPython``, ``rpds_py`` -> ``gitpython``, ``rpds-py``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = PINS) -> dict[str, str]:
    """``{project: version}`` of a pin list: ``name==version`` lines, ``#`` comments."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if not match:
            raise WheelsError(f"{path}:{number}: not a name==version pin: {raw.strip()!r}")
        name = normalise(match.group(1))
        if name in pins:
            raise WheelsError(f"{path}:{number}: {name} is pinned twice")
        pins[name] = match.group(2)
    return pins


def wheel_project(filename: str) -> tuple[str, str]:
    """(project, version) of a wheel's file name (PEP 427: ``name-version(-build)?-python-abi-platform.whl``)."""
    parts = filename[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise WheelsError(f"{filename}: not a wheel's file name")
    return normalise(parts[0]), parts[1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _wheels(folder: Path) -> dict[str, str]:
    """``{project: file name}`` of the wheels in ``folder``; two versions of one project are refused (pip would
    stop the whole install on them)."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.whl")):
        project, _ = wheel_project(path.name)
        if project in found:
            raise WheelsError(f"{folder}: two wheels of {project} ({found[project]}, {path.name}); keep one")
        found[project] = path.name
    return found


def write_manifest(folder: Path, pins: dict[str, str], python_version: str) -> dict:
    """Write ``folder``/MANIFEST.json for the wheels there, which must be exactly the pins' (project and version)."""
    folder = Path(folder)
    wheels = _wheels(folder)
    _same_as_pins(folder, {p: wheel_project(f)[1] for p, f in wheels.items()}, pins)
    manifest = {
        "python_version": python_version,
        "platforms": list(PLATFORMS),
        "pins": str(PINS.relative_to(REPO)),
        "wheels": {f: {"bytes": (folder / f).stat().st_size, "sha256": _sha256(folder / f)} for f in sorted(wheels.values())},
    }
    manifest["total_bytes"] = sum(w["bytes"] for w in manifest["wheels"].values())
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, folder / MANIFEST)
    return manifest


def _same_as_pins(folder: Path, versions: dict[str, str], pins: dict[str, str]) -> None:
    missing = sorted(set(pins) - set(versions))
    extra = sorted(set(versions) - set(pins))
    wrong = sorted(f"{p} {versions[p]} (pinned {pins[p]})" for p in set(pins) & set(versions) if versions[p] != pins[p])
    if missing or extra or wrong:
        said = [f"{what}: {', '.join(names)}" for what, names in (("missing", missing), ("not pinned", extra), ("other versions", wrong)) if names]
        raise WheelsError(f"{folder} does not hold the pinned wheels ({'; '.join(said)}); rebuild it: python benchmarks/device_wheels.py build")


def check(folder: Path, pins: dict[str, str], python_version: str | None = None, limit: int = CARRY_LIMIT) -> dict:
    """The manifest of ``folder`` once its wheels are found to be the pins', whole, alone, for ``python_version``
    (default: this interpreter's) and within ``limit`` bytes; raise :class:`WheelsError` otherwise."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise WheelsError(f"{folder}/{MANIFEST} is missing: build the folder here with python benchmarks/device_wheels.py build")
    manifest = json.loads((folder / MANIFEST).read_text())
    python_version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    if manifest["python_version"] != python_version:
        raise WheelsError(f"{folder} holds wheels for Python {manifest['python_version']}, not {python_version}: build --python-version {python_version}")
    listed = set(manifest["wheels"])
    present = set(_wheels(folder).values())
    if listed != present:
        said = [f"{what}: {', '.join(sorted(names))}" for what, names in (("missing", listed - present), ("not in the manifest", present - listed)) if names]
        raise WheelsError(f"{folder} is not what its manifest lists ({'; '.join(said)}); rebuild it")
    for name, entry in manifest["wheels"].items():
        if _sha256(folder / name) != entry["sha256"]:
            raise WheelsError(f"{folder / name}: its sha256 is not the manifest's (cut short or changed); rebuild the folder")
    _same_as_pins(folder, {p: v for p, v in map(wheel_project, listed)}, pins)
    if manifest["total_bytes"] > limit:
        raise WheelsError(f"{folder}: {manifest['total_bytes'] / 2**20:.1f} MiB of wheels, over the {limit / 2**20:.0f} MiB a run carries")
    return manifest


def tree_bytes(repo: Path = REPO) -> int:
    """The bytes of the working tree that a ``run`` sends: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo, check=True, capture_output=True
    ).stdout.split(b"\0")
    return sum((repo / os.fsdecode(name)).stat().st_size for name in listed if name and (repo / os.fsdecode(name)).is_file())


def build(folder: Path, pins: dict[str, str], python_version: str) -> dict:
    """Download and build the pins' wheels for ``python_version`` into ``folder`` (replaced whole); its manifest."""
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    downloaded = [f"{name}=={version}" for name, version in pins.items() if name not in FROM_SOURCE]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
         *platforms, "-d", str(partial), *downloaded],
        check=True,
    )  # fmt: skip
    built = [f"{name}=={pins[name]}" for name in FROM_SOURCE if name in pins]
    if built:
        subprocess.run([*pip, "wheel", "--no-deps", "--no-binary=:all:", "-w", str(partial), *built], check=True)
        for name in FROM_SOURCE:
            wheel = next((f for f in partial.glob("*.whl") if wheel_project(f.name)[0] == name), None)
            if wheel is not None and not wheel.name.endswith("-py3-none-any.whl"):
                raise WheelsError(f"{wheel.name}: built for this machine only; it cannot travel to another Python")
    manifest = write_manifest(partial, pins, python_version)
    tree = tree_bytes()
    if manifest["total_bytes"] + tree > CARRY_LIMIT:
        raise WheelsError(
            f"{manifest['total_bytes'] / 2**20:.1f} MiB of wheels and a {tree / 2**20:.1f} MiB working tree are over the "
            f"{CARRY_LIMIT / 2**20:.0f} MiB a run carries (kept in {partial} to look at)"
        )
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    manifest["tree_bytes"] = tree
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["build", "check"])
    parser.add_argument("--dir", type=Path, default=FOLDER, help="the wheel folder (default: .whl/ in the repository)")
    parser.add_argument("--python-version", default=None, help="build: the Python the wheels are for (default 3.12, the GPU machine's); check: default this interpreter's")
    args = parser.parse_args(argv)
    try:
        pins = read_pins()
        if args.action == "build":
            manifest = build(args.dir, pins, args.python_version or "3.12")
            print(f"{args.dir}: {len(manifest['wheels'])} wheels for Python {manifest['python_version']}, "
                  f"{manifest['total_bytes'] / 2**20:.1f} MiB; with the {manifest['tree_bytes'] / 2**20:.1f} MiB working tree "
                  f"{(manifest['total_bytes'] + manifest['tree_bytes']) / 2**20:.1f} of the {CARRY_LIMIT / 2**20:.0f} MiB a run carries")  # fmt: skip
        else:
            manifest = check(args.dir, pins, args.python_version)
            print(f"{args.dir}: {len(manifest['wheels'])} wheels for Python {manifest['python_version']}, {manifest['total_bytes'] / 2**20:.1f} MiB, as pinned")
    except WheelsError as err:
        print(f"device_wheels.py: {err}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as err:  # pip has said why above
        print(f"device_wheels.py: {' '.join(err.cmd[1:4])} failed (exit {err.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
