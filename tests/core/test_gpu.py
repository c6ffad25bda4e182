"""The training loop on a GPU: data resident on the device, no host synchronisation inside a step, bf16 by
default, packed seeds equal to separate runs within float tolerance, and repeatable runs with
``deterministic``. Marked ``gpu``: skipped without CUDA, run by ``benchmarks/gpu_check.sh`` on a GPU machine."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from conftest import model_config, train_config
from posym.data.files import load_tensors, sha256_file
from posym.studies.a.tasks import get
from posym.training.splits import Run, SplitObjective, write_outputs
from posym.training.trainer import Trainer

pytestmark = pytest.mark.gpu

VOCAB = get("number").vocabulary
MODEL = model_config(len(VOCAB), n_layer=2, d_model=64)


@pytest.fixture(scope="module")
def data():
    return {s: (get("number").samples(4096, 42 + s), get("number").samples(512, 100 + s)) for s in (0, 1, 2)}


def _trainer(tmp_path, data, seeds, **settings):
    config = train_config(
        **{"steps": 60, "batch_size": 64, "learning_rate": 3e-3, "warmup_steps": 6, "checkpoint_every": 30,
           "eval_samples": 256, "device": "cuda", "log_every": 20, **settings}
    )  # fmt: skip
    runs = [Run(seed=s, train=data[s][0], test=data[s][1], out=tmp_path / f"seed{s}") for s in seeds]
    return Trainer(SplitObjective(runs, MODEL, config, VOCAB.tokens))


def _train(trainer):
    """Train, then write each run's tables."""
    trainer.train()
    for m, run in enumerate(trainer.objective.runs):
        write_outputs(run.out, trainer.objective.record(m))


def test_data_and_evaluation_sets_live_on_the_gpu_and_auto_is_bf16(tmp_path, data):
    trainer = _trainer(tmp_path, data, [0, 1], precision="auto")
    assert trainer.objective.config.precision == "bf16"
    assert all(b.tokens.is_cuda and b.labels.is_cuda for b in trainer.objective.batches)
    assert trainer.objective.eval_tokens.is_cuda


@pytest.mark.parametrize("compile", [False, True])
def test_a_step_does_not_synchronise_with_the_host(tmp_path, data, compile):
    """Eager and compiled (CUDA graphs over the step): no step after the first waits for the GPU."""
    trainer = _trainer(tmp_path, data, [0, 1, 2], compile=compile)
    # The epoch's order is made (and copied to the GPU) on the first step of an epoch; a compiled step compiles on
    # its first call and records its CUDA graphs on the next ones.
    first = 4 if compile else 2
    for step in range(1, first):
        trainer.step(step)
    assert (trainer.compiled is not None) == compile  # a compiled step that fell back to eager says so in the log
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(first, first + 6):
            trainer.step(step)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_packed_seeds_equal_separate_runs_within_float_tolerance(tmp_path, data):
    """On a GPU, matmul kernels are chosen by shape (the batch of members among them), so a member's arithmetic may
    round differently packed than alone: equal within float32 tolerance, not to the bit."""
    packed = _trainer(tmp_path / "packed", data, [0, 1, 2], precision="fp32")
    _train(packed)
    for s in (0, 1, 2):
        alone = _trainer(tmp_path / "alone", data, [s], precision="fp32")
        _train(alone)
        a = load_tensors(tmp_path / f"packed/seed{s}/checkpoints/step-000060/model.safetensors")
        b = load_tensors(tmp_path / f"alone/seed{s}/checkpoints/step-000060/model.safetensors")
        for name in a:
            assert torch.allclose(a[name], b[name], rtol=1e-3, atol=1e-4), (s, name)
        losses = [pd.read_csv(tmp_path / f"{kind}/seed{s}/train_log.csv")["loss"] for kind in ("packed", "alone")]
        assert (losses[0] - losses[1]).abs().max() < 1e-3


@pytest.fixture
def restores_determinism():
    yield
    torch.use_deterministic_algorithms(False)  # a process-wide setting: the trainer sets it for its process


def test_deterministic_runs_repeat_to_the_bit(tmp_path, data, restores_determinism):
    for name in ("first", "second"):
        _trainer(tmp_path / name, data, [0, 1], deterministic=True).train()
    for s in (0, 1):
        files = [tmp_path / f"{name}/seed{s}/checkpoints/step-000060/model.safetensors" for name in ("first", "second")]
        assert sha256_file(files[0]) == sha256_file(files[1])


def test_a_resumed_run_ends_as_an_uninterrupted_one(tmp_path, data, restores_determinism):
    """Resuming restores the optimizer state on the GPU (the fused AdamW keeps its step count there)."""
    reference = _trainer(tmp_path / "reference", data, [0, 1], deterministic=True)
    reference.train()
    interrupted = _trainer(tmp_path / "interrupted", data, [0, 1], deterministic=True)
    nothing = {0: [], 1: []}
    interrupted._write(0, [0, 1], False, nothing, {0: [], 1: []}, 0.0)
    for step in range(30):
        interrupted.step(step)
    interrupted._write(30, [0, 1], False, nothing, {0: [], 1: []}, 0.0)  # where a killed run would have left its newest state
    resumed = _trainer(tmp_path / "interrupted", data, [0, 1], deterministic=True)
    assert resumed.resume() == 30
    resumed.train()
    for s in (0, 1):
        files = [tmp_path / f"{name}/seed{s}/checkpoints/step-000060/model.safetensors" for name in ("reference", "interrupted")]
        assert sha256_file(files[0]) == sha256_file(files[1])


@pytest.mark.parametrize("saved_on, resumed_on", [("cpu", "cuda"), ("cuda", "cpu")])
def test_a_checkpoint_resumes_on_another_kind_of_device(tmp_path, data, caplog, saved_on, resumed_on):
    """The dropout generator's state of one kind of device does not fit the other's: the run resumes all the same
    (tests/core/test_train.py checks the generator it resumes with). fp32 on both: "auto" would be bf16 on the GPU
    only, and a checkpoint of another precision is not resumed."""
    interrupted = _trainer(tmp_path, data, [0], device=saved_on, precision="fp32")
    interrupted._write(0, [0], False, {0: []}, {0: []}, 0.0)
    for step in range(30):
        interrupted.step(step)
    interrupted._write(30, [0], False, {0: []}, {0: []}, 0.0)
    resumed = _trainer(tmp_path, data, [0], device=resumed_on, precision="fp32")
    assert resumed.resume() == 30
    _train(resumed)
    assert f"saved on another kind of device than {resumed_on}" in caplog.text
    assert (tmp_path / "seed0" / "checkpoints" / "step-000060" / "model.safetensors").is_file()


def test_paper_c_stream_gives_the_same_tokens_on_the_gpu_as_on_the_cpu():
    from posym.studies.c import training

    batches = {}
    for device in ("cpu", "cuda"):
        keys = training.stream_keys([[0, torch.tensor([0, 3, 7], device=device), 41]], torch.device(device))
        batches[device] = {k: v.cpu() for k, v in training.random_map_stream(8, 64, 32, 0.9, keys, details=True).items()}
    for name, value in batches["cpu"].items():
        assert torch.equal(value, batches["cuda"][name]), name
