"""posym's one training loop: members packed into one model, AdamW, per-member clipping, resumable checkpoints.

What is trained is an *objective* (:class:`Objective`): its members (one seed and one output folder each), their
batches, loss, learning rate and evaluation, and when each member stops. Papers A and B train on a stored split
(:class:`posym.training.splits.SplitObjective`); paper C on a random-map stream with a QK penalty and a stop after
the circuit forms (``posym.studies.c.training``). The loop is the same for all:

* **Packed members.** Several runs train packed into one model; each keeps its own data, initialisation, dropout
  generator, gradient clipping and optimizer moments, so packing only changes how the arithmetic is batched. A
  member that stops leaves the pack and the others train on with their weights and moments.
* **AdamW** (``torch.optim.AdamW``, eps 1e-8) with weight decay on the parameters the model's ``decays(name)``
  names. On a CPU the foreach kernel: the fused one rounds a tensor's last elements differently from the rest, so
  a member's update would depend on where its slice starts in the packed tensor. On a GPU the fused kernel.
* **Checkpoints** (:mod:`posym.training.checkpoints`) every ``checkpoint_every`` steps and at each member's stop.
  The newest carries the optimizer moments and the dropout generator's state; the data are a pure function of
  (seed, step), so a killed run resumes from its newest checkpoint and, on a CPU, ends bit-identical to an
  uninterrupted one. A checkpoint made with other settings or data (its *fingerprint*) is never resumed. An
  objective whose fingerprint leaves out how far a member trains (paper C's) lets a longer run go on from a
  shorter one's last checkpoint; a checkpoint past the member's stop is a longer run's and is not resumed.
* **Evaluation** every ``eval_every`` steps (the objective's), its rows stored in the next checkpoint's
  progress.json with the logged losses and the wall time.
* **Divergence stops the job** (:class:`TrainingDiverged`): a member's non-finite loss at a log line, or
  non-finite weights when a checkpoint is due, stop training before anything non-finite is written, naming the
  member, the step and its newest checkpoint (finite, by this check). The losses are read on the host at the log
  lines anyway, and a checkpoint copies the weights there, so the check adds no synchronisation to a step.
* **Compiled or eager steps** (``train.compile``): a run of at least 1,000 steps trains with the compiled step of
  :mod:`posym.training.compiled` (forward, backward and AdamW as ``torch.compile`` graphs; CUDA graphs on a GPU),
  a shorter one eagerly; where compiling fails the loop goes on eagerly, from the same state. The eager step is
  bit-reproducible on a CPU, and packing leaves a member's arithmetic unchanged there (the tests that check so
  use it); a compiled step follows it within float tolerance.

The objective's settings are its study's ``train`` block (``workflow/schemas/train.schema.yaml``): the loop reads
``learning_rate``, ``betas``, ``weight_decay``, ``max_grad_norm``, ``checkpoint_every``, ``log_every``, ``device``,
``precision``, ``deterministic`` and ``compile``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import torch

from posym.data.files import load_tensors, tensor_names
from posym.nn.packing import MemberDropout
from posym.nn.precision import resolve_device, resolve_precision
from posym.training import checkpoints as ckpt
from posym.training import compiled
from posym.training.host_memory import keep_freed_memory

log = logging.getLogger("posym.training")

STATE_FORMAT = 1


class TrainingDiverged(RuntimeError):
    """A member's loss or weights became non-finite: its settings do not train it. Nothing non-finite was written."""


class Objective(Protocol):
    """What the trainer trains. Members are numbered 0 … len(seeds) − 1 in the order of ``seeds``."""

    settings: Mapping[str, Any]  # the study's train block
    model_config: Any  # build(members) -> a model of posym.nn.architectures' interface
    vocab: Sequence[str]
    seeds: Sequence[int]
    outs: Sequence[Path]  # each member's folder: its checkpoints go to <out>/checkpoints
    steps: int  # the last step any member may train
    eval_every: int

    def prepare(self, device: torch.device, precision: str) -> None:
        """Put the objective's data on ``device``; ``precision`` is the resolved one (never "auto")."""

    def fingerprint(self, m: int) -> str:
        """What member m's checkpoints must match to be resumed: settings, seed, data."""

    def batch(self, step: int, members: Sequence[int]) -> Any:
        """The batch of optimizer step ``step`` (0-based) of each member in ``members``, a function of (seed, step)."""

    def loss(self, model, batch: Any, dropout: MemberDropout) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's reported loss and the loss minimised, both (members,). Traced by ``torch.compile`` for a
        compiled step: tensor code that reads no tensor value on the host, its dropout through ``dropout``."""

    def learning_rate(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based)."""

    def evaluate(self, model, step: int, members: Sequence[int]) -> list[list[dict]]:
        """Each member's evaluation rows at ``step`` (the model in eval mode, without gradients)."""

    def stop_step(self, m: int, history: Sequence[dict]) -> int:
        """The step member m stops at, given its evaluation rows so far (at most ``steps``)."""

    def progress(self, m: int, step: int, final: bool, history: Sequence[dict]) -> dict:
        """What member m's checkpoint at ``step`` records beyond its rows, logs and wall time."""


def clip_per_member(model, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (HF Trainer's clipping) applied to each member separately; returns the
    members' norms. Each member's norm is reduced over its own slices, as for a model of one member, so packing
    leaves the arithmetic of a member unchanged."""
    return compiled.clip_grads_per_member([p.grad for p in model.parameters() if p.grad is not None], max_norm)


class Trainer:
    """Trains an objective's members packed into one model, each until its stop step."""

    def __init__(self, objective: Objective):
        self.objective = objective
        settings = objective.settings
        self.device = resolve_device(settings["device"])
        if settings["deterministic"] and self.device.type == "cuda":
            # cuBLAS reads this when its first handle is made, so before the model reaches the GPU.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        self.precision = resolve_precision(settings["precision"], self.device)
        if self.device.type == "cpu":
            keep_freed_memory()
        objective.prepare(self.device, self.precision)
        self.members = len(objective.seeds)
        if not self.members:
            raise ValueError("no members to train")
        self.fingerprints = [objective.fingerprint(m) for m in range(self.members)]
        self.history: dict[int, list[dict]] = {m: [] for m in range(self.members)}
        self._build(list(range(self.members)))
        self.tensor_names = set(self.model.checkpoint_tensors(0))  # what a checkpoint of this model holds
        self.moment_names = {f"{kind}.{name}" for name in self.param_names.values() for kind in ("exp_avg", "exp_avg_sq")}
        self.compiled = compiled.CompiledStep(self) if compiled.wanted(settings.get("compile", "auto"), objective.steps) else None
        log.info("training step: %s", "compiled (torch.compile)" if self.compiled else "eager")

    # ------------------------------------------------------------------ the pack
    def _root(self, m: int) -> Path:
        return Path(self.objective.outs[m]) / "checkpoints"

    def _build(self, members: Sequence[int]) -> None:
        """A fresh pack of ``members``: their initial weights, a fresh optimizer and dropout generators."""
        o, settings = self.objective, self.objective.settings
        self.active = list(members)
        seeds = [o.seeds[m] for m in self.active]
        self.model = o.model_config.build(len(seeds)).initialise(seeds).to(self.device)
        params = dict(self.model.named_parameters())
        groups = [
            {"params": [p for n, p in params.items() if self.model.decays(n)], "weight_decay": settings["weight_decay"]},
            {"params": [p for n, p in params.items() if not self.model.decays(n)], "weight_decay": 0.0},
        ]
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=settings["learning_rate"], betas=tuple(settings["betas"]), eps=1e-8,
            fused=fused, foreach=not fused,
        )  # fmt: skip
        self.param_names = {id(p): n for n, p in params.items()}
        self.generators = [torch.Generator(device=self.device).manual_seed(seed) for seed in seeds]
        self.dropout = MemberDropout(self.generators)

    def _leave(self, members: Sequence[int]) -> None:
        """Take ``members`` out of the pack (they stopped): the others keep their weights, moments and generators."""
        keep = [i for i, m in enumerate(self.active) if m not in members]
        if not keep:
            self.active = []
            return
        old_model, old_optimizer, old_names, old_generators = self.model, self.optimizer, self.param_names, self.generators
        self._build([self.active[i] for i in keep])
        index = torch.tensor(keep, device=self.device)
        old = dict(old_model.named_parameters())
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                param.copy_(old[name].index_select(0, index))
        states = {old_names[id(p)]: s for p, s in old_optimizer.state.items()}
        for p in self.model.parameters():
            state = states.get(self.param_names[id(p)])
            if state is not None:
                self.optimizer.state[p] = {
                    "step": state["step"].clone(), "exp_avg": state["exp_avg"].index_select(0, index).clone(),
                    "exp_avg_sq": state["exp_avg_sq"].index_select(0, index).clone(),
                }  # fmt: skip
        self.generators = [old_generators[i] for i in keep]
        self.dropout = MemberDropout(self.generators)

    # ------------------------------------------------------------------ state
    def _state(self, i: int) -> tuple[dict[str, torch.Tensor], dict]:
        """The resume state of the pack's i-th member: its optimizer moments, the step count, its generator."""
        m = self.active[i]
        tensors: dict[str, torch.Tensor] = {}
        for p, state in self.optimizer.state.items():
            name = self.param_names[id(p)]
            tensors[f"exp_avg.{name}"] = state["exp_avg"][i]
            tensors[f"exp_avg_sq.{name}"] = state["exp_avg_sq"][i]
        if self.optimizer.state:  # one step count for every parameter: AdamW steps them together
            tensors["optimizer_step"] = next(iter(self.optimizer.state.values()))["step"].reshape(1).cpu()
        tensors["generator"] = self.generators[i].get_state()
        return tensors, {"format": STATE_FORMAT, "fingerprint": self.fingerprints[m], "seed": self.objective.seeds[m]}

    def _load(self, step: int, members: Sequence[int]) -> None:
        """The pack of ``members`` as their step-``step`` checkpoints left it."""
        self._build(members)
        directories = [ckpt.step_dir(self._root(m), step) for m in members]
        states = [ckpt.load_trainer_state(d)[0] for d in directories]
        for i, directory in enumerate(directories):
            self.model.load_checkpoint_tensors(load_tensors(directory / "model.safetensors"), i)
            if "generator" in states[i]:
                self._restore_generator(i, states[i]["generator"], step)
        if "optimizer_step" not in states[0]:
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

    def _restore_generator(self, i: int, state: torch.Tensor, step: int) -> None:
        """The pack's i-th dropout generator as its step-``step`` checkpoint saved it. A state saved on another kind
        of device does not fit this one's generator (a CPU's Mersenne Twister is 5056 bytes, CUDA's Philox seed and
        offset 16), and setting it would stop the resume: the generator is then seeded from (seed, step), so that
        the resumed run is repeatable, though its dropout masks are not those the saved stream would have drawn."""
        generator = self.generators[i]
        if state.numel() == generator.get_state().numel():
            generator.set_state(state)
            return
        seed = self.objective.seeds[self.active[i]]
        generator.manual_seed(seed + (step << 32))  # at step 0 the fresh run's seed; past it, no seed below 2**32
        log.warning(
            "seed %d: the step-%d checkpoint's dropout generator was saved on another kind of device than %s; "
            "its masks from there on are drawn from a generator seeded from (seed, step)", seed, step, self.device.type,
        )  # fmt: skip

    def _resumable(self, m: int, directory: Path) -> bool:
        """A checkpoint of member m's settings and data, with its resume state, whose weights and optimizer moments
        are named as the model's parameters (a checkpoint of an older layout is trained over, not loaded)."""
        if not ckpt.has_trainer_state(directory):
            return False
        meta = ckpt.load_trainer_meta(directory)
        if meta.get("fingerprint") != self.fingerprints[m] or meta.get("format") != STATE_FORMAT:
            return False
        moments = {n for n in tensor_names(directory / "trainer_state.safetensors") if n.startswith("exp_avg")}
        if moments and moments != self.moment_names:  # none at step 0, before the first update
            return False
        return tensor_names(directory / "model.safetensors") == self.tensor_names

    def _rows(self, m: int, up_to: int) -> list[dict]:
        return [row for step, d in ckpt.list_checkpoints(self._root(m)) if step <= up_to for row in ckpt.load_progress(d)["eval"]]

    def resume(self) -> int:
        """Restore the pack from the newest checkpoint its unfinished members share; the step to go on from (0 when
        they start fresh). A member whose newest checkpoint is its stop, with its settings, is finished and leaves
        the pack; one whose newest checkpoint lies before its stop goes on from there (a killed run, or a shorter
        run where the fingerprint allows); checkpoints past the shared step belong to a run that did not finish, or
        to a longer one, and are removed."""
        todo, usable = [], []
        for m in range(self.members):
            found = ckpt.list_checkpoints(self._root(m))
            steps = [s for s, d in found if self._resumable(m, d)]
            if steps and steps[-1] == found[-1][0]:
                history = self._rows(m, steps[-1])
                stop = self.objective.stop_step(m, history)
                if steps[-1] == stop:
                    ckpt.load_trainer_state(found[-1][1])  # verified: a damaged state is an error, even when done
                    self.history[m] = history
                    continue
                if steps[-1] > stop:  # a longer run's, whose states before this stop were dropped
                    log.warning("%s: its checkpoints run to step %d, past this run's stop at %d; starting over", self._root(m), steps[-1], stop)
                    steps = []
            elif found and not steps:
                log.warning("%s: %d checkpoints were made with other settings or data, or cannot resume; starting over", self._root(m), len(found))
            todo.append(m)
            usable.append(set(steps))
        if not todo:
            self.active = []
            return 0
        common = set.intersection(*usable)
        if not common:
            for m in todo:
                ckpt.remove_all(self._root(m))
                self.history[m] = []
            self._build(todo)
            return 0
        step = max(common)
        for m in todo:
            ckpt.remove_after(self._root(m), step)
            self.history[m] = self._rows(m, step)
        self._load(step, todo)
        log.info("resuming from step %d (members %s)", step, " ".join(str(self.objective.seeds[m]) for m in todo))
        return step

    # ------------------------------------------------------------------ loop
    def step(self, step: int) -> torch.Tensor:
        """One optimizer step of the active members at 0-based ``step``; returns each one's reported loss. The
        compiled step where the trainer has one (:mod:`posym.training.compiled`), else the eager one."""
        if self.compiled is not None:
            states = [g.get_state() for g in self.generators]
            try:
                return self.compiled.step(step)
            except Exception as error:  # compiling failed: this step, and every later one, eagerly
                if not self.compiled.may_fall_back(error):
                    raise
                log.debug("compiled step failed", exc_info=True)
                self._fall_back(error, "training")
                for generator, state in zip(self.generators, states):
                    generator.set_state(state)
                self.optimizer.zero_grad(set_to_none=True)
        return self.eager_step(step)

    def _fall_back(self, error: Exception, what: str) -> None:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        log.warning("torch.compile is not available here (%s: %s): %s eagerly from now on", type(error).__name__, reason[:300], what)
        self.compiled = None

    def eager_step(self, step: int) -> torch.Tensor:
        """One eager optimizer step (``train.compile: false``): bit-reproducible on a CPU."""
        o, settings = self.objective, self.objective.settings
        batch = o.batch(step, self.active)
        for group in self.optimizer.param_groups:
            group["lr"] = o.learning_rate(step)
        reported, minimised = o.loss(self.model, batch, self.dropout)
        minimised.sum().backward()
        if settings["max_grad_norm"] is not None:
            clip_per_member(self.model, settings["max_grad_norm"])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return reported.detach()

    def _evaluate(self, step: int, pending: dict[int, list]) -> None:
        self.model.eval()
        with torch.no_grad():
            rows = None
            if self.compiled is not None:
                try:
                    rows = self.objective.evaluate(self.compiled.evaluation_model(), step, self.active)
                except Exception as error:
                    self._fall_back(error, "training and evaluating")
            if rows is None:
                rows = self.objective.evaluate(self.model, step, self.active)
        self.model.train()
        for m, member_rows in zip(self.active, rows):
            pending[m] += member_rows
            self.history[m] += member_rows

    def _diverged(self, m: int, step: int, what: str) -> TrainingDiverged:
        found = ckpt.list_checkpoints(self._root(m))
        newest = f"step {found[-1][0]} ({found[-1][1]})" if found else "none"
        return TrainingDiverged(
            f"seed {self.objective.seeds[m]} diverged: {what} at step {step}; its newest checkpoint is {newest}. These "
            f"train settings do not train it stably (learning_rate, betas, max_grad_norm); a rerun with them resumes "
            f"from that checkpoint and diverges again"
        )  # fmt: skip

    def _check_losses(self, step: int, values: Sequence[float]) -> None:
        for m, value in zip(self.active, values):
            if not math.isfinite(value):
                raise self._diverged(m, step, f"loss {value}")

    def _check_weights(self, step: int, members: Sequence[int]) -> None:
        """Every one of ``members``' weights finite (each parameter's leading dimension is the pack's member)."""
        with torch.no_grad():
            finite = torch.ones(len(self.active), dtype=torch.bool, device=self.device)
            for param in self.model.parameters():
                finite &= torch.isfinite(param).reshape(len(self.active), -1).all(1)
        for m, ok in zip(self.active, finite.tolist()):
            if m in members and not ok:
                raise self._diverged(m, step, "non-finite weights")

    def _write(self, step: int, members: Sequence[int], final: bool, pending: dict, logs: dict, wall: float) -> None:
        o = self.objective
        self._check_weights(step, members)
        for m in members:
            progress = {"step": step, "eval": pending[m], "log": logs[m], "wall_seconds": wall, **o.progress(m, step, final, self.history[m])}
            ckpt.write_checkpoint(self._root(m), step, self.model, self.active.index(m), o.vocab, progress, self._state(self.active.index(m)))
            pending[m], logs[m] = [], []
        # Only now, with every member's new state on disk, drop the older states.
        for m in members:
            for s, directory in ckpt.list_checkpoints(self._root(m)):
                if s < step and ckpt.has_trainer_state(directory):
                    ckpt.drop_trainer_state(directory)
        log.info("step %d checkpoint written: seeds %s%s", step, " ".join(str(o.seeds[m]) for m in members), " (stopped)" if final else "")

    def train(self) -> None:
        """Train every member to its stop step, resuming where the checkpoints allow."""
        o, settings = self.objective, self.objective.settings
        # Where the job runs, for the log: on a cluster, SLURM sets the GPUs a job may use.
        log.info("device %s, CUDA_VISIBLE_DEVICES=%s", self.device, os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"))
        step = self.resume()
        if not self.active:
            log.info("every member is already trained")
            return
        pending: dict[int, list] = {m: [] for m in self.active}
        logs: dict[int, list] = {m: [] for m in self.active}
        if step == 0:
            self._evaluate(0, pending)
            self._write(0, list(self.active), False, pending, logs, 0.0)
        self.model.train()
        segment = window = time.perf_counter()
        window_steps = 0
        while self.active:
            losses = self.step(step)
            step += 1
            window_steps += 1
            if step % settings["log_every"] == 0 or step == o.steps:
                values, lr, now = losses.cpu().tolist(), o.learning_rate(step - 1), time.perf_counter()
                for m, value in zip(self.active, values):
                    logs[m].append({"step": step, "loss": value, "lr": lr})
                log.info("step %d/%d loss %s lr %.3g  %.3f s/step (%d members)", step, o.steps, " ".join(f"{v:.4f}" for v in values),
                         lr, (now - window) / window_steps, len(self.active))  # fmt: skip
                window, window_steps = now, 0
                self._check_losses(step, values)
            if step % o.eval_every == 0 or step == o.steps:
                self._evaluate(step, pending)
            done = [m for m in self.active if step >= o.stop_step(m, self.history[m])]
            periodic = [m for m in self.active if m not in done] if step % settings["checkpoint_every"] == 0 else []
            wall = time.perf_counter() - segment
            if done:
                self._write(step, done, True, pending, logs, wall)
            if periodic:
                self._write(step, periodic, False, pending, logs, wall)
            if done or periodic:
                segment = time.perf_counter()
            if done:
                self._leave(done)
