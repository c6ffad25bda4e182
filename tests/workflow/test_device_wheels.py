"""benchmarks/device_wheels.py: the wheel folder the GPU check carries is held to its pins and its manifest, and to
what a device run carries. The download itself needs PyPI and is not run here (docs/gpu.md says when to run it)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("device_wheels", REPO / "benchmarks" / "device_wheels.py")
wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheels)

PINS = {"snakemake": "9.27.1", "rpds-py": "2026.9.1", "connection-pool": "0.0.3"}
FILES = {  # as PyPI and pip name them: underscores for dashes, a binary wheel's tags
    "snakemake": "snakemake-9.27.1-py3-none-any.whl",
    "rpds-py": "rpds_py-2026.9.1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "connection-pool": "connection_pool-0.0.3-py3-none-any.whl",
}


def folder_of(tmp_path, files=FILES.values(), size=1000):
    folder = tmp_path / ".whl"
    folder.mkdir()
    for i, name in enumerate(files):
        (folder / name).write_bytes(bytes([i]) * size)
    return folder


def test_the_committed_pins_parse_and_agree_with_pyproject():
    import tomllib

    pins = wheels.read_pins()
    assert len(pins) == 40 and {"snakemake", "jsonschema", "connection-pool"} <= set(pins)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for name in ("snakemake", "jsonschema"):
        assert f"{name}=={pins[name]}" in declared, name
    assert set(wheels.FROM_SOURCE) <= set(pins)
    # What the GPU machine has is not carried (../shared/notes/gpu-device.md): a second copy could shadow it.
    assert not {"torch", "numpy", "pandas", "pyyaml", "safetensors", "pytest", "pulp"} & set(pins)


def test_a_folder_of_the_pinned_wheels_passes_its_check(tmp_path):
    folder = folder_of(tmp_path)
    manifest = wheels.write_manifest(folder, PINS, "3.12")
    assert set(manifest["wheels"]) == set(FILES.values()) and manifest["total_bytes"] == 3000
    assert wheels.check(folder, PINS, "3.12") == manifest
    with pytest.raises(wheels.WheelsError, match="holds wheels for Python 3.12, not 3.11: build --python-version 3.11"):
        wheels.check(folder, PINS, "3.11")
    with pytest.raises(wheels.WheelsError, match="MiB of wheels, over the"):
        wheels.check(folder, PINS, "3.12", limit=2999)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: (f / FILES["rpds-py"]).unlink(), "missing: rpds_py-2026.9.1"),
        (lambda f: (f / "yte-1.9.4-py3-none-any.whl").write_bytes(b"x"), "not in the manifest: yte-1.9.4"),
        (lambda f: (f / FILES["snakemake"]).write_bytes(b"cut short"), "snakemake-9.27.1-py3-none-any.whl: its sha256 is not the manifest's"),
        (lambda f: (f / "MANIFEST.json").unlink(), "MANIFEST.json is missing: build the folder here with python benchmarks/device_wheels.py build"),
    ],
)
def test_a_folder_that_is_not_its_manifest_is_refused(tmp_path, change, message):
    folder = folder_of(tmp_path)
    wheels.write_manifest(folder, PINS, "3.12")
    change(folder)
    with pytest.raises(wheels.WheelsError, match=re.escape(message)):
        wheels.check(folder, PINS, "3.12")


def test_a_manifest_is_only_written_for_the_pinned_wheels(tmp_path):
    folder = folder_of(tmp_path, [FILES["snakemake"], FILES["rpds-py"]])
    with pytest.raises(wheels.WheelsError, match="missing: connection-pool"):
        wheels.write_manifest(folder, PINS, "3.12")
    with pytest.raises(wheels.WheelsError, match=re.escape("other versions: snakemake 9.27.1 (pinned 9.28.0)")):
        wheels.write_manifest(folder, {**PINS, "snakemake": "9.28.0"}, "3.12")
    (folder / "snakemake-9.28.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(wheels.WheelsError, match="two wheels of snakemake"):
        wheels.write_manifest(folder, PINS, "3.12")


def test_a_pin_list_says_which_line_is_wrong(tmp_path):
    pins = tmp_path / "pins.txt"
    pins.write_text("# comment\nsnakemake==9.27.1  # why\n\nrpds_py>=2026\n")
    with pytest.raises(wheels.WheelsError, match=r"pins.txt:4: not a name==version pin: 'rpds_py>=2026'"):
        wheels.read_pins(pins)
    pins.write_text("GitPython==3.2.1\ngitpython==3.2.1\n")
    with pytest.raises(wheels.WheelsError, match="pins.txt:2: gitpython is pinned twice"):
        wheels.read_pins(pins)


def test_the_working_tree_leaves_room_for_the_wheels():
    """What a device run sends: the tree and the ~10 MB of wheels, under 64 MiB together (build refuses more)."""
    assert 0 < wheels.tree_bytes() < wheels.CARRY_LIMIT - 16 * 2**20


def test_check_on_the_command_line_exits_2_with_what_to_do(tmp_path):
    result = subprocess.run(
        [sys.executable, "benchmarks/device_wheels.py", "check", "--dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 2 and "MANIFEST.json is missing: build the folder here" in result.stderr
