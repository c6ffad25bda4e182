"""The compiled training step (posym.training.compiled): its dropout masks and AdamW update are the eager step's,
it follows the eager step for each study's model, it falls back to eager where compiling fails, and ``auto``
compiles only runs long enough to pay for it.

Tolerance of "follows": over 50 steps of float32 training with the same dropout masks, every member's reported
loss within 1e-4 of the eager step's at every step (measured: below 1e-6 for paper A's model: fused and unfused
kernels round differently, and the differences grow slowly), and the trained models' logits within 1e-3. Compiling takes tens of seconds per model on 2
cores (seconds with inductor's cache warm): the three models' tests are slow."""

from __future__ import annotations

import logging

import pytest
import torch

from conftest import model_config, train_config
from posym.nn.packing import CountingDropout, DrawnDropout, MemberDropout, relu
from posym.pipeline import config as posym_config
from posym.studies.a.tasks import get
from posym.training import compiled
from posym.training.splits import Run, SplitObjective
from posym.training.trainer import Trainer

STEPS = 50
LOSS_TOLERANCE = 1e-4  # the largest |loss difference| of any member at any of the 50 steps
OUTPUT_TOLERANCE = 1e-3  # the largest |logit difference| of the two trained models on a batch


@pytest.fixture(scope="module")
def number():
    return get("number").samples(2048, 42), get("number").samples(128, 7)


def gptj_trainer(tmp_path, data, compile, seeds=(0, 1), **train):
    """Paper A's model, small, with its dropout (attention and residual 0.1), two seeds packed."""
    vocab = get("number").vocabulary
    settings = {"steps": STEPS, "batch_size": 32, "learning_rate": 3e-3, "warmup_steps": 5, "checkpoint_every": STEPS,
                "eval_samples": 64, "device": "cpu", "precision": "fp32", "compile": compile, **train}  # fmt: skip
    runs = [Run(seed=s, train=data[0], test=data[1], out=tmp_path / f"seed{s}") for s in seeds]
    return Trainer(SplitObjective(runs, model_config(len(vocab), n_layer=2, d_model=32), train_config(**settings), vocab.tokens))


def losses_of(trainer, steps=STEPS) -> torch.Tensor:
    return torch.stack([trainer.step(k) for k in range(steps)])


def assert_follows(eager: Trainer, fast: Trainer) -> None:
    """The compiled step's losses follow the eager one's, and so do the trained models' outputs. (Weights are not
    compared one by one: an attention key bias has no gradient in exact arithmetic, and AdamW turns its rounding
    noise into steps of the learning rate, other ones in each rounding; the outputs do not depend on it.)"""
    a, b = losses_of(eager), losses_of(fast)
    assert fast.compiled is not None, "the compiled step fell back to eager"
    assert (a - b).abs().max() <= LOSS_TOLERANCE, (a - b).abs().max()
    batch = eager.objective.batch(STEPS, eager.active)
    ids = batch[0] if isinstance(batch, tuple) else batch
    with torch.no_grad():
        assert (eager.model.eval()(ids) - fast.model.eval()(ids)).abs().max() <= OUTPUT_TOLERANCE
    # The optimizer state is torch.optim's: the same step counts, so either step resumes the other.
    for p, q in zip(eager.model.parameters(), fast.model.parameters()):
        s, t = eager.optimizer.state[p], fast.optimizer.state[q]
        assert s["step"] == t["step"] == STEPS and s["step"].device == t["step"].device
        assert s["exp_avg"].shape == t["exp_avg"].shape and s["exp_avg_sq"].dtype == t["exp_avg_sq"].dtype


def assert_follows_in_bf16(eager: Trainer, fast: Trainer) -> None:
    """Under bf16 autocast the kernels round differently enough that only the trajectory is compared: every member's
    loss within 2 % of the eager step's at every step."""
    a, b = losses_of(eager), losses_of(fast)
    assert fast.compiled is not None, "the compiled step fell back to eager"
    assert ((a - b).abs() / a).max() < 0.02, ((a - b).abs() / a).max()


# ------------------------------------------------------------------------------------------------ the pieces


def test_drawn_dropout_reads_the_masks_that_calls_drawn_one_by_one_make():
    """A step's block of words gives each call the mask the eager call would have drawn (on a CPU each call's stream
    is seeded by the next word of the member's generator, drawn alone or with the step's other calls)."""
    shapes, p = [(2, 3, 5), (2, 7), (2, 4, 4, 4)], 0.1
    eager = MemberDropout([torch.Generator().manual_seed(s) for s in (3, 4)])
    expected = [eager(torch.ones(shape), p) for shape in shapes]
    counter = CountingDropout()
    for shape in shapes:
        assert torch.equal(counter(torch.ones(shape), p), torch.ones(shape))  # counting drops nothing
    assert counter.calls == [(torch.Size(shape[1:]).numel() + 3) // 4 for shape in shapes]
    for widened in (True, False):  # int32 for a compiled CPU step (inductor does not vectorise int16), or int16
        drawn = MemberDropout([torch.Generator().manual_seed(s) for s in (3, 4)]).draw_bits(counter.calls, torch.device("cpu"), widened=widened)
        assert drawn.dtype == (torch.int32 if widened else torch.int16) and drawn.shape == (2, 4 * sum(counter.calls))
        replay = DrawnDropout(drawn)
        for shape, mask in zip(shapes, expected):
            assert torch.equal(replay(torch.ones(shape), p), mask)
        assert replay(torch.ones(2, 3), 0.0).eq(1).all()  # p = 0 reads nothing


def test_compiled_dropout_and_relu_compute_the_eager_values_without_boolean_masks():
    """Under compilation the dropout masks and ReLU's gradient gate are computed in integer and sign arithmetic
    (inductor writes boolean tensors slowly): the same values as eager, to the bit, zeros included."""
    x = torch.tensor([[-2.0, -0.0, 0.0, 1e-30, 3.0, -1e-30] * 8, [1.0, -1.0, 0.0, 2.0, -3.0, 0.5] * 8])
    at = round(0.25 * 65536) - 32768  # the 16-bit value from which an element is kept at p = 0.25
    edges = torch.tensor([at + 1, -32768, 32767, 0, at, at - 1], dtype=torch.int16).repeat(2, 8)  # at: x nonzero
    bits = torch.stack([edges[0], edges[1].roll(1)])  # 48 values a member: 12 words

    def run(x, bits=bits):
        return relu(DrawnDropout(bits)(x, 0.25) * 3.0)

    compiled = torch.compile(run, backend="aot_eager", fullgraph=True)
    for fn in (run, compiled, lambda x: compiled(x, bits.to(torch.int32))):
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        out.backward(torch.arange(out.numel(), dtype=out.dtype).view(out.shape))
        if fn is run:
            expected, expected_grad = out.detach(), leaf.grad
        else:
            assert torch.equal(out.detach(), expected) and torch.equal(leaf.grad, expected_grad)
    assert 0 < expected.eq(0).float().mean() < 1 and expected_grad.eq(0).any() and expected_grad.ne(0).any()


def test_the_update_is_torch_adamw_with_per_member_clipping():
    generator = torch.Generator().manual_seed(0)
    shapes, decays = [(3, 8, 4), (3, 4)], [0.1, 0.0]
    ours = [torch.randn(shape, generator=generator) for shape in shapes]
    theirs = [torch.nn.Parameter(p.clone()) for p in ours]
    optimizer = torch.optim.AdamW(
        [{"params": [theirs[0]], "weight_decay": decays[0]}, {"params": [theirs[1]], "weight_decay": decays[1]}],
        lr=1e-2, betas=(0.9, 0.98), eps=1e-8, foreach=True,
    )  # fmt: skip
    moments = [torch.zeros_like(p) for p in ours], [torch.zeros_like(p) for p in ours]
    steps = [torch.tensor(0.0) for _ in ours]
    for k in range(5):
        lr = 1e-2 * (k + 1) / 5
        grads = [torch.randn(shape, generator=generator) * (k + 1) for shape in shapes]
        norms, members = [], []
        for m in range(3):  # torch's clipping of each member as a model of its own
            alone = [torch.nn.Parameter(q.detach()[m].clone()) for q in theirs]
            for q, g in zip(alone, grads):
                q.grad = g[m].clone()
            norms.append(torch.nn.utils.clip_grad_norm_(alone, 1.0))
            members.append([q.grad for q in alone])
        for i, q in enumerate(theirs):
            q.grad = torch.stack([member[i] for member in members])
        norms = torch.stack(norms)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        clipped = [g.clone() for g in grads]
        assert torch.allclose(compiled.clip_grads_per_member([g.clone() for g in grads], 1.0), norms)
        compiled.adamw_update(ours, clipped, *moments, steps, torch.tensor(lr, dtype=torch.float64), decays, (0.9, 0.98), 1e-8, 1.0)
        for p, q in zip(ours, theirs):
            assert torch.allclose(p, q.detach(), rtol=1e-6, atol=1e-7)
    assert [float(s) for s in steps] == [5.0, 5.0]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["rope", "rope_rotate_half", "rope_sinusoid", "sinusoidal"])
def test_compiled_kernels_read_the_angle_table_instead_of_evaluating_cos_and_sin(scheme):
    """Each position scheme's cos/sin table is made once per compiled graph (posym::angle_table) and read by the
    kernels of the forward and backward passes: inlined, inductor evaluated cos and sin per batch row, per head
    and per layer in scalar code (a third of paper A's compiled bf16 step on an AMX CPU)."""
    from torch._inductor.utils import run_and_get_code

    from posym.nn import positions

    head_dim, heads, T = 8, 2, 6
    d_model = head_dim * heads
    kind = positions.get(scheme)
    made = {"sinusoidal": lambda: kind(d_model), "rope_sinusoid": lambda: kind(head_dim, d_model)}.get(scheme, lambda: kind(head_dim, head_dim))()

    def attend(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # x (batch, heads, T, head_dim)
        if made.embeds:
            x = x + made.embedding(pos).unflatten(-1, (heads, head_dim)).transpose(0, 1)
        if made.rotary:
            x = made.rotate(x, pos)
        return x.square().sum()

    x = torch.randn(4, heads, T, head_dim, requires_grad=True)
    pos = torch.arange(T)
    expected = torch.autograd.grad(attend(x, pos), x)[0]
    step = torch.compile(attend, dynamic=False)
    (grad,), code = run_and_get_code(lambda: torch.autograd.grad(step(x, pos), x))
    assert torch.allclose(grad, expected, atol=1e-5)
    kernels = "\n".join(code)
    assert "angle_table" in kernels, "the table is not computed by its operator"
    for call in ("std::cos", "std::sin", ".cos()", ".sin()"):
        assert call not in kernels, f"a generated kernel evaluates {call}"


def test_auto_compiles_only_runs_long_enough_to_pay():
    assert not compiled.wanted("auto", compiled.AUTO_MIN_STEPS - 1) and compiled.wanted("auto", compiled.AUTO_MIN_STEPS)
    assert compiled.wanted(True, 1) and not compiled.wanted(False, 10**6)
    with pytest.raises(ValueError, match="compile='yes'"):
        compiled.wanted("yes", 10)
    block = posym_config.study_defaults("a")["train"]
    assert block["compile"] == "auto"  # the core's train block default, in every study


def test_a_step_that_cannot_compile_falls_back_to_eager_with_a_log_line(tmp_path, number, caplog, monkeypatch):
    """Where torch.compile fails (no C++ compiler, say), the run goes on eagerly from the state it had: the same
    weights as an eager run, to the bit (the failed step's dropout draws are given back)."""

    def broken(fn, **options):
        def call(*args, **kwargs):
            raise RuntimeError("Compiler: cc is not found")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    eager = gptj_trainer(tmp_path / "eager", number, False)
    failing = gptj_trainer(tmp_path / "failing", number, True)
    assert failing.compiled is not None
    with caplog.at_level(logging.WARNING, logger="posym.training"):
        a, b = losses_of(eager, 5), losses_of(failing, 5)
    assert failing.compiled is None and torch.equal(a, b)
    (line,) = [r.getMessage() for r in caplog.records if "torch.compile" in r.getMessage()]
    assert "cc is not found" in line and "eagerly" in line
    for x, y in zip(eager.model.parameters(), failing.model.parameters()):
        assert torch.equal(x, y)


# ------------------------------------------------------------------------------------------------ each model


@pytest.mark.slow
def test_paper_a_compiled_step_follows_the_eager_one(tmp_path, number):
    eager, fast = gptj_trainer(tmp_path / "eager", number, False), gptj_trainer(tmp_path / "compiled", number, True)
    assert_follows(eager, fast)
    # Its evaluation runs through the compiled model and scores as the eager model does.
    assert fast.objective.evaluate(fast.compiled.evaluation_model(), STEPS, [0, 1]) == fast.objective.evaluate(fast.model, STEPS, [0, 1])
    # On a CPU a compiled run is repeatable to the bit, as an eager one is: the same seed, the same losses and weights.
    again = gptj_trainer(tmp_path / "again", number, True)
    assert torch.equal(losses_of(again), losses_of(gptj_trainer(tmp_path / "compiled-losses", number, True)))
    for p, q in zip(fast.model.parameters(), again.model.parameters()):
        assert torch.equal(p, q)


@pytest.mark.slow
def test_paper_a_compiled_bf16_step_follows_the_eager_one(tmp_path, number):
    eager, fast = gptj_trainer(tmp_path / "eager", number, False, precision="bf16"), gptj_trainer(tmp_path / "compiled", number, True, precision="bf16")
    assert_follows_in_bf16(eager, fast)


def encoder_trainer(root, compile, model, seeds, steps=STEPS, batch_size=32):
    """Paper B's encoder (its schema's settings, ``model`` changed) trained on the count task, ``seeds`` packed."""
    from posym.studies.b.architecture import model_config as encoder_config
    from posym.studies.b.tasks import get as b_task
    from posym.studies.b.tasks.words import VOCABULARY
    from posym.training.splits import TrainConfig

    section = posym_config.study_defaults("b")
    task = b_task("count")
    data = task.generate("train", 1024, 42)[0], task.generate("test", 128, 7)[0]
    settings = {**section["train"], "steps": steps, "batch_size": batch_size, "warmup_steps": 5, "checkpoint_every": steps,
                "eval_samples": 64, "device": "cpu", "precision": "fp32", "compile": compile}  # fmt: skip
    runs = [Run(seed=s, train=data[0], test=data[1], out=root / f"seed{s}") for s in seeds]
    config = encoder_config(len(VOCABULARY), {**section["model"], **model})
    return Trainer(SplitObjective(runs, config, TrainConfig.from_dict(settings), VOCABULARY.tokens))


@pytest.mark.slow
def test_paper_b_compiled_step_follows_the_eager_one(tmp_path):
    model = {"n_layer": 2, "d_model": 32, "n_head": 2, "d_mlp": 64, "max_len": 24, "dropout": 0.1}
    assert_follows(encoder_trainer(tmp_path / "eager", False, model, (0, 1)), encoder_trainer(tmp_path / "compiled", True, model, (0, 1)))


@pytest.mark.slow
def test_a_compiled_packed_step_on_two_threads_gives_the_same_bytes_run_to_run(tmp_path):
    """Paper B's encoder at config.yaml's size, three seeds packed, on 2 threads. Without deterministic kernels the
    middle member's weights differed between two such trainers after 20 steps (inductor's embedding backward
    sums a row that both threads touch with atomic adds); the outer members and one thread hid it."""
    model = {"n_layer": 2, "d_model": 64, "n_head": 4, "d_mlp": 128, "max_len": 48, "dropout": 0.0, "position": "nope"}

    def trained(root):
        trainer = encoder_trainer(root, True, model, (0, 1, 2), steps=20, batch_size=64)
        losses_of(trainer, 20)
        assert trainer.compiled is not None, "the compiled step fell back to eager"
        return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first, second = trained(tmp_path / "first"), trained(tmp_path / "second")
    finally:
        torch.set_num_threads(threads)
    assert not torch.are_deterministic_algorithms_enabled()  # the mode is the step's, not left on for the process
    differ = [name for name in first if not torch.equal(first[name], second[name])]
    assert not differ, f"weights differ between two identical runs: {differ}"


def toy_trainer(root, compile, arm, *, model=None, train=None):
    """Paper C's toy model, small (its schema's settings; ``model`` and ``train`` change them), two seeds packed."""
    from posym.studies.c import training

    section = posym_config.validate(
        {"studies": ["c"], "c": {"training": {"seeds": [0, 1], "task": {"length": 32}, "model": {"d_model": 32, "n_head": 2, "rotary_dim": 16, **(model or {})},
                                              "train": {"batch_size": 8, "max_steps": STEPS, "warmup_steps": 5, "device": "cpu", **(train or {})}}}}  # fmt: skip
    )["c"]["training"]
    objective = training.ArmObjective({**section, "train": {**section["train"], "compile": compile}}, arm, [0, 1], [root / "seed0", root / "seed1"])
    return Trainer(objective)


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["rope_sym", "ape_free"])
def test_paper_c_compiled_step_follows_the_eager_one(tmp_path, arm):
    assert_follows(toy_trainer(tmp_path / "eager", False, arm), toy_trainer(tmp_path / "compiled", True, arm))


@pytest.mark.slow
def test_paper_c_compiled_bf16_step_follows_the_eager_one(tmp_path):
    """Heads of 32 dimensions: the compiled bf16 step materialises the patterns where the eager one runs the fused
    kernel in float32 (posym.nn.packing's ``_explicit_trains_faster``)."""
    settings = {"model": {"d_model": 64}, "train": {"precision": "bf16"}}
    eager, fast = toy_trainer(tmp_path / "eager", False, "ape_free", **settings), toy_trainer(tmp_path / "compiled", True, "ape_free", **settings)
    assert_follows_in_bf16(eager, fast)
