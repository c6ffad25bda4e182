"""Checkpoint writes: they round-trip, are byte-for-byte deterministic, are hashed as written (a damaged file is
refused on load), and a write that fails for real (a file-size limit standing in for a full disk) stops with one
line and leaves the complete checkpoints as they were."""

import filecmp
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from conftest import model_config
from posym.data.files import IntegrityError, safetensors_chunks, sha256_file
from posym.training import checkpoints

VOCAB = [str(i) for i in range(20)]
SETTINGS = dict(n_layer=2, d_model=32)


def packed_state(device: str = "cpu"):
    """A 2-member model after one AdamW step, and member 1's resume state as the trainer builds it (views of the
    packed moments, the step count, the dropout generator's state)."""
    model = model_config(len(VOCAB), **SETTINGS).build(2).initialise([3, 4]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    optimizer.step()
    names = {id(p): n for n, p in model.named_parameters()}
    tensors = {}
    for param, state in optimizer.state.items():
        tensors[f"exp_avg.{names[id(param)]}"] = state["exp_avg"][1]
        tensors[f"exp_avg_sq.{names[id(param)]}"] = state["exp_avg_sq"][1]
    tensors["optimizer_step"] = next(iter(optimizer.state.values()))["step"].reshape(1).cpu()
    generator = torch.Generator(device=device).manual_seed(4)
    torch.rand(5, generator=generator, device=device)
    tensors["generator"] = generator.get_state()
    return model, (tensors, {"format": 1, "fingerprint": "f", "seed": 4})


def write(root, step, model, state):
    return checkpoints.write_checkpoint(root, step, model, 1, VOCAB, {"step": step, "eval": [], "log": []}, state)


def test_a_checkpoint_round_trips(tmp_path):
    model, state = packed_state()
    directory = write(tmp_path, 10, model, state)
    loaded, vocab = checkpoints.load_model(directory)
    assert vocab == VOCAB
    for name, tensor in model.member(1).state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    tensors, meta = checkpoints.load_trainer_state(directory)
    assert meta == state[1] and tensors.keys() == state[0].keys()
    for name, tensor in state[0].items():
        assert torch.equal(tensors[name], tensor.cpu()), name
    assert checkpoints.load_progress(directory)["step"] == 10
    # Every file is listed with the hash of its bytes on disk.
    listed = json.loads((directory / "checksums.json").read_text())
    assert listed == {p.name: sha256_file(p) for p in directory.iterdir() if p.name != "checksums.json"}


def test_a_flipped_byte_is_refused_on_load(tmp_path):
    model, state = packed_state()
    for name, load in (("model.safetensors", checkpoints.load_model), ("trainer_state.safetensors", checkpoints.load_trainer_state)):
        directory = write(tmp_path / name, 10, model, state)
        path = directory / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(IntegrityError, match=f"step-000010/{name}: sha256 does not match"):
            load(directory)


def test_two_writes_of_one_state_are_identical_files_as_safetensors_writes_them(tmp_path):
    model, state = packed_state()
    first, second = write(tmp_path / "a", 10, model, state), write(tmp_path / "b", 10, model, state)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert all(filecmp.cmp(first / name, second / name, shallow=False) for name in names)
    # The streamed files are the bytes safetensors itself writes for the same tensors.
    assert (first / "model.safetensors").read_bytes() == save(model.checkpoint_tensors(1), metadata={"format": "pt"})
    assert (first / "trainer_state.safetensors").read_bytes() == save({k: v.contiguous() for k, v in state[0].items()})


def test_the_streamed_format_is_safetensors_for_every_dtype_it_stores():
    dtypes = [
        torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.float16, torch.bfloat16, torch.int32,
        torch.uint32, torch.float32, torch.float64, torch.int64, torch.uint64,
    ]  # fmt: skip
    # Names against the dtype order, so that the order safetensors sorts by (dtype, then name) is checked.
    tensors = {f"{len(dtypes) - i:02d}.{dtype}": torch.arange(6).reshape(2, 3).to(dtype) for i, dtype in enumerate(dtypes)}
    tensors["scalar"] = torch.tensor(2.5)
    tensors["empty"] = torch.zeros(0, 4)
    tensors["strided"] = torch.arange(12.0).reshape(3, 4).t()
    for metadata in (None, {"format": "pt"}):
        streamed = b"".join(bytes(chunk) for chunk in safetensors_chunks(tensors, metadata))
        assert streamed == save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata)


FAILING_WRITE = """
import json, resource, signal, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/core"]
from test_checkpoint_writes import packed_state, write
from posym.data.files import IntegrityError
model, state = packed_state()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
try:
    write(sys.argv[2], 20, model, state)
except IntegrityError as err:
    print(json.dumps({"type": type(err).__name__, "message": str(err)}))
"""


def test_a_failed_write_stops_with_one_line_and_keeps_the_complete_checkpoints(tmp_path):
    model, state = packed_state()
    complete = write(tmp_path, 10, model, state)
    before = {p.name: p.read_bytes() for p in complete.iterdir()}
    weights = (complete / "model.safetensors").stat().st_size
    limit = weights // 2  # the weights do not fit; every JSON file does
    assert max(len(data) for name, data in before.items() if name.endswith(".json")) < limit
    result = subprocess.run(
        [sys.executable, "-c", FAILING_WRITE, str(Path(__file__).parents[1]), str(tmp_path), str(limit)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    raised = json.loads(result.stdout)
    assert raised["type"] == "CheckpointWriteError"  # an IntegrityError: the CLI logs it as one line and exits 2
    message = raised["message"]
    assert "\n" not in message
    assert message.startswith(str(checkpoints.step_dir(tmp_path, 20) / "model.safetensors"))
    assert "File too large" in message and "rerun the same command to resume from the last complete checkpoint" in message
    # Nothing of the failed write is left, and the earlier checkpoint is whole.
    assert checkpoints.list_checkpoints(tmp_path) == [(10, complete)]
    assert [p.name for p in tmp_path.iterdir()] == [complete.name]
    assert {p.name: p.read_bytes() for p in complete.iterdir()} == before
    checkpoints.load_trainer_state(complete)


@pytest.mark.gpu
def test_a_checkpoint_of_gpu_tensors_equals_the_cpu_one(tmp_path):
    model, (tensors, meta) = packed_state()
    moments_on_gpu = {k: v.to("cuda") if k.startswith("exp_avg") else v for k, v in tensors.items()}
    on_gpu = write(tmp_path / "gpu", 10, model.to("cuda"), (moments_on_gpu, meta))
    on_cpu = write(tmp_path / "cpu", 10, model.to("cpu"), (tensors, meta))
    assert all(filecmp.cmp(on_cpu / p.name, on_gpu / p.name, shallow=False) for p in on_cpu.iterdir())
