"""The posym command as people and rules call it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from posym.pipeline import config
from posym.studies.a.tasks import get

REPO = Path(__file__).parents[2]


def posym(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "posym.cli", *args], capture_output=True, text=True)
    if check and result.returncode:
        raise AssertionError(result.stderr)
    return result


@pytest.mark.parametrize("task", ["number", "letter"])
def test_export_samples_prints_the_stored_split_in_order(task):
    lines = posym("export-samples", "--task", task, "--split", "test", "--n", "4", "--seed", "7").stdout.splitlines()
    samples = [json.loads(line) for line in lines]
    size = config.study_defaults("a")["data"]["test_samples"]
    split = get(task).generate_split("test", 7, size)  # the full-size split the pipeline stores
    vocab = get(task).vocabulary
    assert len(samples) == 4
    for i, sample in enumerate(samples):
        assert set(sample) == {"tokens", "label", "hops", "target_pos"}
        assert sample["tokens"] == [vocab.tokens[t] for t in split.tokens[i]]
        assert sample["label"] == vocab.tokens[split.labels[i]] and sample["hops"] == int(split.hops[i])
        assert sample["target_pos"] == int(split.target_pos[i])
        assert len(sample["tokens"]) == 17
        if task == "letter":
            assert all(len(token) == 2 for token in sample["tokens"])  # pairs such as a3 or fc


def test_export_samples_refuses_more_samples_than_the_split_has():
    result = posym("export-samples", "--task", "number", "--split", "val", "--n", "2401", check=False)
    assert result.returncode != 0 and "2400" in result.stderr


def test_a_notebook_missing_a_parameter_is_refused(tmp_path):
    notebook = REPO / "workflow/posym/studies/a/notebooks/length.ipynb"
    result = posym("notebook", str(notebook), str(tmp_path / "out.ipynb"), "--parameters", json.dumps({"length": []}), check=False)
    assert result.returncode != 0
    assert "outputs" in result.stderr and "tasks" in result.stderr
    assert not (tmp_path / "out.ipynb").exists()


def test_train_reports_a_bad_setting_by_its_key(tmp_path):
    result = posym("train", "--task", "number", "--seed", "0", "--out", str(tmp_path), "--set", "train.steps=-1", check=False)
    assert result.returncode == 2 and "config key 'a.train.steps'" in result.stderr


def test_a_study_command_reports_a_bad_setting_by_its_key(tmp_path):
    result = posym("a", "theory", "--out-discrepancy", str(tmp_path / "d.csv"), "--out-exactness", str(tmp_path / "e.csv"), "--set", "theory.alphabet=1", check=False)
    assert result.returncode == 2 and "config key 'a.theory.alphabet'" in result.stderr
    assert not (tmp_path / "d.csv").exists()
