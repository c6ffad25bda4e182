"""The benchmark scripts run and write the JSON the report shows (their figures are not asserted:
speed is measured by the benchmarks themselves, never by timed tests)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_train_throughput_writes_every_contender_and_ratio(tmp_path):
    out = tmp_path / "train_throughput.json"
    command = [sys.executable, "benchmarks/train_throughput.py", "--rounds", "1", "--steps", "1", "--packed", "2", "--threads", "1", "--out", str(out)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == {"posym", "hf_gptj", "posym_packed2", "posym_bf16", "hf_gptj_bf16", "posym_packed2_bf16"}
    for name, r in results.items():
        assert r["samples_per_second"] > 0 and r["matmul_seconds_per_step"] > 0, name
        # Matmuls are part of a step: the matmul-only rate bounds the measured one.
        assert r["samples_per_second_if_only_matmuls"] > r["samples_per_second"], name
    expected = results["posym_packed2_bf16"]["samples_per_second"] / results["hf_gptj"]["samples_per_second"]
    assert report["ratios"]["posym_packed2_bf16 / HF at fp32"] == expected
    assert set(report["peak_gflops"]) == {"fp32", "bf16"}
    assert report["summary"]
