"""The trainer learns, is deterministic, resumes bit-identically after a real kill, refuses bad files."""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from posym.training import checkpoints
from posym.data import datasets, tasks
from posym.data.files import IntegrityError, load_tensors, read_json, save_tensors, sha256_file, write_json
from conftest import model_config, train_config
from posym.training.checkpoints import load_final_model, load_index
from posym.training.evaluate import predict
from posym.studies.a.tasks import get
from posym.training.splits import Run, SplitObjective, TrainConfig, choose_final, learning_rate, train, validation_steps, write_outputs
from posym.training.trainer import Trainer, TrainingDiverged

TINY_MODEL = model_config(len(get("number").vocabulary), n_layer=2, d_model=32)
TINY_TRAIN = train_config(steps=40, batch_size=32, learning_rate=3e-3, warmup_steps=4, checkpoint_every=20, eval_samples=128, device="cpu", log_every=20)


def one_hop(task, n, seed):
    """The 1-hop samples among n generated ones (a quarter, by the balancing)."""
    data = get(task).samples(n, seed)
    return data.select(np.flatnonzero(data.hops == 1))


@pytest.fixture(scope="module")
def small_data():
    return get("number").samples(2048, 42), get("number").samples(256, 7)


@pytest.mark.slow
@pytest.mark.parametrize("task, precision", [("number", "fp32"), ("letter", "fp32"), ("number", "bf16")])
def test_two_layers_learn_one_hop_data(tmp_path, task, precision):
    vocab = get(task).vocabulary
    run = Run(seed=0, train=one_hop(task, 48_000, 42), test=one_hop(task, 2_000, 9), out=tmp_path)
    model = model_config(len(vocab), n_layer=2, d_model=128, embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0)
    config = train_config(
        steps=240, batch_size=128, learning_rate=1e-3, warmup_steps=20, checkpoint_every=120, eval_samples=None,
        device="cpu", log_every=60, precision=precision,
    )  # fmt: skip
    train([run], model, config, list(vocab.tokens))
    metrics = pd.read_csv(tmp_path / "metrics.csv", dtype={"hop": str})
    final = metrics[(metrics["step"] == 240) & (metrics["hop"] == "all")]["accuracy"].item()
    assert final >= 0.99
    # Mixed precision keeps float32 master weights: checkpoints stay float32.
    weights = load_tensors(checkpoints.step_dir(tmp_path / "checkpoints", 240) / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.float32}
    # The trained model predicts alike at either precision.
    model, _, _ = load_final_model(tmp_path / "checkpoints.json")
    fp32, bf16 = (predict(model, run.test.tokens, precision=p) for p in ("fp32", "bf16"))
    assert (fp32 == bf16).mean() >= 0.99


def test_learning_rate_schedule_matches_hf(small_data):
    from transformers import get_linear_schedule_with_warmup

    config = train_config(steps=100, warmup_steps=10, learning_rate=1e-3)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    schedule = get_linear_schedule_with_warmup(optimizer, 10, 100)
    for step in range(100):
        assert learning_rate(step, config) == pytest.approx(optimizer.param_groups[0]["lr"], abs=1e-12)
        optimizer.step()
        schedule.step()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_same_seed_same_weights_and_metrics(tmp_path, small_data, precision):
    train_data, test_data = small_data
    config = TrainConfig(**{**TINY_TRAIN.to_dict(), "precision": precision})
    outs = []
    for name in ("a", "b"):
        train([Run(seed=5, train=train_data, test=test_data, out=tmp_path / name)], TINY_MODEL, config, get("number").vocabulary.tokens)
        outs.append(tmp_path / name)
    for step in (0, 20, 40):
        files = [checkpoints.step_dir(o / "checkpoints", step) / "model.safetensors" for o in outs]
        assert sha256_file(files[0]) == sha256_file(files[1])
    assert (outs[0] / "metrics.csv").read_bytes() == (outs[1] / "metrics.csv").read_bytes()
    other = tmp_path / "c"
    train([Run(seed=6, train=train_data, test=test_data, out=other)], TINY_MODEL, config, get("number").vocabulary.tokens)
    assert sha256_file(other / "checkpoints/step-000040/model.safetensors") != sha256_file(outs[0] / "checkpoints/step-000040/model.safetensors")


def test_index_lists_every_checkpoint_and_keeps_resume_state_in_the_newest_only(tmp_path, small_data):
    train_data, test_data = small_data
    train([Run(seed=0, train=train_data, test=test_data, out=tmp_path)], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens)
    index = load_index(tmp_path / "checkpoints.json")
    assert [c["step"] for c in index["checkpoints"]] == [0, 20, 40]
    states = [checkpoints.has_trainer_state(d) for _, d in checkpoints.list_checkpoints(tmp_path / "checkpoints")]
    assert states == [False, False, True]
    metrics = pd.read_csv(tmp_path / "metrics.csv", dtype={"hop": str})
    assert sorted(metrics["hop"].unique()) == ["1", "2", "3", "4", "all"]
    assert metrics.groupby("step")["n"].max().tolist() == [128, 128, 128]


def test_validation_compares_the_steps_hf_trainer_evaluates():
    assert validation_steps([0, 20, 40, 50], every=20, last=50) == [20, 40, 50]
    assert validation_steps([0, 20, 40], every=20, last=40) == [20, 40]


def test_the_analysed_checkpoint_is_the_last_or_the_best_on_validation(tmp_path, small_data):
    train_data, test_data = small_data
    trainer = train([Run(seed=0, train=train_data, test=test_data, out=tmp_path)], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens)
    found = checkpoints.list_checkpoints(tmp_path / "checkpoints")
    validation = get("number").samples(300, 11)
    accuracy = {}
    for step, directory in found:
        model, _ = checkpoints.load_model(directory)
        accuracy[step] = float((predict(model, validation.tokens) == validation.labels).mean())
    assert choose_final(tmp_path, found, "last") == {"step": 40, "choice": "last"}
    chosen = choose_final(tmp_path, found, "best_validation", every=20, validation=validation)
    best = max(accuracy[20], accuracy[40])
    assert chosen["step"] == min(s for s in (20, 40) if accuracy[s] == best)  # the earliest of the best
    assert [c["step"] for c in chosen["validation"]] == [20, 40] and chosen["validation"][0]["accuracy"] == accuracy[20]
    # a step 0 checkpoint is never compared (HF Trainer does not evaluate before training)
    assert choose_final(tmp_path, found, "best_validation", every=40, validation=validation)["step"] == 40
    with pytest.raises(ValueError, match="expected one of"):
        choose_final(tmp_path, found, "best_test")

    # the index names it, and the analyses load it
    datasets.save_split(tmp_path / "val", validation, {"split": "val"})
    final = {"choice": "best_validation", "every": 20, "validation": tmp_path / "val.safetensors"}
    write_outputs(tmp_path, trainer.objective.record(0), final)
    index = load_index(tmp_path / "checkpoints.json")
    assert index["final"]["step"] == chosen["step"] and index["final"]["validation"] == chosen["validation"]
    assert load_final_model(tmp_path / "checkpoints.json")[2]["step"] == chosen["step"]


def _train_command(out, steps, precision="fp32"):
    return [
        sys.executable, "-m", "posym.cli", "train", "--task", "number", "--seed", "3", "--out", str(out), "--threads", "1",
        "--set", "data.train_samples=8192", "--set", "data.test_samples=256", "--set", "model.n_layer=2",
        "--set", "model.d_model=32", "--set", f"train.steps={steps}", "--set", "train.checkpoint_every=30",
        "--set", "train.eval_samples=128", "--set", "train.warmup_steps=10", "--set", "train.device=cpu",
        "--set", "train.learning_rate=3e-3", "--set", "train.batch_size=32", "--set", "train.log_every=30",
        "--set", f"train.precision={precision}",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_after_kill_is_bit_identical(tmp_path, precision):
    steps = 240
    reference = tmp_path / "reference"
    subprocess.run(_train_command(reference, steps, precision), check=True, capture_output=True)

    interrupted = tmp_path / "interrupted"
    process = subprocess.Popen(_train_command(interrupted, steps, precision), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (interrupted / "checkpoints" / "step-000090").exists():
        assert process.poll() is None, "training ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (interrupted / "checkpoints.json").exists()

    resumed = subprocess.run(_train_command(interrupted, steps, precision), check=True, capture_output=True, text=True)
    resumed_from = int(resumed.stderr.split("resuming from step ")[1].split()[0])
    assert resumed_from >= 90
    for step in range(0, steps + 1, 30):
        ours = checkpoints.step_dir(interrupted / "checkpoints", step) / "model.safetensors"
        theirs = checkpoints.step_dir(reference / "checkpoints", step) / "model.safetensors"
        assert sha256_file(ours) == sha256_file(theirs), f"step {step} differs"
    assert (interrupted / "metrics.csv").read_bytes() == (reference / "metrics.csv").read_bytes()
    assert (interrupted / "train_log.csv").read_bytes() == (reference / "train_log.csv").read_bytes()


@pytest.mark.parametrize("log_every, caught_by", [(1, "loss nan"), (1000, "non-finite weights")])
def test_a_diverging_run_stops_before_it_writes_a_non_finite_checkpoint(tmp_path, small_data, log_every, caught_by):
    """A learning rate no schema admits sends the weights to infinity within a few steps. Checked at each log line
    (the loss) or, between log lines, when a checkpoint is due (the weights): the job stops naming the seed, the
    step and the newest checkpoint, and every checkpoint on disk stays finite."""
    train_data, test_data = small_data
    config = TrainConfig(**{**TINY_TRAIN.to_dict(), "learning_rate": 1e30, "max_grad_norm": None, "log_every": log_every})
    with pytest.raises(TrainingDiverged, match=rf"seed 3 diverged: {caught_by} at step \d+; its newest checkpoint is step 0 \(") as error:
        train([Run(seed=3, train=train_data, test=test_data, out=tmp_path)], TINY_MODEL, config, get("number").vocabulary.tokens)
    step = int(str(error.value).split(" at step ")[1].split(";")[0])
    assert step == 20 if log_every == 1000 else step < 20  # the first checkpoint after step 0 is at 20
    assert [s for s, _ in checkpoints.list_checkpoints(tmp_path / "checkpoints")] == [0]
    weights = load_tensors(checkpoints.step_dir(tmp_path / "checkpoints", 0) / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert not (tmp_path / "checkpoints.json").exists()


def test_a_checkpoint_of_another_tensor_layout_is_not_resumed(tmp_path, small_data, caplog):
    """A checkpoint whose tensors are named otherwise than the model's (made by an older posym, say) is trained over,
    not loaded: its settings fingerprint alone cannot tell."""
    train_data, test_data = small_data
    run = Run(seed=0, train=train_data, test=test_data, out=tmp_path)
    train([run], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens, outputs=False)
    shutil.copytree(tmp_path / "checkpoints", tmp_path / "saved")
    assert Trainer(SplitObjective([run], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens)).resume() == 0  # finished
    assert len(checkpoints.list_checkpoints(tmp_path / "checkpoints")) == 3  # and kept
    for name, renamed in (("model.safetensors", "lm_head.weight"), ("trainer_state.safetensors", "exp_avg.unembed_weight")):
        for _, directory in checkpoints.list_checkpoints(tmp_path / "checkpoints"):
            if (directory / name).is_file():
                tensors = load_tensors(directory / name)
                tensors[renamed + ".old"] = tensors.pop(renamed)
                save_tensors(directory / name, tensors)
        trainer = Trainer(SplitObjective([run], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens))
        assert trainer.resume() == 0 and trainer.active == [0], name
        assert checkpoints.list_checkpoints(tmp_path / "checkpoints") == []
        assert "cannot resume; starting over" in caplog.text
        caplog.clear()
        shutil.rmtree(tmp_path / "checkpoints")
        shutil.copytree(tmp_path / "saved", tmp_path / "checkpoints")  # as they were, for the next layout


def test_a_checkpoint_saved_on_another_kind_of_device_resumes(tmp_path, small_data, caplog):
    """A GPU saves its dropout generator as CUDA's Philox state (seed and offset, 16 bytes), which a CPU's
    generator (5056 bytes) cannot take: the resume goes on with the generator seeded from (seed, step),
    repeatably, and says so. tests/core/test_gpu.py resumes across devices both ways where there is a GPU."""
    train_data, test_data = small_data
    vocab = get("number").vocabulary.tokens
    run = Run(seed=3, train=train_data, test=test_data, out=tmp_path / "saved")
    trainer = Trainer(SplitObjective([run], TINY_MODEL, TINY_TRAIN, vocab))
    nothing = {0: []}
    trainer._write(0, [0], False, nothing, {0: []}, 0.0)
    for step in range(20):
        trainer.step(step)
    trainer._write(20, [0], False, nothing, {0: []}, 0.0)  # where a killed run would have left its newest state
    newest = checkpoints.step_dir(run.out / "checkpoints", 20)
    state = load_tensors(newest / "trainer_state.safetensors")
    assert state["generator"].numel() == 5056  # what a CPU wrote
    seed_and_offset = np.array([3, 20 * 4], dtype="<u8").view(np.uint8)  # as a CUDA generator's get_state() lays it out
    state["generator"] = torch.from_numpy(seed_and_offset.copy())
    sums = read_json(newest / "checksums.json")
    sums["trainer_state.safetensors"] = save_tensors(newest / "trainer_state.safetensors", state)
    write_json(newest / "checksums.json", sums)

    expected = torch.Generator().manual_seed(3 + (20 << 32)).get_state()
    finals = []
    for name in ("first", "second"):
        shutil.copytree(run.out / "checkpoints", tmp_path / name / "checkpoints")
        member = Run(seed=3, train=train_data, test=test_data, out=tmp_path / name)
        resumed = Trainer(SplitObjective([member], TINY_MODEL, TINY_TRAIN, vocab))
        assert resumed.resume() == 20
        assert torch.equal(resumed.generators[0].get_state(), expected)
        resumed.train()
        finals.append(sha256_file(checkpoints.step_dir(member.out / "checkpoints", 40) / "model.safetensors"))
    assert finals[0] == finals[1]
    assert "saved on another kind of device than cpu" in caplog.text


@pytest.mark.parametrize("change", [{"learning_rate": 1e-3}, {"precision": "bf16"}])
def test_changed_settings_discard_stale_checkpoints(tmp_path, small_data, caplog, change):
    train_data, test_data = small_data
    run = Run(seed=0, train=train_data, test=test_data, out=tmp_path)
    train([run], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens)
    changed = TrainConfig(**{**TINY_TRAIN.to_dict(), **change})
    trainer = Trainer(SplitObjective([run], TINY_MODEL, changed, get("number").vocabulary.tokens))
    assert trainer.resume() == 0
    assert checkpoints.list_checkpoints(tmp_path / "checkpoints") == []
    assert "other settings or data" in caplog.text


def test_corrupt_checkpoints_are_refused_with_the_file_name(tmp_path, small_data):
    train_data, test_data = small_data
    run = Run(seed=0, train=train_data, test=test_data, out=tmp_path)
    train([run], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens)
    newest = checkpoints.step_dir(tmp_path / "checkpoints", 40)

    state = newest / "trainer_state.safetensors"
    state.write_bytes(state.read_bytes()[:-100])  # truncated
    with pytest.raises(IntegrityError, match="trainer_state.safetensors"):
        Trainer(SplitObjective([run], TINY_MODEL, TINY_TRAIN, get("number").vocabulary.tokens)).resume()

    weights = checkpoints.step_dir(tmp_path / "checkpoints", 20) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    weights.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="step-000020/model.safetensors"):
        checkpoints.load_model(weights.parent)
    with pytest.raises(IntegrityError, match="step-000020"):
        load_index(tmp_path / "checkpoints.json")

    (checkpoints.step_dir(tmp_path / "checkpoints", 0) / "checksums.json").unlink()
    with pytest.raises(IntegrityError, match="checksums.json"):
        checkpoints.load_model(checkpoints.step_dir(tmp_path / "checkpoints", 0))


def test_no_pickle_loading_anywhere_in_the_package():
    package = Path(__file__).parents[2] / "workflow" / "posym"
    for path in package.rglob("*.py"):
        text = path.read_text()
        for forbidden in ("torch.load(", "pickle.load", "allow_pickle=True", "np.load("):
            assert forbidden not in text, f"{path.name} uses {forbidden}"


def test_unknown_precision_is_refused_by_name():
    with pytest.raises(ValueError, match="precision='fp16'"):
        train_config(precision="fp16")


@pytest.mark.parametrize("killed_after", ["files removed", "checksums rewritten"])
def test_a_kill_while_an_older_resume_state_is_dropped_leaves_a_resumable_run(tmp_path, small_data, killed_after):
    """Each new checkpoint drops the resume state of the older ones: a kill midway through that drop leaves an older
    checkpoint with part of it done. Either part alone (the state's files gone, checksums still listing them; or,
    as posym before 2026-12-04 could leave it, the checksums rewritten, the files still there) must leave a run that
    resumes from its newest state, not one refused as damaged (CI on 1ca9d67 hit the second)."""
    train_data, test_data = small_data
    vocab = get("number").vocabulary.tokens
    run = Run(seed=0, train=train_data, test=test_data, out=tmp_path)
    trainer = Trainer(SplitObjective([run], TINY_MODEL, TINY_TRAIN, vocab))
    nothing = {0: []}
    trainer._write(0, [0], False, nothing, {0: []}, 0.0)
    for step in range(20):
        trainer.step(step)
    older = checkpoints.step_dir(tmp_path / "checkpoints", 0)
    kept = {name: (older / name).read_bytes() for name in checkpoints.TRAINER_FILES}
    trainer._write(20, [0], False, nothing, {0: []}, 0.0)
    assert not checkpoints.has_trainer_state(older)
    if killed_after == "files removed":
        sums = read_json(older / "checksums.json")
        write_json(older / "checksums.json", {**sums, **{name: "listed, then the job was killed" for name in kept}})
    else:
        for name, content in kept.items():
            (older / name).write_bytes(content)
    resumed = Trainer(SplitObjective([run], TINY_MODEL, TINY_TRAIN, vocab))
    assert resumed.resume() == 20
    resumed.train()
    checkpoints.load_model(older)  # its weights still verify
    assert [s for s, _ in checkpoints.list_checkpoints(tmp_path / "checkpoints")] == [0, 20, 40]
