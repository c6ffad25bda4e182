"""A CPU trainer keeps the memory a step frees for the next one (posym.training.host_memory): its steps do not fault
their activations' pages in again. Each measurement runs in a process of its own, since the setting holds for the
rest of a process."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Paper A's model at two layers and the config's batch of 192 (activations of a few MiB a step), eager fp32 steps;
# prints the page faults per step after three warm-up steps. "off": as on a C library without mallopt.
STEPS = """
import resource, sys, tempfile
from pathlib import Path
from posym.training import host_memory
from posym.pipeline import config
from posym.nn.gptj import ModelConfig
from posym.studies.a.tasks import get
from posym.training.splits import Run, SplitObjective, TrainConfig
from posym.training.trainer import Trainer
if sys.argv[1] == "off":
    host_memory._done = False
defaults = config.study_defaults("a")
vocab = get("number").vocabulary
model = ModelConfig(vocab_size=len(vocab), **{**defaults["model"], "n_layer": 2})
train = TrainConfig.from_dict({**defaults["train"], "steps": 20, "checkpoint_every": 20, "compile": False, "device": "cpu"})
with tempfile.TemporaryDirectory() as tmp:
    run = Run(seed=0, train=get("number").samples(2000, 1), test=get("number").samples(64, 2), out=Path(tmp))
    trainer = Trainer(SplitObjective([run], model, train, vocab.tokens))
    assert host_memory.keep_freed_memory() == (sys.argv[1] == "on")
    for k in range(3):
        trainer.step(k)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for k in range(3, 13):
        trainer.step(k)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


def faults_per_step(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_cpu_trainer_keeps_freed_memory_so_its_steps_do_not_fault_pages_in_again():
    # Measured on 2 cores: 2,000-3,500 faults a step without, 80-200 with.
    kept, returned = faults_per_step("on"), faults_per_step("off")
    assert kept * 4 < returned, (kept, returned)
