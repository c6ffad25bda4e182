"""Resumable, deterministic training of every task x seed (paper A's recipe: spec §A3).

The objective is cross-entropy on the label predicted at the last input position, with HF
``Trainer``'s defaults that the authors inherited: AdamW (``adamw_torch``) with weight decay on
every weight but biases and LayerNorm, a linear schedule with warmup whose first update has
learning rate 0, and gradient clipping at norm 1.0.

Several runs (members) can train packed into one model; each keeps its own data, data order,
initialisation, dropout generator, gradient clipping and optimizer moments, so packing only
changes how the arithmetic is batched.

Every ``checkpoint_every`` steps each member writes a checkpoint (``checkpoints.py``). The
newest one carries the optimizer and generator state, and the data order is a pure function of
(seed, step), so a killed run resumes from its last checkpoint and, on CPU, ends bit-identical
to an uninterrupted one.

Seeds of one task train packed in one job where ``pack_seeds`` says so (:mod:`posym.training.packs`): the job
writes each member's checkpoints into the member's own folder and a *pack record*; each member's
tables (checkpoints.json, metrics.csv, train_log.csv) are then written from its checkpoints by
:func:`write_outputs`, the same tables a job of one seed writes. They also name the checkpoint the analyses
read (:func:`choose_final`): the last one, or the best on the validation split as HF ``Trainer``'s
``load_best_model_at_end`` picks it.

The loop is written for a GPU as much as for a CPU: the training split and the evaluation subset
live on the device, a step does no host synchronisation (losses are read back once per logging
window), and checkpoint evaluation reads its predictions back once.

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
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from posym.training import checkpoints as ckpt
from posym.data import datasets
from posym.training.evaluate import accuracy, predict
from posym.data.files import load_tensors, write_csv, write_json
from posym.data import tasks
from posym.nn.packing import MemberDropout
from posym.nn.precision import autocast, autocast_dtype, resolve_device, resolve_precision
from posym.training.packs import PACK_SEEDS, pack_name
from posym.data.tasks import TaskData

log = logging.getLogger("posym.training")

STATE_FORMAT = 1


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

    def __post_init__(self):
        if self.precision != "auto":
            autocast_dtype(self.precision)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: expected one of {sorted(SCHEDULES)}")
        if self.pack_seeds not in PACK_SEEDS:
            raise ValueError(f"pack_seeds={self.pack_seeds!r}: expected one of {PACK_SEEDS}")

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
HOW_SETTINGS = ("device", "log_every", "pack_seeds", "deterministic")


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


def clip_per_member(model, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (HF Trainer's clipping) applied to each member separately; returns the
    members' norms. Each member's norm is reduced over its own slices, as for a model of one member, so packing
    leaves the arithmetic of a member unchanged."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    members = grads[0].shape[0]
    norms = torch.stack([torch.nn.utils.get_total_norm([g[m] for g in grads]) for m in range(members)])
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return norms


class Trainer:
    """Trains ``runs`` packed into one model of ``model_config`` (any architecture of :mod:`posym.nn.architectures`)."""

    def __init__(self, runs: Sequence[Run], model_config, config: TrainConfig, vocab: Sequence[str]):
        if not runs:
            raise ValueError("no runs to train")
        self.device = resolve_device(config.device)
        if config.deterministic and self.device.type == "cuda":
            # cuBLAS reads this when its first handle is made, so before the model reaches the GPU.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        config = replace(config, precision=resolve_precision(config.precision, self.device))
        self.runs, self.model_config, self.config, self.vocab = list(runs), model_config, config, list(vocab)
        self.members = len(self.runs)
        self.fingerprints = [fingerprint(r, model_config, config) for r in self.runs]
        self.model = model_config.build(self.members).initialise([r.seed for r in self.runs]).to(self.device)
        params = dict(self.model.named_parameters())
        groups = [
            {"params": [p for n, p in params.items() if self.model.decays(n)], "weight_decay": config.weight_decay},
            {"params": [p for n, p in params.items() if not self.model.decays(n)], "weight_decay": 0.0},
        ]
        groups = [g for g in groups if g["params"]]
        self.param_names = {id(p): n for n, p in params.items()}
        # On a CPU the fused kernel rounds a tensor's last elements differently from the rest, so a member's update
        # would depend on where in the packed tensor its slice starts; the foreach kernel does not (packed runs
        # equal separate ones to the bit). On a GPU the fused kernel is the fast one.
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(groups, lr=config.learning_rate, betas=config.betas, eps=1e-8, fused=fused, foreach=not fused)
        self.generators = [torch.Generator(device=self.device).manual_seed(r.seed) for r in self.runs]
        self.dropout = MemberDropout(self.generators)
        self.batches = [_Batches(r, config.batch_size, self.device) for r in self.runs]
        self.eval_sets = [r.test.select(slice(0, config.eval_samples)) for r in self.runs]
        self.eval_tokens = torch.as_tensor(np.stack([e.tokens for e in self.eval_sets]), dtype=torch.long).to(self.device)
        # A label the task ignores (paper B's count 0) counts neither in the loss nor in the accuracy.
        ignored = {tasks.get(r.train.task).ignored_label for r in self.runs}
        if len(ignored) > 1:
            raise ValueError("packed runs must ignore the same label")
        (self.ignored_label,) = ignored

    # ------------------------------------------------------------------ resume
    def _checkpoint_root(self, m: int) -> Path:
        return Path(self.runs[m].out) / "checkpoints"

    def resume_step(self) -> int:
        """Restore the newest checkpoint all members share; 0 when starting fresh."""
        latest = []
        for m in range(self.members):
            root = self._checkpoint_root(m)
            with_state = [(s, d) for s, d in ckpt.list_checkpoints(root) if ckpt.has_trainer_state(d)]
            if not with_state:
                if ckpt.list_checkpoints(root):
                    log.warning("%s: checkpoints without resume state; starting over", root)
                    ckpt.remove_all(root)
                latest.append(None)
                continue
            step, directory = with_state[-1]
            _, meta = ckpt.load_trainer_state(directory)
            if meta.get("fingerprint") != self.fingerprints[m] or meta.get("format") != STATE_FORMAT:
                n = ckpt.remove_all(root)
                log.warning("%s: %d checkpoints were made with other settings or data; starting over", root, n)
                latest.append(None)
                continue
            latest.append([s for s, _ in with_state])
        if any(steps is None for steps in latest):
            for m in range(self.members):
                ckpt.remove_all(self._checkpoint_root(m))
            return 0
        common = set.intersection(*(set(steps) for steps in latest))
        if not common:
            raise RuntimeError("packed members have no checkpoint step in common; delete their checkpoints to start over")
        step = max(common)
        self._load_state(step)
        log.info("resuming from step %d", step)
        return step

    def _state_tensors(self, m: int) -> tuple[dict[str, torch.Tensor], dict]:
        tensors: dict[str, torch.Tensor] = {}
        for p, state in self.optimizer.state.items():
            name = self.param_names[id(p)]
            tensors[f"exp_avg.{name}"] = state["exp_avg"][m]
            tensors[f"exp_avg_sq.{name}"] = state["exp_avg_sq"][m]
            tensors["optimizer_step"] = state["step"].reshape(1).cpu()
        tensors["generator"] = self.generators[m].get_state()
        meta = {"format": STATE_FORMAT, "fingerprint": self.fingerprints[m], "seed": self.runs[m].seed}
        return tensors, meta

    def _load_state(self, step: int) -> None:
        states = [ckpt.load_trainer_state(ckpt.step_dir(self._checkpoint_root(m), step))[0] for m in range(self.members)]
        weights = [load_tensors(ckpt.step_dir(self._checkpoint_root(m), step) / "model.safetensors") for m in range(self.members)]
        for m in range(self.members):
            self.model.load_checkpoint_tensors(weights[m], m)
            self.generators[m].set_state(states[m]["generator"])
        if step == 0 or "optimizer_step" not in states[0]:
            return
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                name = self.param_names[id(p)]
                self.optimizer.state[p] = {
                    # The fused kernel keeps its step count on the parameters' device, the foreach one on the CPU.
                    "step": states[0]["optimizer_step"].reshape(()).clone().to(p.device if group["fused"] else "cpu"),
                    "exp_avg": torch.stack([s[f"exp_avg.{name}"] for s in states]).to(self.device),
                    "exp_avg_sq": torch.stack([s[f"exp_avg_sq.{name}"] for s in states]).to(self.device),
                }

    # ------------------------------------------------------------------ checkpoints
    def _evaluate(self) -> list[list[dict]]:
        self.model.eval()
        predictions = predict(self.model, self.eval_tokens, self.device, self.config.precision)  # (members, N)
        self.model.train()
        return [accuracy(predictions[m], e) for m, e in enumerate(self.eval_sets)]

    def _checkpoint(self, step: int, logs: list[list[dict]], wall: float) -> None:
        evaluations = self._evaluate()
        for m, run in enumerate(self.runs):
            progress = {"step": step, "eval": evaluations[m], "log": logs[m], "wall_seconds": wall}
            ckpt.write_checkpoint(self._checkpoint_root(m), step, self.model, m, self.vocab, progress, self._state_tensors(m))
        # Only now, with every member's new state on disk, drop the older states.
        for m in range(self.members):
            for s, d in ckpt.list_checkpoints(self._checkpoint_root(m)):
                if s < step and ckpt.has_trainer_state(d):
                    ckpt.drop_trainer_state(d)
        overall = ", ".join(f"{e[-1]['accuracy']:.3f}" for e in evaluations)
        log.info("step %d checkpoint written; test accuracy %s", step, overall)

    # ------------------------------------------------------------------ loop
    def step(self, step: int) -> torch.Tensor:
        """One optimizer step at 0-based ``step``; returns each member's loss."""
        pairs = [b(step) for b in self.batches]
        ids = torch.stack([p[0] for p in pairs]).to(self.device)
        labels = torch.stack([p[1] for p in pairs]).to(self.device)
        lr = learning_rate(step, self.config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with autocast(self.device, self.config.precision):
            logits = self.model(ids, dropout=self.dropout)
            losses = self.losses(logits, labels)
        losses.sum().backward()
        if self.config.max_grad_norm is not None:
            clip_per_member(self.model, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses.detach()

    def losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each member's mean cross-entropy over its batch (S, B, V) against (S, B), ignored labels left out."""
        if self.ignored_label is None:
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(self.members, -1).mean(1)
        each = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=self.ignored_label, reduction="none")
        counted = (labels != self.ignored_label).sum(1).clamp(min=1)
        return each.view(self.members, -1).sum(1) / counted

    def train(self, outputs: bool = True) -> None:
        """Train to ``steps`` (resuming where the checkpoints allow); then write each member's tables unless
        ``outputs`` is false (the workflow writes them in a job of their own, from the pack record)."""
        c = self.config
        # Where the job runs, for the log: on a cluster, SLURM sets the GPUs a job may use.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")
        log.info("device %s, CUDA_VISIBLE_DEVICES=%s", self.device, visible)
        start = self.resume_step()
        if start == 0:
            self._checkpoint(0, [[] for _ in self.runs], 0.0)
        self.model.train()
        logs: list[list[dict]] = [[] for _ in self.runs]
        segment_start = window_start = time.perf_counter()
        window_steps = 0
        for step in range(start, c.steps):
            losses = self.step(step)
            done = step + 1
            window_steps += 1
            if done % c.log_every == 0 or done == c.steps:
                now = time.perf_counter()
                rate = window_steps * c.batch_size * self.members / (now - window_start)
                eta = (c.steps - done) * c.batch_size * self.members / rate
                values, lr = losses.cpu().tolist(), learning_rate(step, c)
                for m, value in enumerate(values):
                    logs[m].append({"step": done, "loss": value, "lr": lr})
                log.info(
                    "step %d/%d loss %s lr %.3g  %.0f samples/s  ETA %s",
                    done, c.steps, " ".join(f"{v:.4f}" for v in values), lr, rate, _clock(eta),
                )
                window_start, window_steps = now, 0
            if done % c.checkpoint_every == 0 or done == c.steps:
                self._checkpoint(done, logs, time.perf_counter() - segment_start)
                logs = [[] for _ in self.runs]
                segment_start = time.perf_counter()
        if outputs:
            for m, run in enumerate(self.runs):
                write_outputs(run.out, self.record(m))

    def record(self, m: int) -> dict:
        """What member ``m``'s tables say of its training beside its checkpoints (:func:`write_outputs`)."""
        run = self.runs[m]
        return {
            "seed": run.seed,
            "out": str(run.out),
            "fingerprint": self.fingerprints[m],
            "model": self.model_config.to_dict(),
            "train": self.config.to_dict(),
            "device": str(self.device),
            "meta": run.meta,
        }

    def pack_record(self) -> dict:
        """The record of a training job: its seeds and each member's :meth:`record`."""
        return {"pack": pack_name([r.seed for r in self.runs]), "members": [self.record(m) for m in range(self.members)]}


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
    ``record`` is :meth:`Trainer.record` of the run.

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


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def train(runs: Sequence[Run], model_config, config: TrainConfig, vocab: Sequence[str]) -> Trainer:
    trainer = Trainer(runs, model_config, config, vocab)
    trainer.train()
    return trainer
