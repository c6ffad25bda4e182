"""The fused attention on a CPU (posym.nn.packing's ``_sdpa``): PyTorch's flash kernel, in float32.

torch 2.13's CPU flash kernel runs its backward 4-9x slower in bf16 than in float32, and queries and keys wider
than the values (MLA's [content; rope] keys) send it to the math path: posym attends in float32 with the values
padded to the keys' width. The tests watch the operators dispatched (below autocast, so with the dtypes the
kernels get) and compare the result with the explicit path's. A compiled step that trains in bf16 materialises the
patterns of heads of 32 dimensions or more over at most 256 keys instead (faster there); the last test reads the
traced graph for which path it took.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from posym.nn.packing import attention
from posym.nn.positions import NoPE

FLASH = "aten._scaled_dot_product_flash_attention_for_cpu"


class Dispatched(TorchDispatchMode):
    """Records each operator that reaches the kernels, with the dtype of its first tensor argument."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, torch.dtype | None]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        self.calls.append((str(func.overloadpacket), first.dtype if first is not None else None))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "precision, key_width",
    [("bf16", 16), ("fp32", 32), ("bf16", 32)],
    ids=["bf16 autocast", "keys wider than values (MLA)", "both"],
)
def test_fused_attention_runs_the_float32_flash_kernel_forward_and_backward(precision, key_width):
    generator = torch.Generator().manual_seed(0)
    S, B, H, T = 1, 3, 2, 12
    q, k = (torch.randn(S, B, H, T, key_width, generator=generator, requires_grad=True) for _ in range(2))
    v = torch.randn(S, B, H, T, 16, generator=generator, requires_grad=True)
    key_mask = torch.arange(T)[None, None, :] < torch.tensor([T, 7, 4])[None, :, None]  # padded samples
    positions = torch.arange(T)

    def attend(explicit: bool) -> torch.Tensor:
        return attention(q, k, v, NoPE(), positions, positions, causal=False, key_mask=key_mask, explicit=explicit)

    reference = attend(explicit=True)  # float32, the pattern materialised
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"), Dispatched() as dispatched:
        fused = attend(explicit=False)
        fused.float().square().sum().backward()

    flash = [(name, dtype) for name, dtype in dispatched.calls if name.startswith(FLASH)]
    assert (FLASH, torch.float32) in flash, dispatched.calls
    assert (FLASH + "_backward", torch.float32) in flash, dispatched.calls
    assert all(dtype == torch.float32 for _, dtype in flash), flash
    assert fused.shape == reference.shape
    assert fused.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    tolerance = 2e-2 if precision == "bf16" else 1e-5
    assert torch.allclose(fused.float(), reference, atol=tolerance, rtol=0), (fused.float() - reference).abs().max()


def compiled_attention_ops(q, k, v, *, precision: str, grad: bool) -> tuple[torch.Tensor, set[str]]:
    """``attention`` compiled (causal, no hooks, ``explicit=False``) with a backend that records the traced graph's
    operators; returns its output and their names."""
    ops: set[str] = set()

    def recording(graph_module, example_inputs):
        ops.update(str(getattr(node.target, "__name__", node.target)) for node in graph_module.graph.nodes)
        return graph_module.forward

    positions = torch.arange(q.shape[-2])
    attend = torch.compile(lambda q, k, v: attention(q, k, v, NoPE(), positions, positions, explicit=False), backend=recording, fullgraph=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"), torch.set_grad_enabled(grad):
        return attend(q, k, v), ops


@pytest.mark.parametrize(
    "heads, tokens, head_dim, precision, grad, materialised",
    [
        (2, 12, 32, "bf16", True, True),
        (1, 256, 32, "bf16", True, True),
        (2, 12, 16, "bf16", True, False),  # narrow heads: the fused kernel is the faster
        (1, 257, 32, "bf16", True, False),  # many keys: likewise
        (2, 12, 32, "fp32", True, False),  # float32: the fused kernel runs as it is
        (2, 12, 32, "bf16", False, False),  # evaluation
    ],
    ids=["short wide bf16", "256 keys", "narrow heads", "257 keys", "fp32", "no gradients"],
)
def test_a_compiled_lower_precision_training_step_materialises_the_patterns_where_that_is_faster(heads, tokens, head_dim, precision, grad, materialised):
    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, heads, tokens, head_dim, generator=generator, requires_grad=True) for _ in range(3))
    out, ops = compiled_attention_ops(q, k, v, precision=precision, grad=grad)
    assert ("scaled_dot_product_attention" not in ops) == materialised, sorted(ops)
    assert ("softmax" in ops) == materialised, sorted(ops)
    positions = torch.arange(tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        eager = attention(q, k, v, NoPE(), positions, positions, explicit=False)  # eager: always the fused kernel
    assert out.dtype == eager.dtype
    tolerance = 2e-2 if precision == "bf16" else 1e-5
    assert torch.allclose(out.float(), eager.float(), atol=tolerance, rtol=0), (out.float() - eager.float()).abs().max()
