"""Papers A and B's objective: every task x seed trained on its stored split (paper A's recipe: spec §A3).

The objective is cross-entropy on the label predicted at the last input position, with HF ``Trainer``'s
defaults that the authors inherited: AdamW (``adamw_torch``) with weight decay on every weight but biases and
LayerNorm, a linear schedule with warmup whose first update has learning rate 0 (paper B's code: a cosine decay),
and gradient clipping at norm 1.0. The loop is :class:`posym.training.trainer.Trainer`'s; this module gives it the
batches (an epoch order that is a function of (seed, epoch) alone, so resuming needs no data state), the loss and
the evaluation of the first ``eval_samples`` test samples at every checkpoint.

Seeds of one task train packed in one job where ``pack_seeds`` says so (:mod:`posym.training.packs`): the job
writes each member's checkpoints into the member's own folder and a *pack record*; each member's
tables (checkpoints.json, metrics.csv, train_log.csv) are then written from its checkpoints by
:func:`write_outputs`, the same tables a job of one seed writes. They also name the checkpoint the analyses
read (:func:`choose_final`): the last one, or the best on the validation split as HF ``Trainer``'s
``load_best_model_at_end`` picks it.

The training split and the evaluation subset live on the device, a step does no host synchronisation (losses
are read back once per logging window), and checkpoint evaluation reads its predictions back once.

``precision="bf16"`` trains under bfloat16 autocast over float32 master weights: the counterpart
of the authors' fp16 mixed precision (HF ``Trainer`` with ``fp16`` on CUDA) that needs no loss
scaling and that CPUs with AMX run several times faster than float32 matmuls. A model is
evaluated at the precision it was trained at (the test subset at each checkpoint here, the
length extrapolation in ``posym evaluate``), as HF ``Trainer`` evaluates. ``precision="auto"``
is bf16 on CUDA and fp32 on a CPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from posym.data import datasets, tasks
from posym.data.files import write_csv, write_json
from posym.data.tasks import TaskData
from posym.nn.precision import autocast, autocast_dtype
from posym.training import checkpoints as ckpt
from posym.training.evaluate import accuracy, predict
from posym.training.compiled import COMPILE
from posym.training.packs import PACK_SEEDS, pack_name
from posym.training.trainer import Trainer

log = logging.getLogger("posym.training")


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation settings. Their defaults live in the study's config schema (``train`` section)."""

    steps: int
    batch_size: int
    learning_rate: float
    betas: tuple[float, float]
    weight_decay: float
    warmup_steps: int
    max_grad_norm: float | None  # None: no clipping
    checkpoint_every: int
    eval_samples: int | None  # first N test samples scored at each checkpoint; None = all
    device: str  # "cpu", "cuda" or "auto"
    precision: str  # "auto" or a key of model.PRECISIONS; weights, optimizer and checkpoints stay float32
    log_every: int
    #: "linear" (HF Trainer's linear decay after warmup, paper A) or "cosine" (half a cosine after warmup, paper B).
    #: Paper A's config section predates the setting and leaves it out: linear.
    schedule: str = "linear"
    #: Where the workflow trains the seeds of a task as one packed job (:mod:`posym.training.packs`); the trainer itself
    #: trains whatever runs it is given.
    pack_seeds: bool | str = "auto"
    #: torch.use_deterministic_algorithms on a GPU (with CUBLAS_WORKSPACE_CONFIG set): run-to-run identical
    #: on one GPU model and software stack, at some speed. A CPU run is deterministic either way.
    deterministic: bool = False
    #: Whether a step is compiled (:mod:`posym.training.compiled`): true, false, or "auto" (runs long enough to pay).
    compile: bool | str = "auto"

    def __post_init__(self):
        if self.precision != "auto":
            autocast_dtype(self.precision)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: expected one of {sorted(SCHEDULES)}")
        if self.pack_seeds not in PACK_SEEDS:
            raise ValueError(f"pack_seeds={self.pack_seeds!r}: expected one of {PACK_SEEDS}")
        if self.compile not in COMPILE:
            raise ValueError(f"compile={self.compile!r}: expected one of {COMPILE}")

    @classmethod
    def from_dict(cls, values: Mapping) -> "TrainConfig":
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown training settings: {sorted(unknown)}")
        values = dict(values)
        if "betas" in values:
            values["betas"] = tuple(values["betas"])
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Run:
    """One member: its seed, its data and the directory it owns."""

    seed: int
    train: TaskData
    test: TaskData
    out: Path
    meta: dict = field(default_factory=dict)  # recorded in the outputs (e.g. task, data hashes)


#: Settings of how to compute, not what: they leave a run's fingerprint (and so its checkpoints) alone.
HOW_SETTINGS = ("device", "log_every", "pack_seeds", "deterministic", "compile")


#: After the linear warmup from 0: HF's linear decay to 0 (paper A) or half a cosine period to 0 (paper B's code).
SCHEDULES = ("linear", "cosine")


def learning_rate(step: int, config: TrainConfig) -> float:
    """The learning rate at optimizer step ``step`` (0-based): linear warmup from 0, then the schedule."""
    if step < config.warmup_steps:
        return config.learning_rate * step / max(1, config.warmup_steps)
    post_warmup = max(1, config.steps - config.warmup_steps)
    if config.schedule == "linear":  # HF's get_linear_schedule_with_warmup, to the bit
        return config.learning_rate * max(0.0, (config.steps - step) / post_warmup)
    done = min(1.0, (step - config.warmup_steps) / post_warmup)
    return config.learning_rate * 0.5 * (1.0 + math.cos(math.pi * done))


def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The sample order of one epoch: a function of (seed, epoch) alone, so resuming needs no state."""
    entropy = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    generator = torch.Generator().manual_seed(int(entropy[0]) << 32 | int(entropy[1]))
    return torch.randperm(n, generator=generator)


class _Batches:
    """Minibatches of one member: step k reads positions [k*B, (k+1)*B) of its epoch's order."""

    def __init__(self, run: Run, batch_size: int, device: torch.device):
        self.seed, self.batch_size = run.seed, batch_size
        # The whole split on the device (paper A's 432,000 x 17 ids are 59 MB): a step copies nothing from the host.
        self.tokens = torch.as_tensor(np.asarray(run.train.tokens), dtype=torch.long).to(device)
        self.labels = torch.as_tensor(np.asarray(run.train.labels), dtype=torch.long).to(device)
        self.per_epoch = len(self.labels) // batch_size
        if self.per_epoch == 0:
            raise ValueError(f"training split of {len(self.labels)} samples is smaller than one batch ({batch_size})")
        self._epoch, self._order = -1, None

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, within = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, epoch_order(self.seed, epoch, len(self.labels)).to(self.tokens.device)
        index = self._order[within * self.batch_size : (within + 1) * self.batch_size]
        return self.tokens[index], self.labels[index]


def fingerprint(run: Run, model_config, config: TrainConfig) -> str:
    """What a checkpoint must match to be resumed: settings, seed and data bytes."""
    relevant = {k: v for k, v in config.to_dict().items() if k not in HOW_SETTINGS}
    digest = hashlib.sha256()
    digest.update(json.dumps({"model": model_config.to_dict(), "train": relevant, "seed": run.seed}, sort_keys=True).encode())
    for array in (run.train.tokens, run.train.labels, run.test.tokens, run.test.labels):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class SplitObjective:
    """Each run of ``runs`` is a member; its batches come from its training split, its evaluation is the accuracy of
    the first ``eval_samples`` test samples at each checkpoint. Every member trains ``config.steps`` steps."""

    def __init__(self, runs: Sequence[Run], model_config, config: TrainConfig, vocab: Sequence[str]):
        if not runs:
            raise ValueError("no runs to train")
        self.runs, self.model_config, self.config, self.vocab = list(runs), model_config, config, list(vocab)
        self.seeds = [r.seed for r in self.runs]
        self.outs = [Path(r.out) for r in self.runs]
        self.steps, self.eval_every = config.steps, config.checkpoint_every
        # A label the task ignores (paper B's count 0) counts neither in the loss nor in the accuracy.
        ignored = {tasks.get(r.train.task).ignored_label for r in self.runs}
        if len(ignored) > 1:
            raise ValueError("packed runs must ignore the same label")
        (self.ignored_label,) = ignored

    @property
    def settings(self) -> dict:
        return self.config.to_dict()

    def prepare(self, device: torch.device, precision: str) -> None:
        self.device, self.config = device, replace(self.config, precision=precision)
        self.batches = [_Batches(r, self.config.batch_size, device) for r in self.runs]
        self.eval_sets = [r.test.select(slice(0, self.config.eval_samples)) for r in self.runs]
        self.eval_tokens = torch.as_tensor(np.stack([e.tokens for e in self.eval_sets]), dtype=torch.long).to(device)

    def fingerprint(self, m: int) -> str:
        return fingerprint(self.runs[m], self.model_config, self.config)

    def batch(self, step: int, members: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        pairs = [self.batches[m](step) for m in members]
        return torch.stack([p[0] for p in pairs]).to(self.device), torch.stack([p[1] for p in pairs]).to(self.device)

    def loss(self, model, batch, dropout) -> tuple[torch.Tensor, torch.Tensor]:
        ids, labels = batch
        with autocast(self.device, self.config.precision):
            losses = self.losses(model(ids, dropout=dropout), labels)
        return losses, losses

    def losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each member's mean cross-entropy over its batch (S, B, V) against (S, B), ignored labels left out."""
        members = labels.shape[0]
        if self.ignored_label is None:
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(members, -1).mean(1)
        each = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=self.ignored_label, reduction="none")
        counted = (labels != self.ignored_label).sum(1).clamp(min=1)
        return each.view(members, -1).sum(1) / counted

    def learning_rate(self, step: int) -> float:
        return learning_rate(step, self.config)

    def evaluate(self, model, step: int, members: Sequence[int]) -> list[list[dict]]:
        predictions = predict(model, self.eval_tokens[list(members)], self.device, self.config.precision)  # (members, N)
        rows = [accuracy(predictions[i], self.eval_sets[m]) for i, m in enumerate(members)]
        log.info("step %d: test accuracy %s", step, ", ".join(f"{r[-1]['accuracy']:.3f}" for r in rows))
        return rows

    def stop_step(self, m: int, history: Sequence[dict]) -> int:
        return self.steps

    def progress(self, m: int, step: int, final: bool, history: Sequence[dict]) -> dict:
        return {}

    def record(self, m: int) -> dict:
        """What member ``m``'s tables say of its training beside its checkpoints (:func:`write_outputs`)."""
        run = self.runs[m]
        return {
            "seed": run.seed,
            "out": str(run.out),
            "fingerprint": self.fingerprint(m),
            "model": self.model_config.to_dict(),
            "train": self.config.to_dict(),
            "device": str(self.device),
            "meta": run.meta,
        }

    def pack_record(self) -> dict:
        """The record of a training job: its seeds and each member's :meth:`record`."""
        return {"pack": pack_name(self.seeds), "members": [self.record(m) for m in range(len(self.runs))]}


#: How the checkpoint a run's analyses read is chosen: its last one, or the best on the validation split.
FINAL_CHOICES = ("last", "best_validation")


def validation_steps(steps: Sequence[int], every: int, last: int) -> list[int]:
    """The checkpoints HF ``Trainer`` evaluates with ``eval_steps = every``: each multiple of ``every`` after step 0,
    and the last step (which it evaluates at the end of training when it is not a multiple)."""
    return [s for s in steps if (s > 0 and s % every == 0) or s == last]


def choose_final(
    out: Path, found: Sequence[tuple[int, Path]], choice: str, every: int | None = None,
    validation: TaskData | None = None, precision: str = "fp32",
) -> dict:
    """The checkpoint a run's analyses read, and why: ``{"step", "choice"}``, and for ``best_validation`` the
    validation accuracy of each compared checkpoint.

    ``best_validation`` is HF ``Trainer``'s ``load_best_model_at_end`` with ``metric_for_best_model`` the
    validation accuracy (the authors' setting, spec §A3): of the checkpoints :func:`validation_steps` names, the
    one of highest accuracy, the earliest of equals (Trainer takes a new best only when it is strictly greater).
    """
    if choice not in FINAL_CHOICES:
        raise ValueError(f"final checkpoint choice {choice!r}: expected one of {FINAL_CHOICES}")
    last = found[-1][0]
    if choice == "last":
        return {"step": last, "choice": choice}
    if validation is None or every is None:
        raise ValueError("choice best_validation needs the validation split and the steps between evaluations")
    compared = []
    for step, directory in found:
        if step in validation_steps([step], every, last):
            model, _ = ckpt.load_model(directory)
            overall = accuracy(predict(model, validation.tokens, precision=precision), validation)[-1]["accuracy"]
            compared.append({"step": step, "accuracy": float(overall)})
    best = max(compared, key=lambda c: c["accuracy"])  # max keeps the first of equal values
    log.info("%s: best validation accuracy %.4f at step %d of %d compared", out, best["accuracy"], best["step"], len(compared))
    return {"step": best["step"], "choice": choice, "validation_every": every, "validation": compared}


def write_outputs(out: Path, record: Mapping, final: Mapping | None = None, tables: Path | None = None) -> None:
    """The tables of one run, from its checkpoints under ``out``: checkpoints.json (the index, with every
    checkpoint verified, and under ``final`` the checkpoint its analyses read: :func:`choose_final` with the
    settings ``final`` gives, by default the last), metrics.csv and train_log.csv, in ``tables`` (default ``out``;
    the index names the checkpoints relative to it, so one training can have tables for several choices).
    ``record`` is :meth:`SplitObjective.record` of the run.

    The newest checkpoint must be the run's last step and carry the record's fingerprint, so tables are never
    written from a half-trained run or from the checkpoints of other settings.
    """
    out = Path(out)
    tables = Path(tables) if tables is not None else out
    found = ckpt.list_checkpoints(out / "checkpoints")
    steps = record["train"]["steps"]
    if not found or found[-1][0] != steps:
        raise RuntimeError(f"{out}: training is not complete (newest checkpoint {found[-1][0] if found else None}, steps {steps})")
    if ckpt.load_trainer_meta(found[-1][1]).get("fingerprint") != record["fingerprint"]:
        raise RuntimeError(f"{out}: the checkpoints were made with other settings or data than the pack record says")
    final = dict(final or {"choice": "last"})
    if final.get("validation") is not None:
        final["validation"] = datasets.load_split(final["validation"])
    chosen = choose_final(out, found, precision=record["train"].get("precision", "fp32"), **final)
    metrics, log_rows, index, wall = [], [], [], 0.0
    for step, directory in found:
        progress = ckpt.load_progress(directory)
        metrics += [{"step": step, **row} for row in progress["eval"]]
        log_rows += progress["log"]
        wall += progress["wall_seconds"]
        checksums = ckpt.verify(directory)
        index.append({"step": step, "path": os.path.relpath(directory, tables), "sha256": checksums["model.safetensors"]})
    write_csv(tables / "metrics.csv", pd.DataFrame(metrics))
    write_csv(tables / "train_log.csv", pd.DataFrame(log_rows, columns=["step", "loss", "lr"]))
    write_json(
        tables / "checkpoints.json",
        {
            "seed": record["seed"],
            "fingerprint": record["fingerprint"],
            "model": record["model"],
            "train": record["train"],
            "train_seconds": wall,
            "device": record["device"],
            "checkpoints": index,
            "final": chosen,
            **record["meta"],
        },
    )


def train(runs: Sequence[Run], model_config, config: TrainConfig, vocab: Sequence[str], outputs: bool = True) -> Trainer:
    """Train ``runs`` packed into one model; then write each run's tables (:func:`write_outputs`) unless ``outputs``
    is false (the workflow writes them in a job of their own, from the pack record)."""
    trainer = Trainer(SplitObjective(runs, model_config, config, vocab))
    trainer.train()
    if outputs:
        for m, run in enumerate(trainer.objective.runs):
            write_outputs(run.out, trainer.objective.record(m))
    return trainer
