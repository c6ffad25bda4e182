"""Seeds packed into one training job (train.pack_seeds): the same per-seed results, to the bit on a CPU, as one
job per seed; the workflow's packs, the per-seed tables written from a pack record, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import copy_repo, model_config, planned_jobs, snakemake, train_config
from posym.training import checkpoints
from posym.data.files import read_json, sha256_file, write_json
from posym.nn.gptj import PosymModel
from posym.training.packs import pack_members, pack_name, packs_seeds, seed_pack
from posym.studies.a.tasks import get
from posym.training.splits import Run, train, write_outputs
from posym.training.trainer import clip_per_member

VOCAB = get("number").vocabulary
MODEL = model_config(len(VOCAB), n_layer=2, d_model=32)  # the paper's dropout 0.1: each member draws its own masks
SEEDS = (3, 4, 5)


@pytest.fixture(scope="module")
def data():
    return {s: (get("number").samples(2048, 42 + s), get("number").samples(256, 100 + s)) for s in SEEDS}


def _train(runs, precision="fp32", steps=40):
    config = train_config(
        steps=steps, batch_size=32, learning_rate=3e-3, warmup_steps=4, checkpoint_every=20, eval_samples=128,
        device="cpu", log_every=10, precision=precision,
    )  # fmt: skip
    return train(runs, MODEL, config, VOCAB.tokens)


def test_pack_names_and_when_seeds_pack():
    assert pack_name([0]) == "seed0" and pack_name([0, 1, 2]) == "seed0+1+2"
    assert pack_members("seed0+1+2") == [0, 1, 2] and pack_members(pack_name([7])) == [7]
    with pytest.raises(ValueError, match="not a pack name"):
        pack_members("0+1")
    assert packs_seeds({"device": "auto"}) and packs_seeds({"device": "cuda", "pack_seeds": "auto"})
    assert not packs_seeds({"device": "cpu"}) and packs_seeds({"device": "cpu", "pack_seeds": True})
    assert not packs_seeds({"device": "cuda", "pack_seeds": False})
    assert seed_pack({"device": "cpu", "pack_seeds": True}, [0, 1, 2], 1) == "seed0+1+2"
    assert seed_pack({"device": "cpu"}, [0, 1, 2], 1) == "seed1"
    assert seed_pack({"pack_seeds": True}, [0, 1], 5) == "seed5"  # a seed outside the config's trains alone


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_packed_seeds_train_to_the_bit_as_separate_runs(tmp_path, data, precision):
    packed = _train([Run(seed=s, train=data[s][0], test=data[s][1], out=tmp_path / "packed" / str(s)) for s in SEEDS], precision)
    assert packed.members == 3
    for s in SEEDS:
        alone = tmp_path / "alone" / str(s)
        _train([Run(seed=s, train=data[s][0], test=data[s][1], out=alone)], precision)
        together = tmp_path / "packed" / str(s)
        for step in (20, 40):
            files = [checkpoints.step_dir(o / "checkpoints", step) / "model.safetensors" for o in (alone, together)]
            assert sha256_file(files[0]) == sha256_file(files[1]), (s, step)
        for table in ("metrics.csv", "train_log.csv"):
            assert (alone / table).read_bytes() == (together / table).read_bytes(), (s, table)
        one, three = read_json(alone / "checkpoints.json"), read_json(together / "checkpoints.json")
        assert one["fingerprint"] == three["fingerprint"] and one["checkpoints"] == three["checkpoints"]
    # the members are different runs, not copies
    assert sha256_file(tmp_path / "packed/3/checkpoints/step-000040/model.safetensors") != sha256_file(
        tmp_path / "packed/4/checkpoints/step-000040/model.safetensors"
    )


@pytest.mark.usefixtures("one_torch_thread")  # with 2 threads a batch of 2 members splits its matmuls otherwise
def test_clipping_is_torchs_clip_grad_norm_per_member():
    ids = torch.randint(0, len(VOCAB), (2, 8, 17), generator=torch.Generator().manual_seed(0))
    packed = PosymModel(MODEL, members=2).initialise([0, 1])
    packed(ids).pow(2).mul(50).sum().backward()
    norms = clip_per_member(packed, 1.0)
    for m in range(2):
        single = PosymModel(MODEL).initialise([m])
        single(ids[m]).pow(2).mul(50).sum().backward()
        assert torch.nn.utils.clip_grad_norm_(list(single.parameters()), 1.0) == norms[m]
        assert norms[m] > 1.0  # the clipping acted
        for p, q in zip(packed.parameters(), single.parameters()):
            assert torch.equal(p.grad[m], q.grad[0])


def test_precision_auto_is_fp32_on_a_cpu_and_recorded_resolved(tmp_path, data):
    s = SEEDS[0]
    trainer = _train([Run(seed=s, train=data[s][0], test=data[s][1], out=tmp_path)], precision="auto", steps=20)
    assert trainer.objective.config.precision == "fp32"
    assert read_json(tmp_path / "checkpoints.json")["train"]["precision"] == "fp32"  # what `posym evaluate` reads


def test_tables_from_a_pack_record_and_what_they_refuse(tmp_path, data):
    runs = [Run(seed=s, train=data[s][0], test=data[s][1], out=tmp_path / f"seed{s}") for s in SEEDS[:2]]
    config = train_config(steps=20, batch_size=32, warmup_steps=2, checkpoint_every=10, eval_samples=64, device="cpu")
    trainer = train(runs, MODEL, config, VOCAB.tokens, outputs=False)
    assert not (tmp_path / "seed3" / "metrics.csv").exists()  # the tables are the per-seed job's
    record = trainer.objective.pack_record()
    assert record["pack"] == "seed3+4" and [m["seed"] for m in record["members"]] == [3, 4]
    write_outputs(tmp_path / "seed4", record["members"][1])
    index = read_json(tmp_path / "seed4" / "checkpoints.json")
    assert index["seed"] == 4 and [c["step"] for c in index["checkpoints"]] == [0, 10, 20]

    with pytest.raises(RuntimeError, match="other settings or data"):  # seed 3's record over seed 4's checkpoints
        write_outputs(tmp_path / "seed4", record["members"][0])
    unfinished = {**record["members"][0], "train": {**record["members"][0]["train"], "steps": 30}}
    with pytest.raises(RuntimeError, match="not complete"):
        write_outputs(tmp_path / "seed3", unfinished)


# ------------------------------------------------------------------ the workflow


PACKED = {"a": {"tasks": ["number"], "seeds": [0, 1], "train": {"device": "cpu", "pack_seeds": True}}}


def _config(workdir: Path, name: str, values: dict) -> Path:
    path = workdir / f"{name}.yaml"
    write_json(path, values)  # YAML reads JSON
    return path


@pytest.mark.slow
def test_a_packed_workflow_writes_what_one_job_per_seed_writes(tmp_path):
    """One training job for two seeds (pack seed0+1) against two jobs: the same per-seed files downstream.

    On one core: a packed job runs threads x seeds threads (at most --cores), and a CPU's float reductions split
    by thread count, so at other core counts the weights agree to rounding (~1e-7), not to the bit."""
    targets = [f"results/a/eval/main/number/seed{s}/test.csv" for s in (0, 1)]
    outputs = {}
    for name, pack in (("separate", False), ("packed", True)):
        workdir = copy_repo(tmp_path / name)
        values = {"a": {**PACKED["a"], "train": {**PACKED["a"]["train"], "pack_seeds": pack}}}
        configfiles = (workdir / "tests/configs/tiny.yaml", _config(workdir, name, values))
        jobs = planned_jobs(snakemake(workdir, "-n", *targets, configfiles=configfiles))
        assert jobs["train"] == (1 if pack else 2) and jobs["train_outputs"] == 2 and jobs["evaluate_test"] == 2
        snakemake(workdir, *targets, configfiles=configfiles, cores=1)
        outputs[name] = workdir
    packed, separate = outputs["packed"], outputs["separate"]
    assert (packed / "results/a/train/main/number/packs/seed0+1.json").is_file()
    assert sorted(p.name for p in (separate / "results/a/train/main/number/packs").iterdir()) == ["seed0.json", "seed1.json"]
    for s in (0, 1):
        run = f"results/a/train/main/number/seed{s}"
        for name in ("metrics.csv", "train_log.csv", "checkpoints/step-000060/model.safetensors"):
            assert (packed / run / name).read_bytes() == (separate / run / name).read_bytes(), (s, name)
        assert (packed / f"results/a/eval/main/number/seed{s}/test.csv").read_bytes() == (
            separate / f"results/a/eval/main/number/seed{s}/test.csv"
        ).read_bytes()
        index = json.loads((packed / run / "checkpoints.json").read_text())
        assert index["train"]["pack_seeds"] is True and index["seed"] == s
        # each seed's log holds the training job's log, then its own job's lines
        log = (packed / f"logs/a/train/main/number/seed{s}.log").read_text()
        assert "step 60 checkpoint written" in log and f"seed {s} of seed0+1: tables written" in log
    assert (packed / "results/a/benchmarks/train/main/number-seed0+1.tsv").is_file()
