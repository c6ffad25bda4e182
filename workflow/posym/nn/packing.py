"""The toolkit of packed models: attention with named hook points, member axes, per-member dropout and the
checkpoint methods of a model whose tensors are its parameters by name.

Every weight of a packed model carries a leading *member* axis, so ``members`` independent models (for example
several seeds) train in one set of batched matmuls; member ``m`` is initialised from its own generator. Analyses
never reach into a model's internals: they ask for named hook points, with TransformerLens's names and meanings
(:data:`HOOK_POINTS`). Position information enters through a :class:`posym.nn.positions.PositionScheme`, which may
rotate q/k (RoPE), add a score bias (ALiBi, T5) or add an embedding (absolute).
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posym.nn.positions import PositionScheme

Hook = Callable[[torch.Tensor], torch.Tensor | None]

# --------------------------------------------------------------------------- attention


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scheme: PositionScheme,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = True,
    key_mask: torch.Tensor | None = None,
    explicit: bool = True,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
    hook: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Multi-head attention of queries (..., H, Tq, dh) over keys/values (..., H, Tk, dh); returns (..., H, Tq, dh).

    Query i sits at ``q_positions[i]``; with ``causal`` it attends to every key at a position ≤ its own, else
    to every key. ``key_mask`` (..., Tk), when given, marks the keys that may be attended to (False: padding).
    With ``explicit`` the logits and the pattern are materialised (needed for the hooks that read them and for
    dropout driven by our own generators), as they are where a compiled step trains faster so
    (:func:`_explicit_trains_faster`); otherwise PyTorch's fused kernel computes the same values. On either path
    ``hook_q`` / ``hook_k`` see the queries and keys before the position scheme rotates them, ``hook_rot_q`` /
    ``hook_rot_k`` after, and ``hook_z`` each head's output (TransformerLens's names).
    """
    if hook is not None:
        q, k = hook("hook_q", q), hook("hook_k", k)
    q = scheme.rotate(q, q_positions)
    k = scheme.rotate(k, k_positions)
    if hook is not None:
        q, k = hook("hook_rot_q", q), hook("hook_rot_k", k)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    explicit = explicit or _explicit_trains_faster(q, k)
    bias = scheme.score_bias(q_positions, k_positions)
    future = k_positions[None, :] > q_positions[:, None] if causal else None
    hidden = None if key_mask is None else ~key_mask[..., None, None, :]
    if not explicit:
        # Queries at the keys' own positions (the same tensor) attend causally by index: PyTorch's causal kernel.
        by_index = causal and q_positions is k_positions
        out = _fused_attention(q, k, v, scale, bias, None if by_index else future, hidden, by_index)
    else:
        scores = query_key_products(q, k) * scale
        if bias is not None:
            scores = scores + bias.to(scores.dtype)  # at bf16 a float32 bias would widen every logit
        if future is not None:
            scores = scores.masked_fill(future, float("-inf"))
        if hidden is not None:
            scores = scores.masked_fill(hidden, float("-inf"))
        if hook is not None:
            scores = hook("hook_attn_scores", scores)
        pattern = torch.softmax(scores, dim=-1)
        if hook is not None:
            pattern = hook("hook_pattern", pattern)
        if dropout is not None:
            pattern = dropout(pattern)
        out = torch.matmul(pattern, v)
    return out if hook is None else hook("hook_z", out)


#: Where :func:`_explicit_trains_faster` takes the explicit path: heads of at least this many dimensions attending to
#: at most this many keys. One layer's forward and backward, compiled, bf16 materialised against float32 fused (ms;
#: 2-core Xeon with AMX, torch 2.13, 2026-12-07; samples x heads x tokens x head dimensions): 64x4x255x32 52 against
#: 65, 320x4x255x32 (five seeds packed) 260 against 310, 64x2x255x64 29 against 56, 192x1x17x128 1.8 against 2.9; and
#: where the fused kernel stays: 32x4x512x32 111 against 105, 16x4x1024x32 221 against 135, 64x4x1024x32 836 against
#: 537, 64x8x255x16 106 against 87, 64x16x128x8 55 against 41. A materialised score costs about 3 ns whatever its
#: size; the fused kernel's cost grows with the head's dimensions and falls with the keys.
EXPLICIT_MIN_HEAD_DIM, EXPLICIT_MAX_KEYS = 32, 256


def _explicit_trains_faster(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether a compiled CPU step that trains in a lower precision is faster with the pattern materialised than with
    the fused kernel, which runs in float32 there (:func:`_sdpa`): materialised, the products run in bf16 on the CPU's
    bf16 units and inductor fuses the scaling, masking and softmax around them. Paper C's compiled bf16 step (64 x 4
    heads x 255 tokens) took 0.130-0.140 s against 0.172-0.183 (three alternating pairs), with five seeds packed
    0.66 against 0.85 s (2-core Xeon with AMX, torch 2.13, 2026-12-07). Its eager step was 5-10 % slower materialised
    (0.211-0.219 against 0.193-0.207 s), and evaluation (no gradients) keeps the fused kernel, whose forward alone is
    2-3x the faster."""
    return (
        torch.compiler.is_compiling()
        and q.device.type == "cpu"
        and _cpu_compute_dtype(q) in (torch.bfloat16, torch.float16)
        and torch.is_grad_enabled()
        and (q.requires_grad or k.requires_grad)
        and q.shape[-1] >= EXPLICIT_MIN_HEAD_DIM
        and k.shape[-2] <= EXPLICIT_MAX_KEYS
    )


def query_key_products(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q kᵀ over the last two axes, its backward pass computing the keys' gradient as Gᵀ q, in the keys' own layout:
    autograd's (qᵀ G)ᵀ is its transpose, which the kernel that follows (the keys' rotation) then reads across rows,
    in scalar code (paper A's compiled step on a CPU). Queries and keys whose leading axes broadcast take autograd's."""
    if q.shape[:-2] != k.shape[:-2]:
        return torch.matmul(q, k.transpose(-1, -2))
    return _QueryKeyProducts.apply(q, k)


class _QueryKeyProducts(torch.autograd.Function):
    @staticmethod
    def forward(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.matmul(q, k.transpose(-1, -2))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = ctx.saved_tensors
        # Under autocast the forward product took its inputs in the autocast type, which is the gradient's.
        grad_q = torch.matmul(grad, k.to(grad.dtype)) if ctx.needs_input_grad[0] else None
        grad_k = torch.matmul(grad.transpose(-1, -2), q.to(grad.dtype)) if ctx.needs_input_grad[1] else None
        return (None if grad_q is None else grad_q.to(q.dtype)), (None if grad_k is None else grad_k.to(k.dtype))


def _fused_attention(q, k, v, scale, bias, future, hidden, causal: bool) -> torch.Tensor:
    """PyTorch's fused attention. Its fast kernels take 4-d inputs and no mask (or ``is_causal``), or they fall
    back to its slow reference path: flatten the leading axes, and name the plain causal case. No branch reads
    tensor data (a torch.equal, a mask's .any()): on a GPU that would wait for the device (the device check of
    2026-12-04 found such waits), and a compiled graph would break here."""
    lead = q.shape[:-3]
    q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (q, k, v))
    if bias is None and hidden is None and future is None:
        out = _sdpa(q, k, v, None, scale, is_causal=causal)
        return out.reshape(*lead, *out.shape[-3:])
    if causal:  # by index, with a mask as well: the same blocked keys as a mask
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    mask = None
    for blocked in (future, hidden):
        if blocked is not None:
            part = torch.zeros(blocked.shape, dtype=q.dtype, device=q.device).masked_fill(blocked, float("-inf"))
            mask = part if mask is None else mask + part
    if bias is not None:
        mask = bias if mask is None else mask + bias
    members = lead[0] if len(lead) > 1 else 1
    if mask.dim() <= 3 or members == 1 or mask.shape[-4] == 1 and (mask.dim() == 4 or mask.shape[0] == 1):
        # One mask for every member (the batch axis, if any, broadcasts as the flattened queries').
        out = _sdpa(q, k, v, mask.reshape(-1, *mask.shape[-3:]) if mask.dim() > 4 else mask, scale)
    elif mask.dim() > 4 and mask.shape[1] == lead[1] and mask.shape[0] == members:
        # A mask per member and sample (a key mask): it flattens as the queries do, without a copy.
        out = _sdpa(q, k, v, mask.reshape(-1, *mask.shape[-3:]), scale)
    else:
        # A mask per member, not per sample (a learned bias): one call per member, its mask broadcast over the
        # batch rather than copied for every sample (a compiled step holds the calls in one graph).
        q, k, v = (t.view(members, -1, *t.shape[-3:]) for t in (q, k, v))
        mask = mask.reshape(-1, *mask.shape[-4:]) if mask.dim() > 4 else mask[None]
        out = torch.stack([_sdpa(q[m], k[m], v[m], mask[m if len(mask) > 1 else 0], scale) for m in range(members)])
    return out.reshape(*lead, *out.shape[-3:])


def _sdpa(q, k, v, mask, scale, is_causal: bool = False) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, on a CPU in the form its flash kernel runs fastest.

    On a CPU (torch 2.13) the flash kernel's backward in bf16 took 4-9x its float32 time (paper B's 128-position
    attention, 64 x 16 heads: 250-340 against 60-65 ms a layer, forward and backward, on a Xeon with AMX), so
    lower precisions attend in float32, outside autocast, and round the result back. Queries and keys wider than
    the values (MLA's [content; rope] keys) would take the math path, which materialises the pattern: the values
    are padded with zeros to the keys' width and the padding's outputs dropped (at float32 100 against 175-205 ms).
    The result has the dtype autocast would give it. Elsewhere the call is unchanged.
    """
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    dtype = _cpu_compute_dtype(v)
    width = v.shape[-1]
    if width < q.shape[-1]:
        v = F.pad(v, (0, q.shape[-1] - width))
    with torch.autocast("cpu", enabled=False):
        q, k, v = (t.float() for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.float(), is_causal=is_causal, scale=scale)
    return out[..., :width].to(dtype)


def _cpu_compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype a product of ``t`` takes on a CPU: autocast's lower precision where CPU autocast is on, else ``t``'s."""
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else t.dtype


def with_member_axis(ids: torch.Tensor, members: int) -> tuple[torch.Tensor, bool]:
    """``ids`` as (members, batch, T), and whether they came so: (batch, T) is taken for a one-member model."""
    if ids.dim() == 3:
        return ids, True
    if members != 1:
        raise ValueError(f"a model of {members} members needs ids of shape (members, batch, T)")
    return ids[None], False


def embed_members(wte: torch.Tensor, position, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Each member's token embeddings (wte (S, V, D), ids (S, B, T)) plus the scheme's additive position
    embedding, where it has one."""
    members, vocab = wte.shape[0], wte.shape[1]
    if members == 1:
        x = F.embedding(ids[0], wte[0])[None]
    else:  # one lookup in the members' stacked tables: member m's ids offset by m · V
        offsets = torch.arange(members, device=ids.device).view(-1, *([1] * (ids.dim() - 1))) * vocab
        x = F.embedding(ids + offsets, wte.reshape(members * vocab, -1))
    absolute = position.embedding(positions)
    return x if absolute is None else x + absolute


# --------------------------------------------------------------------------- dropout


def relu(x: torch.Tensor) -> torch.Tensor:
    """F.relu, whose gradient in a compiled step is the incoming one times the output's sign: autograd's is gated by
    a boolean mask that a compiled graph saves, and inductor's C++ kernels write and read boolean tensors made by
    floating-point comparisons about ten times slower than eager PyTorch does (4 M values: 16 ms against 1.8 ms,
    torch 2.13, Intel Xeon with AMX, 2026-12-07). Paper B's compiled bf16 encoder step was 0.87-0.91 s against
    1.02-1.04 s with this alone (and 0.66-0.67 s with :class:`MemberDropout`'s masks also kept out of booleans)."""
    return _SignGatedRelu.apply(x) if torch.compiler.is_compiling() else F.relu(x)


class _SignGatedRelu(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return grad * out.sign()  # 1 where the input was positive, 0 elsewhere (as F.relu's, 0 at 0)


class MemberDropout:
    """Dropout whose masks come from one generator per packed member.

    Masks are drawn as 16-bit uniform integers (four per 64-bit word, about six times cheaper
    than ``bernoulli_`` on CPU), so the drop probability is p rounded to a multiple of 1/65536
    (0.1 → 0.1000061); kept values are scaled by the exact 1/(1-p) of that rounded p. Each call takes
    ⌈n/4⌉ words per member for a tensor of n elements per member.

    On a GPU the words are drawn from the member's generator on the device. On a CPU each call's words are a stream
    of their own, numpy's PCG64DXSM seeded by one word of the member's generator: torch's CPU generator
    (Mersenne Twister) gives a 64-bit word in about 4 ns on one thread, 10 ms of paper A's 0.15 s compiled bf16 step;
    the seeded streams give it in under 2 ns, and a step's calls are drawn on all of torch's threads (measured
    2026-12-07, Intel Xeon with AMX).
    """

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators

    def __call__(self, x: torch.Tensor, p: float) -> torch.Tensor:
        if p <= 0.0:
            return x
        threshold = round(p * 65536)
        keep_scale = 65536.0 / (65536 - threshold)
        per_member = x[0].numel()
        kept_from = threshold - 32768  # the least 16-bit value whose element is kept
        bits = self.bits(per_member, x.device).reshape(x.shape)
        if torch.compiler.is_compiling():  # the same 0/1 without a boolean tensor (see :func:`relu`)
            keep = (bits.to(torch.int32) - (kept_from - 1)).clamp_(0, 1)
        else:
            keep = bits >= kept_from
        return x * keep.to(x.dtype).mul_(keep_scale)

    def bits(self, n: int, device: torch.device) -> torch.Tensor:
        """n uniform 16-bit integers per member, (members, n), from ⌈n/4⌉ words of each member's generator."""
        return self.draw_bits([dropout_words(n)], device, widened=False)[:, :n]

    def draw_bits(self, calls: list[int], device: torch.device, *, widened: bool | None = None) -> torch.Tensor:
        """The 16-bit values of calls taking ``calls[i]`` words each (four values a word), in call order:
        (members, 4 · sum(calls)). ``widened`` (the default on a CPU) holds them as int32, which a compiled step reads
        in vector code: inductor's C++ kernels do not vectorise int16 tensors (paper B's compiled bf16 encoder step
        0.62–0.63 s against 0.69 s, widened outside the step; torch 2.13, Intel Xeon with AMX, 2026-12-07)."""
        widened = device.type == "cpu" if widened is None else widened
        if device.type != "cpu":
            draws = torch.empty(len(self.generators), sum(calls), dtype=torch.int64, device=device)
            for m, generator in enumerate(self.generators):
                torch.randint(-(2**63), 2**63 - 1, draws[m].shape, generator=generator, out=draws[m])
            return draws.view(torch.int16).to(torch.int32) if widened else draws.view(torch.int16)
        seeds = [torch.randint(0, 2**63 - 1, (len(calls),), generator=g).tolist() for g in self.generators]
        values = np.empty((len(self.generators), 4 * sum(calls)), dtype=np.int32 if widened else np.int16)
        offsets = (4 * np.cumsum([0, *calls])).tolist()
        streams = [(m, c) for m in range(len(self.generators)) for c in range(len(calls)) if calls[c]]

        def fill(part: list[tuple[int, int]]) -> None:
            for m, c in part:
                words = np.random.PCG64DXSM(seeds[m][c]).random_raw(calls[c])
                values[m, offsets[c] : offsets[c + 1]] = words.view(np.int16)

        _in_parallel(fill, streams, [calls[c] for _, c in streams])
        return torch.from_numpy(values)


def dropout_words(n: int) -> int:
    """The 64-bit words a :class:`MemberDropout` call takes for n elements per member."""
    return (n + 3) // 4


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="posym-dropout")


def _in_parallel(work: Callable[[list], None], items: list, costs: list[int]) -> None:
    """``work`` on ``items`` split into contiguous parts of about equal cost, one per torch thread (numpy's
    generators release the GIL while they fill)."""
    threads = min(torch.get_num_threads(), len(items))
    if threads <= 1:
        return work(items)
    bounds = np.searchsorted(np.cumsum(costs), [sum(costs) * k / threads for k in range(1, threads)], side="right").tolist()
    parts = [items[i:j] for i, j in zip([0, *bounds], [*bounds, len(items)]) if j > i]
    for future in [_pool(threads).submit(work, part) for part in parts]:
        future.result()


class DrawnDropout(MemberDropout):
    """:class:`MemberDropout` reading its 16-bit values from a block drawn before the step
    (:meth:`MemberDropout.draw_bits` of :attr:`CountingDropout.calls`), in call order, each call starting at a whole
    word: a compiled step cannot call a generator, so its masks come in as an input. On a CPU the masks are those of
    the calls drawn one by one (each call's stream is seeded by the next word of the member's generator, whether
    drawn alone or in a step's block)."""

    def __init__(self, drawn: torch.Tensor):
        self.drawn, self.used = drawn, 0

    def bits(self, n: int, device: torch.device) -> torch.Tensor:
        start, self.used = self.used, self.used + 4 * dropout_words(n)
        return self.drawn[:, start : start + n]


class CountingDropout(MemberDropout):
    """Drops nothing and lists the words each call of a :class:`MemberDropout` would take for the same calls."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, x: torch.Tensor, p: float) -> torch.Tensor:
        if p > 0.0:
            self.calls.append(dropout_words(x[0].numel()))
        return x


# --------------------------------------------------------------------------- model


def stacked(members: int, *shape: int) -> nn.Parameter:
    """A parameter of ``shape`` per member, uninitialised: (members, *shape)."""
    return nn.Parameter(torch.empty(members, *shape))


def config_from_settings(config_class, settings: Mapping, **fixed):
    """A model's config dataclass from a study's ``model`` settings and the values the caller fixes (the
    vocabulary size); a setting the class does not have is an error that names it."""
    unknown = set(settings) - (set(config_class.__dataclass_fields__) - set(fixed))
    if unknown:
        raise ValueError(f"unknown model settings: {sorted(unknown)}")
    return config_class(**fixed, **settings)


def normal_initialise(model: nn.Module, seeds: list[int], std: float, scheme: nn.Module | None = None) -> None:
    """GPT-style initialisation of a packed model, one generator per member (so a member's weights do not depend
    on its pack): biases 0, LayerNorm gains (parameters named ``ln…``) 1, every other weight N(0, std²), drawn in
    parameter order. With ``scheme``, the position scheme's own parameters are left to it: it draws them after
    the member's other weights (``initialise_member``)."""
    if len(seeds) != model.members:
        raise ValueError(f"need one seed per member ({model.members}), got {seeds}")
    own = {id(p) for p in scheme.parameters()} if scheme is not None else set()
    with torch.no_grad():
        for m, seed in enumerate(seeds):
            generator = torch.Generator().manual_seed(seed)
            for name, param in model.named_parameters():
                if id(param) in own:
                    continue
                leaf, target = name.rsplit(".", 1)[-1], param[m]
                if leaf.endswith("bias"):
                    target.zero_()
                elif leaf.startswith("ln"):
                    target.fill_(1.0)
                else:
                    target.copy_(torch.randn(target.shape, generator=generator) * std)
            if scheme is not None:
                scheme.initialise_member(m, generator)


def unembed(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The final LayerNorm and the unembedding of each member: x (S, …, D), gains and biases (S, D), weight (S, V, D),
    bias (S, V); logits (S, …, V)."""
    normed = F.layer_norm(x, (x.shape[-1],), eps=eps)
    shape = (-1,) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    normed = torch.addcmul(ln_bias.view(shape), normed, ln_weight.view(shape))
    flat = normed.reshape(normed.shape[0], -1, normed.shape[-1])
    logits = torch.baddbmm(bias[:, None], flat, weight.transpose(1, 2))
    return logits.view(*normed.shape[:-1], -1)


class PackedByName(nn.Module):
    """A packed model whose checkpoint tensors are its own parameters by name, member m's slice of each: the
    checkpoint, member and cache methods of the architecture interface (:mod:`posym.nn.architectures`) for a study's
    own model (paper B's encoder, paper C's toy model). A subclass takes ``(config, members)``, keeps them as
    ``config`` and ``members``, and reads hooks from ``forward(ids, hooks=...)``."""

    def checkpoint_tensors(self, m: int = 0) -> dict[str, torch.Tensor]:
        return {name: param[m].detach().clone().contiguous().cpu() for name, param in self.named_parameters()}

    def load_checkpoint_tensors(self, state: Mapping[str, torch.Tensor], m: int = 0) -> None:
        params = dict(self.named_parameters())
        if set(state) != set(params):
            raise ValueError(f"checkpoint tensors differ from the model's: missing {sorted(set(params) - set(state))}, unexpected {sorted(set(state) - set(params))}")
        with torch.no_grad():
            for name, param in params.items():
                if state[name].shape != param.shape[1:]:
                    raise ValueError(f"{name}: checkpoint shape {tuple(state[name].shape)}, model {tuple(param.shape[1:])}")
                param[m].copy_(state[name])

    def member(self, m: int) -> "PackedByName":
        """A single-member copy of member m, on the same device."""
        single = type(self)(self.config, members=1)
        single.load_checkpoint_tensors(self.checkpoint_tensors(m))
        return single.to(next(self.parameters()).device)

    @torch.no_grad()
    def run_with_cache(self, ids: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
        """Forward pass returning the tensors at the named hook points (member axis kept)."""
        cache: dict[str, torch.Tensor] = {}
        self(ids, hooks={n: (lambda t, n=n: cache.__setitem__(n, t.detach())) for n in names})
        missing = set(names) - set(cache)
        if missing:
            raise KeyError(f"no such hook points: {sorted(missing)}")
        return cache


def layer_hook(hooks: Mapping[str, Hook] | None, layer: int):
    """Adapt the user's {full name: fn} hooks to the names seen inside block ``layer``."""
    if not hooks:
        return None
    prefix = f"blocks.{layer}."
    local = {name[len(prefix) :]: fn for name, fn in hooks.items() if name.startswith(prefix)}
    if not local:
        return None

    def apply(name: str, tensor: torch.Tensor) -> torch.Tensor:
        fn = local.get(name) or local.get(f"attn.{name}")
        if fn is None:
            return tensor
        result = fn(tensor)
        return tensor if result is None else result

    # Attention materialises its logits and pattern only for hooks that read them.
    apply.needs_pattern = any(name.split(".")[-1] in ("hook_attn_scores", "hook_pattern") for name in local)
    return apply


#: The hook points of block ``l`` are ``blocks.<l>.<name>``; shapes keep posym's member axis first:
#: q/k/z (members, batch, heads, positions, d_head), scores and pattern (members, batch, heads, query, key).
HOOK_POINTS = (
    "hook_resid_pre",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_rot_q",
    "attn.hook_rot_k",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_resid_post",
)
