"""The compiled training step: the trainer's step (:meth:`posym.training.trainer.Trainer.step`) as two
``torch.compile`` graphs, and its evaluation through a compiled model.

* **Forward and loss** (:func:`forward_loss`), with the backward pass AOTAutograd derives from it: matmuls in
  the CPU's or GPU's libraries, everything between them (LayerNorm, RoPE's rotation, GELU, dropout masks, the
  casts of bf16 autocast) fused into a few generated kernels.
* **Clipping and AdamW** (:func:`adamw_update`): each member's gradient norm and the update of every
  parameter and moment, as ``torch.optim.AdamW`` computes them, in a few fused kernels. It reads and writes the
  trainer's optimizer state, so checkpoints, resume and a later eager step are unchanged.

Nothing in a step waits for the device: the learning rate is a tensor filled before the step, the dropout masks
come in as one block of words drawn before it (:class:`posym.nn.packing.DrawnDropout`; on a CPU, each dropout call's
stream seeded by a word of the member's generator: the same masks as an eager step's), and no branch reads tensor
data. On CUDA both graphs are replayed as CUDA graphs (``mode="reduce-overhead"``), so a step is a handful of
launches instead of thousands.

A compiled step computes what the eager one does, rounded otherwise (fused kernels add in another order): its
losses follow the eager step's within float tolerance (``tests/core/test_compiled.py``), not to the bit. Eager
steps (``train.compile: false``) stay bit-reproducible on a CPU; the determinism and resume tests use them.

On a CPU a compiled step is run-to-run reproducible too: it runs under ``torch.use_deterministic_algorithms``
(:func:`deterministic_kernels`). Without it inductor writes the backward pass of an embedding lookup as a parallel
scatter with atomic adds, and on more than one thread the rows that two threads share (a packed model's middle
member, or one model's repeated tokens) sum in whatever order the threads arrive: measured on paper B's packed
encoder at 2 threads, the middle seed's weights differed between two runs from the first steps, and 5,000 steps
turned that into 4 points of accuracy. In that mode inductor leaves such scatters to PyTorch's serial kernel.

Compiling takes tens of seconds per graph, once per process and shape (a pack that loses a member compiles again).
Inductor's cache (``TORCHINDUCTOR_CACHE_DIR``; posym sets it to ``~/.cache/posym/torchinductor`` when unset)
keeps the generated kernels, so later jobs of the same shapes compile in seconds; the log says how long the first
step took and how many graphs came from the cache. Where compiling fails (no C++ compiler for inductor's CPU
kernels, say), the step falls back to eager with a log line that says why, and the run goes on as an eager one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from posym.nn.packing import CountingDropout, DrawnDropout

log = logging.getLogger("posym.training")

#: train.compile: compile the step (True), never (False), or for runs of at least AUTO_MIN_STEPS steps ("auto").
COMPILE = ("auto", True, False)
#: Below this many steps, "auto" trains eagerly: compiling (tens of seconds) would not pay for itself.
AUTO_MIN_STEPS = 1000


def wanted(setting: bool | str, steps: int) -> bool:
    """Whether ``train.compile`` asks for a compiled step in a run of ``steps`` steps."""
    if setting not in COMPILE:
        raise ValueError(f"compile={setting!r}: expected one of {COMPILE}")
    return setting is True or (setting == "auto" and steps >= AUTO_MIN_STEPS)


#: The user's inductor cache folder, read before anything imports inductor (whose import sets its own default).
USER_CACHE_DIR = os.environ.get("TORCHINDUCTOR_CACHE_DIR")


def use_cache_dir() -> str:
    """Point inductor's cache at a folder that outlives /tmp, unless the user set ``TORCHINDUCTOR_CACHE_DIR``;
    its path."""
    if USER_CACHE_DIR is None:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "posym" / "torchinductor"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
        except OSError:
            pass  # torch's default, under /tmp
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR", "(torch's default)")


@contextlib.contextmanager
def deterministic_kernels(on: bool):
    """Run (and so compile: inductor lowers a graph at its first call, the backward at its first backward) with
    ``torch.use_deterministic_algorithms`` on, where ``on``; the previous mode is restored after. Dynamo guards on
    the mode, so every call of a graph must be made in the same one."""
    if not on:
        yield
        return
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


# ------------------------------------------------------------------------------------------ the two graphs


def forward_loss(objective, model, batch: Any, drawn: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The objective's loss of ``batch``, its dropout masks read from ``drawn``: each member's reported loss and the
    sum minimised (the members' losses are independent, so one backward pass serves them all)."""
    reported, minimised = objective.loss(model, batch, DrawnDropout(drawn) if drawn is not None else None)
    return reported.detach(), minimised.sum()


def clip_coefficients(grads: list[torch.Tensor], max_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.nn.utils.clip_grad_norm_``'s factor for each member's slices of ``grads`` (every tensor's leading axis
    is the member), and the members' norms: each reduced over its own slices, as for a model of one member."""
    members = grads[0].shape[0]
    norms = torch.stack([torch.nn.utils.get_total_norm([g[m] for g in grads]) for m in range(members)])
    return (max_norm / (norms + 1e-6)).clamp(max=1.0), norms


def clip_grads_per_member(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Each member's slices of ``grads`` clipped as ``torch.nn.utils.clip_grad_norm_`` clips a model, in place; the
    members' norms."""
    coef, norms = clip_coefficients(grads, max_norm)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))
    return norms


def adamw_update(
    params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor], lr: torch.Tensor, decays: list[float], betas: tuple[float, float], eps: float,
    max_norm: float | None,
) -> None:  # fmt: skip
    """Per-member clipping, then one AdamW step of every parameter (torch.optim.AdamW's update: decoupled weight
    decay, bias-corrected moments; the bias corrections and the learning rate in float64, as its eager step
    computes them in Python), in place. ``decays``: each parameter's weight decay; ``steps`` the optimizer's
    step counts, all equal. The gradients are read, not written (a CUDA graph replays only over inputs it may
    keep at fixed addresses: parameters and optimizer state)."""
    with torch.no_grad():
        if max_norm is not None:
            coef, _ = clip_coefficients(grads, max_norm)
            grads = [g * coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype) for g in grads]
        beta1, beta2 = betas
        torch._foreach_add_(steps, 1.0)
        count = steps[0].to(torch.float64)
        step_size = lr / (1 - beta1**count)
        root_correction = (1 - beta2**count).sqrt()
        for param, grad, exp_avg, exp_avg_sq, decay in zip(params, grads, exp_avgs, exp_avg_sqs, decays):
            if decay:
                param.mul_((1 - lr * decay).to(param.dtype))
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denominator = (exp_avg_sq.sqrt() / root_correction.to(param.dtype)).add_(eps)
            param.sub_(exp_avg / denominator * step_size.to(param.dtype))


# ------------------------------------------------------------------------------------------ the step


class CompiledStep:
    """The compiled step of a :class:`posym.training.trainer.Trainer`: ``step(k)`` trains its active members one
    step and returns their reported losses, as ``Trainer.eager_step`` does. ``evaluation_model()`` is the model
    the objective's evaluation runs (compiled too). Built once per trainer; a rebuilt pack (a member left) is
    read from the trainer at each call."""

    def __init__(self, trainer, compile_fn: Callable | None = None):
        self.trainer = trainer
        self.device = trainer.device
        self.cuda = self.device.type == "cuda"
        self.cache = use_cache_dir()
        # Every pack size is a graph of its own shapes; a few sizes and the evaluation's must not hit the default limit.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        graphs = "reduce-overhead" if self.cuda else None  # CUDA graphs over the step
        compile_fn = compile_fn or torch.compile
        self.forward_loss = compile_fn(forward_loss, dynamic=False, mode=graphs)
        self.update = compile_fn(adamw_update, dynamic=False, mode=graphs)
        self.compile_fn = compile_fn
        self.lr = torch.zeros((), dtype=torch.float64, device=self.device)
        self.dropout_calls: list[int] | None = None  # each dropout call's words per member, listed at the first step
        self.seconds = 0.0  # spent in steps that compiled (their first call)
        self._evaluated: tuple[int, Any] | None = None
        self._static: set[int] = set()
        self.steps = 0  # compiled steps done

    # ---- what a step reads
    def _dropout_calls(self, batch) -> list[int]:
        """The words each dropout call of a step takes per member, in call order (none: no dropout), from one
        uncompiled forward pass."""
        counter = CountingDropout()
        with torch.no_grad():
            self.trainer.objective.loss(self.trainer.model, batch, counter)
        return counter.calls

    def _state(self) -> tuple[list, list, list, list, list]:
        """The optimizer's parameters, moments, step counts and weight decays, its state made as torch.optim makes
        it where a parameter has none yet (the first step)."""
        optimizer = self.trainer.optimizer
        params, exp_avgs, exp_avg_sqs, steps, decays = [], [], [], [], []
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state[p]
                if not state:
                    on = p.device if group["fused"] else torch.device("cpu")
                    state.update(step=torch.tensor(0.0, dtype=torch.float32, device=on), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                if self.cuda:  # fixed addresses, so that the CUDA graph updates them in place
                    for t in (p, state["exp_avg"], state["exp_avg_sq"], state["step"]):
                        if id(t) not in self._static:
                            torch._dynamo.mark_static_address(t)
                            self._static.add(id(t))
                params.append(p)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
                decays.append(float(group["weight_decay"]))
        return params, exp_avgs, exp_avg_sqs, steps, decays

    # ---- the step
    def step(self, step: int) -> torch.Tensor:
        t, o = self.trainer, self.trainer.objective
        settings = o.settings
        batch = o.batch(step, t.active)
        if self.dropout_calls is None:
            self.dropout_calls = self._dropout_calls(batch)
        drawn = t.dropout.draw_bits(self.dropout_calls, self.device) if self.dropout_calls else None
        self.lr.fill_(o.learning_rate(step))
        if self.cuda:
            torch.compiler.cudagraph_mark_step_begin()
        started = time.perf_counter()
        fresh = _compiles()
        with deterministic_kernels(not self.cuda):  # on a GPU, train.deterministic sets the mode for the whole run
            reported, minimised = self.forward_loss(o, t.model, batch, drawn)
            minimised.backward()
            params, exp_avgs, exp_avg_sqs, steps, decays = self._state()
            grads = [p.grad for p in params]
            group = t.optimizer.param_groups[0]
            self.update(params, grads, exp_avgs, exp_avg_sqs, steps, self.lr, decays, tuple(group["betas"]), group["eps"], settings["max_grad_norm"])
        for p in params:
            p.grad = None
        reported = reported.clone()  # a CUDA graph's output is overwritten by its next replay
        self.steps += 1
        if _compiles() > fresh:
            self.seconds += time.perf_counter() - started
            log.info("compiled the training step in %.1f s (%s; inductor cache %s)", time.perf_counter() - started, _cache_line(), self.cache)
        return reported

    def may_fall_back(self, error: Exception) -> bool:
        """Whether a failed step may go on eagerly: one that failed before any compiled step ran (nothing of the
        trainer's state was changed yet but its generators and gradients, which the trainer gives back), or in
        compiling (a recompile for a new pack size). A later failure of a compiled step that ran before (out of
        memory, say) may have updated part of the parameters: it stops the job, whose rerun resumes from the last
        checkpoint."""
        return self.steps == 0 or isinstance(error, torch._dynamo.exc.TorchDynamoException)

    def evaluation_model(self):
        """The trainer's model compiled for evaluation (made again when the pack changed)."""
        model = self.trainer.model
        if self._evaluated is None or self._evaluated[0] != id(model):
            self._evaluated = (id(model), self.compile_fn(model, dynamic=False))
        return self._evaluated[1]


def _compiles() -> int:
    """How many graphs dynamo has compiled in this process so far."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _cache_line() -> str:
    inductor = torch._dynamo.utils.counters["inductor"]
    return f"{inductor['fxgraph_cache_hit']} graphs from the cache, {inductor['fxgraph_cache_miss']} generated"
