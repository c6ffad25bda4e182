"""Paper B's encoder (spec §B3) against the authors' code: each position scheme against its formula in
``trans.py`` / ``partialrope.py`` / ``mla.py``, the whole model against plain transcriptions of the authors'
``TransformerDecoder`` and ``MLATransformerDecoder`` (weights copied over), packed members, PyTorch's default
initialisation, checkpoints, config errors, the padding mask and the per-head V ablation of §B4.

Everything the authors' code computes is written out again here, from their source, without calling
posym's helpers: a shared mistake cannot cancel out.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from posym.nn import positions as schemes
from posym.studies.b.architecture import Encoder, model_config

VOCAB, D, H, DH, D_MLP, MAX_LEN, LATENT = 50, 64, 4, 16, 64, 32, 32
SMALL = dict(
    n_layer=2, n_head=H, d_model=D, d_mlp=D_MLP, max_len=MAX_LEN, position="nope", rope_base=10000.0,
    rope_heads=None, dropout=0.1, layer_norm_epsilon=1e-5, attention="standard", kv_source="embeddings",
    padding_mask=False, attention_scale=None, activation="relu", final_layer_norm=False,
    learned_position_std=1.0, mla_latent=LATENT, mla_rope="authors",
)  # fmt: skip
#: Paper B's MLA model (mla.py): zero-initialised learned positions, GELU, final LayerNorm, padding mask, K/V from LN(x).
MLA = dict(
    attention="mla", position="learned", learned_position_std=0.0, padding_mask=True, activation="gelu",
    final_layer_norm=True, kv_source="residual", mla_rope="authors",
)  # fmt: skip
T = 24  # shorter than MAX_LEN, so that offsets into the tables are exercised off their ends


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(**overrides):
    return model_config(VOCAB, {**SMALL, **overrides})


def ids_for(seed=0, batch=3, length=T, low=0):
    return torch.randint(low, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def right_padded(seed=0, lengths=(T, 17, 9)):
    """Rows of words (ids ≥ 1) followed by padding id 0."""
    ids = ids_for(seed, len(lengths), T, low=1)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    return ids


def model(members=1, seeds=None, perturb=True, **overrides):
    """An initialised encoder; with ``perturb`` the constant-initialised LayerNorms get noise and the position
    tables unit scale, so that a swapped or ignored weight changes the logits."""
    encoder = Encoder(config(**overrides), members).initialise(seeds or list(range(3, 3 + members)))
    if perturb:
        generator = torch.Generator().manual_seed(99)
        with torch.no_grad():
            for name, p in encoder.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("ln"):
                    p.add_(0.2 * torch.randn(p.shape, generator=generator))
                elif name.endswith("position.table"):
                    p.copy_(torch.randn(p.shape, generator=generator))
    return encoder.eval()


# ------------------------------------------------------------------ the authors' position code, transcribed


def authors_absolute(max_len, d_model):
    """trans.py AbsolutePositionalEncoding.encoding."""
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * -(torch.log(torch.tensor(10000.0)) / d_model))
    encoding = torch.zeros(max_len, d_model)
    encoding[:, 0::2] = torch.sin(position * div_term)
    encoding[:, 1::2] = torch.cos(position * div_term)
    return encoding


def authors_inv_freq(d):
    """trans.py RoPE.inv_freq."""
    return 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float) / d))


def authors_rope_encoding(seq_len, d_model):
    """trans.py RoPE.forward (the additive part of paper B's "rope"): concat[sin, cos], (L, d_model)."""
    positions = torch.arange(seq_len, dtype=torch.float)
    sinusoidal_pos = torch.einsum("i,j->ij", positions, authors_inv_freq(d_model))
    return torch.cat([torch.sin(sinusoidal_pos), torch.cos(sinusoidal_pos)], dim=-1)


def authors_apply_rope(tensor):
    """trans.py RoPE.apply_rope on (N, L, head_dim): interleaved pairs rotated by position · inv_freq."""
    n, seq_len, d = tensor.size()
    positions = torch.arange(seq_len, dtype=torch.float)
    angles = positions[:, None] * authors_inv_freq(d)[None, :]
    sin, cos = torch.sin(angles), torch.cos(angles)
    tensor = tensor.reshape(n, seq_len, d // 2, 2)
    rotated = torch.stack([tensor[..., 0] * cos - tensor[..., 1] * sin, tensor[..., 0] * sin + tensor[..., 1] * cos], dim=-1)
    return rotated.view(n, seq_len, d)


def rope_heads_of(x):
    """authors_apply_rope on every head of x (..., H, L, dh)."""
    return authors_apply_rope(x.reshape(-1, *x.shape[-2:])).view(x.shape)


def authors_partial_rope(x, k, max_len=MAX_LEN):
    """partialrope.py RoPE.forward on (B, H, L, D): the first k heads rotated."""
    B, Hs, L, Dh = x.shape
    half = Dh // 2
    inv_freq = 1.0 / (10000 ** (torch.arange(0, half, dtype=torch.float) / half))
    angle = torch.arange(max_len, dtype=torch.float).unsqueeze(1) * inv_freq.unsqueeze(0)
    cos, sin = torch.zeros(max_len, Dh), torch.zeros(max_len, Dh)
    cos[:, 0::2], cos[:, 1::2] = torch.cos(angle), torch.cos(angle)
    sin[:, 0::2], sin[:, 1::2] = torch.sin(angle), torch.sin(angle)
    x_flat = x[:, :k].reshape(-1, L, Dh)
    cos, sin = cos[:L].unsqueeze(0), sin[:L].unsqueeze(0)
    x1, x2 = x_flat[..., 0::2], x_flat[..., 1::2]
    out = torch.empty_like(x_flat)
    out[..., 0::2] = x1 * cos[..., 0::2] - x2 * sin[..., 0::2]
    out[..., 1::2] = x1 * sin[..., 0::2] + x2 * cos[..., 0::2]
    out = out.view(B, k, L, Dh)
    return torch.cat([out, x[:, k:]], dim=1) if k < Hs else out


def authors_alibi(seq_len, num_heads):
    """trans.py AttentionDecoderLayer.compute_alibi_bias: (H, L, L)."""
    m = torch.exp(-torch.arange(0, num_heads).float() / num_heads)
    positions = torch.arange(seq_len).unsqueeze(0) - torch.arange(seq_len).unsqueeze(1)
    return -torch.abs(positions).unsqueeze(0) * m.unsqueeze(1).unsqueeze(1)


def authors_mla_rope(x, pos, d_head, max_len=4096, base=10000):
    """mla.py RotaryEmbedding(d_head, max_len).forward(x, pos)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2).float() / d_head))
    t = torch.arange(max_len, dtype=torch.float32)
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    table = torch.cat([freqs.sin(), freqs.cos()], dim=-1)
    rope = table.index_select(0, pos)
    while rope.dim() < x.dim():
        rope = rope.unsqueeze(0)
    x_even, x_odd = x[..., ::2], x[..., 1::2]
    sin, cos = rope[..., ::2], rope[..., 1::2]
    return torch.cat([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], dim=-1)


def interleaved_rotation(x, pos, d_head, base=10000.0):
    """A true RoPE rotation of x (..., L, d_head) at positions pos: pair (2k, 2k+1) turned by pos · base^(−2k/d)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2).float() / d_head))
    angles = pos.float()[:, None] * inv_freq[None, :]
    sin, cos = angles.sin(), angles.cos()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


# ------------------------------------------------------------------ 1. position schemes against their formulas


def test_scheme_flags_match_the_paper_b_variants():
    flags = {name: (cls.embeds, cls.attends) for name, cls in schemes.POSITION_SCHEMES.items()}
    assert flags["nope"] == (False, False)
    assert flags["sinusoidal"] == (True, False) and flags["learned"] == (True, False)
    assert flags["t5"] == (False, True) and flags["alibi_symmetric"] == (False, True)
    assert flags["rope_sinusoid"] == (True, True)  # paper B's "rope" also adds concat[sin, cos] to the input
    assert flags["partial_rope"] == (False, True)  # partialrope.py adds no input encoding
    assert schemes.POSITION_SCHEMES["rope_sinusoid"].rotary and not schemes.AuthorsMlaRope.rotary


def test_sinusoidal_is_trans_py_absolute_encoding():
    scheme = schemes.build(config(position="sinusoidal"))
    expected = authors_absolute(MAX_LEN, D)
    assert torch.allclose(scheme.embedding(torch.arange(MAX_LEN)), expected, atol=1e-6, rtol=0)
    # sin on even dims, cos on odd, base 10000, spelled out for one entry
    assert torch.allclose(scheme.embedding(torch.tensor([7]))[0, 2 * 5], torch.tensor(math.sin(7 * 10000 ** (-10 / D))), atol=1e-6)
    assert torch.allclose(scheme.embedding(torch.tensor([7]))[0, 2 * 5 + 1], torch.tensor(math.cos(7 * 10000 ** (-10 / D))), atol=1e-6)
    arbitrary = torch.tensor([5, 3, 30, 0])
    assert torch.allclose(scheme.embedding(arbitrary), expected[arbitrary], atol=1e-6, rtol=0)


def test_rope_sinusoid_embedding_is_trans_py_rope_forward_over_d_model():
    scheme = schemes.build(config(position="rope_sinusoid"))
    expected = authors_rope_encoding(MAX_LEN, D)
    assert torch.allclose(scheme.embedding(torch.arange(MAX_LEN)), expected, atol=1e-5, rtol=0)
    first, middle = scheme.embedding(torch.tensor([3]))[0, 0], scheme.embedding(torch.tensor([3]))[0, D // 2]
    assert math.isclose(first.item(), math.sin(3), abs_tol=1e-6) and math.isclose(middle.item(), math.cos(3), abs_tol=1e-6)


def test_rope_sinusoid_rotation_is_trans_py_apply_rope_per_head():
    scheme = schemes.build(config(position="rope_sinusoid"))
    x = torch.randn(2, 3, H, T, DH, generator=torch.Generator().manual_seed(1))
    rotated = scheme.rotate(x, torch.arange(T))
    assert torch.allclose(rotated, rope_heads_of(x), atol=1e-5, rtol=0)
    assert not torch.allclose(rotated, x, atol=1e-3)


def test_learned_is_a_table_lookup_per_member():
    scheme = schemes.build(config(position="learned"), members=2)
    with torch.no_grad():
        scheme.table.copy_(torch.randn(scheme.table.shape))
    positions = torch.tensor([4, 0, 31, 4])
    out = scheme.embedding(positions)
    assert out.shape == (2, 1, 4, D)
    for m in range(2):
        for t, p in enumerate(positions.tolist()):
            assert torch.equal(out[m, 0, t], scheme.table[m, p])


def test_t5_bias_indexes_trans_py_relative_bias_table():
    scheme = schemes.build(config(position="t5"), members=2)
    with torch.no_grad():
        scheme.table.copy_(torch.randn(scheme.table.shape))
    assert scheme.table.shape == (2, 2 * MAX_LEN - 1, H)
    bias = scheme.score_bias(torch.arange(T), torch.arange(T))
    assert bias.shape == (2, 1, H, T, T)
    for m in range(2):
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    assert bias[m, 0, h, i, j] == scheme.table[m, j - i + MAX_LEN - 1, h]
    # trans.py's own indexing: rel_pos = arange[None] - arange[:, None] + max_len - 1; table[rel_pos].permute(2, 0, 1)
    rel_pos = torch.arange(T).unsqueeze(0) - torch.arange(T).unsqueeze(1) + MAX_LEN - 1
    assert torch.equal(bias[1, 0], scheme.table[1][rel_pos].permute(2, 0, 1))


def test_alibi_symmetric_slopes_and_bias():
    scheme = schemes.build(config(position="alibi_symmetric"))
    expected_slopes = torch.tensor([math.exp(-h / H) for h in range(H)])
    assert torch.allclose(scheme.slopes, expected_slopes, atol=1e-7, rtol=0)
    assert scheme.slopes[0] == 1.0  # h counts from 0: the first head has slope exp(0)
    bias = scheme.score_bias(torch.arange(T), torch.arange(T))
    assert bias.shape == (H, T, T)
    for h in range(H):
        for i, j in [(0, 0), (0, 5), (5, 0), (3, 17), (23, 1)]:
            assert math.isclose(bias[h, i, j].item(), -math.exp(-h / H) * abs(i - j), rel_tol=1e-6, abs_tol=1e-7)
    assert torch.equal(bias, bias.transpose(-1, -2))
    assert torch.allclose(bias, authors_alibi(T, H), atol=1e-6, rtol=0)


@pytest.mark.parametrize("k", [0, 1, 2, H])
def test_partial_rope_rotates_the_first_k_heads_only(k):
    scheme = schemes.build(config(position="partial_rope", rope_heads=k))
    x = torch.randn(2, 3, H, T, DH, generator=torch.Generator().manual_seed(k))
    out = scheme.rotate(x, torch.arange(T))
    assert torch.allclose(out[..., :k, :, :], rope_heads_of(x[..., :k, :, :]), atol=1e-5, rtol=0)
    assert torch.equal(out[..., k:, :, :], x[..., k:, :, :])  # bit-identical
    assert torch.allclose(out, authors_partial_rope(x.reshape(-1, H, T, DH), k).view(x.shape), atol=1e-5, rtol=0)
    if k == 0:
        assert torch.equal(out, x)
    if k == H:
        assert torch.allclose(out, schemes.Rope(DH, DH).rotate(x, torch.arange(T)), atol=1e-6, rtol=0)
    if k > 0:
        assert not torch.allclose(out[..., :k, 1:, :], x[..., :k, 1:, :], atol=1e-3)


def test_authors_mla_rope_is_mla_py_rotary_embedding():
    rope = schemes.AuthorsMlaRope(DH, 10000.0)
    x = torch.randn(2, 3, T, DH, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(T)
    assert torch.allclose(rope.rotate(x, positions), authors_mla_rope(x, positions, DH), atol=1e-6, rtol=0)
    arbitrary = torch.tensor([9, 2, 2, 0, 31])
    x = x[..., : len(arbitrary), :]
    assert torch.allclose(rope.rotate(x, arbitrary), authors_mla_rope(x, arbitrary, DH), atol=1e-6, rtol=0)


def test_standard_rope_preserves_norms_and_the_authors_mla_rope_does_not():
    x = torch.randn(500, T, DH, generator=torch.Generator().manual_seed(3))
    positions = torch.arange(T)
    rope = schemes.Rope(DH, DH).rotate(x, positions)
    assert torch.allclose(rope.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-6)
    assert torch.allclose(rope[:, 0], x[:, 0])  # position 0 is the identity
    authors = schemes.AuthorsMlaRope(DH).rotate(x, positions)
    ratio = authors.norm(dim=-1) / x.norm(dim=-1)
    assert (ratio - 1).abs().max() > 0.2  # not an isometry
    # at position 0, pairs k < d/4 read sin(0) as both their "sin" and their "cos": outputs k and d/2 + k vanish
    quarter = DH // 4
    assert torch.equal(authors[:, 0, :quarter], torch.zeros(500, quarter))
    assert torch.equal(authors[:, 0, DH // 2 : DH // 2 + quarter], torch.zeros(500, quarter))


# ------------------------------------------------------------------ 2. the whole model against the authors' code


class AuthorsLayer(nn.Module):
    """trans.py AttentionDecoderLayer (``pe`` its position_encoding_type; "partial" is partialrope.py's layer)."""

    def __init__(self, pe, k_rope_heads=None):
        super().__init__()
        self.pe, self.k_rope_heads = pe, k_rope_heads
        self.q_linear, self.k_linear, self.v_linear, self.out_linear = (nn.Linear(D, D) for _ in range(4))
        if pe == "relative":
            self.relative_bias_table = nn.Parameter(torch.zeros(2 * MAX_LEN - 1, H))
        self.ffn = nn.Sequential(nn.Linear(D, D_MLP), nn.ReLU(), nn.Linear(D_MLP, D))
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x, memory):
        B, L, _ = x.shape
        q = self.q_linear(self.norm1(x)).view(B, L, H, DH).transpose(1, 2)
        k = self.k_linear(memory).view(B, L, H, DH).transpose(1, 2)
        v = self.v_linear(memory).view(B, L, H, DH).transpose(1, 2)
        if self.pe == "rope":
            q = authors_apply_rope(q.reshape(B * H, L, DH)).view(B, H, L, DH)
            k = authors_apply_rope(k.reshape(B * H, L, DH)).view(B, H, L, DH)
        elif self.pe == "partial":
            q, k = authors_partial_rope(q, self.k_rope_heads), authors_partial_rope(k, self.k_rope_heads)
        q = q * (1.0 / (DH**0.5))
        scores = torch.matmul(q, k.transpose(-2, -1))
        if self.pe == "alibi":
            scores = scores + authors_alibi(L, H).unsqueeze(0)
        elif self.pe == "relative":
            rel_pos = torch.arange(L).unsqueeze(0) - torch.arange(L).unsqueeze(1) + MAX_LEN - 1
            scores = scores + self.relative_bias_table[rel_pos].permute(2, 0, 1).unsqueeze(0)
        out = torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(B, L, D)
        x = x + self.out_linear(out)
        return x + self.ffn(self.norm2(x))


class AuthorsModel(nn.Module):
    """trans.py TransformerDecoder called as model(ids, memory=ids) (partialrope.py's for "partial")."""

    def __init__(self, pe, n_layer=2, k_rope_heads=None):
        super().__init__()
        self.pe = pe
        self.embedding = nn.Embedding(VOCAB, D)
        if pe == "random":
            self.position_embeddings = nn.Embedding(MAX_LEN, D)
        self.layers = nn.ModuleList(AuthorsLayer(pe, k_rope_heads) for _ in range(n_layer))
        self.fc_out = nn.Linear(D, VOCAB)

    def position_encoding(self, ids):
        B, L = ids.shape
        if self.pe == "absolute":
            return authors_absolute(MAX_LEN, D)[:L].unsqueeze(0)
        if self.pe == "random":
            return self.position_embeddings(torch.arange(L).unsqueeze(0).expand(B, L))
        if self.pe == "rope":
            return authors_rope_encoding(L, D).unsqueeze(0).expand(B, -1, -1)
        return torch.zeros(B, L, D)  # nope, alibi, relative

    def forward(self, ids):
        if self.pe == "partial":
            tgt = memory = self.embedding(ids)
        else:
            tgt = self.embedding(ids) if self.pe == "nope" else self.embedding(ids) + self.position_encoding(ids)
            memory = self.embedding(ids) + self.position_encoding(ids)
        x = tgt
        for layer in self.layers:
            x = layer(x, memory)
        return self.fc_out(x.mean(dim=1))


class Loader:
    """Copies our member-0 tensors into a reference module and checks that every one of them was used."""

    def __init__(self, encoder):
        self.state, self.used = encoder.checkpoint_tensors(0), set()

    def __call__(self, name):
        self.used.add(name)
        return self.state[name]

    def linear(self, module, prefix, bias=True):
        module.weight.copy_(self(f"{prefix}_weight"))
        if bias:
            module.bias.copy_(self(f"{prefix}_bias"))

    def norm(self, module, prefix):
        module.weight.copy_(self(f"{prefix}_weight"))
        module.bias.copy_(self(f"{prefix}_bias"))

    def done(self):
        assert self.used == set(self.state), f"tensors not copied into the reference: {sorted(set(self.state) - self.used)}"


def authors_copy(encoder, pe, k_rope_heads=None):
    ref = AuthorsModel(pe, encoder.config.n_layer, k_rope_heads).eval()
    load = Loader(encoder)
    with torch.no_grad():
        ref.embedding.weight.copy_(load("wte"))
        load.linear(ref.fc_out, "unembed")
        if pe == "random":
            ref.position_embeddings.weight.copy_(load("position.table"))
        for n, layer in enumerate(ref.layers):
            p = f"blocks.{n}."
            load.norm(layer.norm1, p + "ln1")
            load.norm(layer.norm2, p + "ln2")
            load.linear(layer.q_linear, p + "q")
            k_weight, v_weight = load(p + "kv_weight").split(D)
            k_bias, v_bias = load(p + "kv_bias").split(D)
            layer.k_linear.weight.copy_(k_weight), layer.k_linear.bias.copy_(k_bias)
            layer.v_linear.weight.copy_(v_weight), layer.v_linear.bias.copy_(v_bias)
            load.linear(layer.out_linear, p + "out")
            load.linear(layer.ffn[0], p + "fc1")
            load.linear(layer.ffn[2], p + "fc2")
            if pe == "relative":
                layer.relative_bias_table.copy_(load(p + "position.table"))
    load.done()
    return ref


AUTHORS_NAMES = {
    "nope": "nope", "sinusoidal": "absolute", "learned": "random", "t5": "relative",
    "alibi_symmetric": "alibi", "rope_sinusoid": "rope",
}  # fmt: skip


@pytest.mark.parametrize("position", list(AUTHORS_NAMES))
def test_encoder_equals_the_authors_trans_py_model(position):
    encoder = model(position=position)
    reference = authors_copy(encoder, AUTHORS_NAMES[position])
    ids = right_padded(seed=4)
    with torch.no_grad():
        ours, theirs = encoder(ids), reference(ids)
        explicit = encoder(ids, hooks={"blocks.0.attn.hook_pattern": lambda t: None})  # the materialised path
    assert ours.shape == (3, VOCAB)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours - theirs).abs().max()
    assert torch.allclose(explicit, theirs, atol=1e-5, rtol=0)


def test_the_reference_tells_position_schemes_apart():
    """The comparison above is not vacuous: a model's logits differ from the reference of another scheme."""
    encoder = model(position="rope_sinusoid")
    ids = right_padded(seed=4)
    with torch.no_grad():
        ours = encoder(ids)
        absolute_only = AuthorsModel("absolute")
        absolute_only.load_state_dict(authors_copy(encoder, "rope").state_dict())
        assert not torch.allclose(ours, absolute_only(ids), atol=1e-3)


@pytest.mark.parametrize("k", [0, 2, H])
def test_encoder_equals_the_authors_partialrope_py_model(k):
    encoder = model(position="partial_rope", rope_heads=k)
    reference = authors_copy(encoder, "partial", k_rope_heads=k)
    ids = right_padded(seed=5)
    with torch.no_grad():
        ours, theirs = encoder(ids), reference(ids)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours - theirs).abs().max()


class AuthorsMLAAttention(nn.Module):
    """mla.py MLAAttention (bias=False), with its rope function exchangeable."""

    def __init__(self, rope):
        super().__init__()
        self.rope = rope
        self.W_DKV, self.W_DQ = nn.Linear(D, LATENT, bias=False), nn.Linear(D, LATENT, bias=False)
        self.W_UK, self.W_UV, self.W_UQ = (nn.Linear(LATENT, H * DH, bias=False) for _ in range(3))
        self.W_KR, self.W_QR = nn.Linear(D, DH, bias=False), nn.Linear(LATENT, DH, bias=False)
        self.out_proj = nn.Linear(D, D, bias=False)

    def forward(self, x, attention_mask):
        B, L, _ = x.shape
        c_kv = self.W_DKV(x)
        k_c, v_c = self.W_UK(c_kv).view(B, L, H, DH), self.W_UV(c_kv).view(B, L, H, DH)
        pos = torch.arange(L)
        k_r = self.rope(self.W_KR(x), pos).unsqueeze(2).expand(-1, -1, H, -1)
        k = torch.cat([k_c, k_r], dim=-1)
        c_q = self.W_DQ(x)
        q_c = self.W_UQ(c_q).view(B, L, H, DH)
        q_r = self.rope(self.W_QR(c_q), pos).unsqueeze(2).expand(-1, -1, H, -1)
        q = torch.cat([q_c, q_r], dim=-1).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k.permute(0, 2, 3, 1)) / math.sqrt(2 * DH)
        scores = scores.masked_fill(attention_mask.unsqueeze(1).unsqueeze(2) == 0, float("-inf"))
        ctx = torch.matmul(F.softmax(scores, dim=-1), v_c.permute(0, 2, 1, 3))
        return self.out_proj(ctx.transpose(1, 2).contiguous().view(B, L, D))


class AuthorsMLAModel(nn.Module):
    """mla.py MLATransformerDecoder: learned pos_embed, pre-LN MLA layers with a GELU FFN, ln_f, masked mean pooling."""

    def __init__(self, rope, n_layer=2):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D)
        self.pos_embed = nn.Parameter(torch.zeros(1, MAX_LEN, D))
        self.layers = nn.ModuleList(
            nn.ModuleDict(dict(
                norm1=nn.LayerNorm(D), attn=AuthorsMLAAttention(rope), norm2=nn.LayerNorm(D),
                ffn=nn.Sequential(nn.Linear(D, D_MLP), nn.GELU(), nn.Dropout(0.1), nn.Linear(D_MLP, D), nn.Dropout(0.1)),
            ))
            for _ in range(n_layer)
        )  # fmt: skip
        self.ln_f, self.fc_out = nn.LayerNorm(D), nn.Linear(D, VOCAB)

    def forward(self, tgt, attention_mask):
        x = self.embedding(tgt) + self.pos_embed[:, : tgt.shape[1], :]
        for layer in self.layers:
            x = x + layer["attn"](layer["norm1"](x), attention_mask)
            x = x + layer["ffn"](layer["norm2"](x))
        x = self.ln_f(x)
        x = torch.sum(x * attention_mask.unsqueeze(-1), dim=1) / attention_mask.sum(dim=1, keepdim=True)
        return self.fc_out(x)


def authors_mla_copy(encoder, rope):
    ref = AuthorsMLAModel(rope, encoder.config.n_layer).eval()
    load = Loader(encoder)
    with torch.no_grad():
        ref.embedding.weight.copy_(load("wte"))
        ref.pos_embed.copy_(load("position.table")[None])
        load.norm(ref.ln_f, "ln_f")
        load.linear(ref.fc_out, "unembed")
        for n, layer in enumerate(ref.layers):
            p, attn = f"blocks.{n}.", layer["attn"]
            load.norm(layer["norm1"], p + "ln1")
            load.norm(layer["norm2"], p + "ln2")
            for theirs, ours in [
                ("W_DKV", "dkv"),
                ("W_DQ", "dq"),
                ("W_UK", "uk"),
                ("W_UV", "uv"),
                ("W_UQ", "uq"),
                ("W_KR", "kr"),
                ("W_QR", "qr"),
                ("out_proj", "out"),
            ]:
                load.linear(getattr(attn, theirs), p + ours, bias=False)
            load.linear(layer["ffn"][0], p + "fc1")
            load.linear(layer["ffn"][3], p + "fc2")
    load.done()
    return ref


@pytest.mark.parametrize(
    "mla_rope, rope",
    [("authors", lambda x, pos: authors_mla_rope(x, pos, DH, max_len=MAX_LEN)), ("standard", lambda x, pos: interleaved_rotation(x, pos, DH))],
    ids=["authors", "standard"],
)
def test_mla_encoder_equals_the_authors_mla_py_model(mla_rope, rope):
    encoder = model(**{**MLA, "mla_rope": mla_rope})  # perturb: the zero-initialised pos_embed gets unit entries
    reference = authors_mla_copy(encoder, rope)
    ids = right_padded(seed=6)
    with torch.no_grad():
        ours, theirs = encoder(ids), reference(ids, (ids != 0).long())
        explicit = encoder(ids, hooks={"blocks.1.attn.hook_attn_scores": lambda t: None})  # the materialised path
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours - theirs).abs().max()
    assert torch.allclose(explicit, theirs, atol=1e-5, rtol=0)
    # and the two ropes are different functions, so each comparison pins its own
    other = "standard" if mla_rope == "authors" else "authors"
    with torch.no_grad():
        assert not torch.allclose(model(**{**MLA, "mla_rope": other})(ids), ours, atol=1e-4)


# ------------------------------------------------------------------ 3. packed members


@pytest.mark.parametrize("overrides", [dict(position="t5"), dict(position="rope_sinusoid", kv_source="residual"), MLA], ids=["t5", "rope", "mla"])
def test_packed_members_equal_their_single_copies(overrides):
    packed = model(members=2, **overrides)
    ids = torch.stack([right_padded(seed=7), right_padded(seed=8, lengths=(20, T, 3))])
    with torch.no_grad():
        logits = packed(ids)
        assert logits.shape == (2, 3, VOCAB)
        for m in range(2):
            single = packed.member(m).eval()
            assert torch.allclose(logits[m], single(ids[m]), atol=1e-6, rtol=0)
        assert not torch.allclose(packed.member(0)(ids[1]), logits[1], atol=1e-3)  # the members differ


@pytest.mark.parametrize("overrides", [dict(position="t5"), dict(position="learned"), MLA], ids=["t5", "learned", "mla"])
def test_a_members_initial_weights_do_not_depend_on_the_other_seeds(overrides):
    first = Encoder(config(**overrides), 2).initialise([11, 5]).checkpoint_tensors(1)
    second = Encoder(config(**overrides), 2).initialise([12, 5]).checkpoint_tensors(1)
    alone = Encoder(config(**overrides), 1).initialise([5]).checkpoint_tensors(0)
    assert set(first) == set(second) == set(alone)
    for name in first:
        assert torch.equal(first[name], second[name]), name
        assert torch.equal(first[name], alone[name]), name
    other = Encoder(config(**overrides), 2).initialise([12, 5]).checkpoint_tensors(0)
    assert not torch.equal(other["wte"], first["wte"])


# ------------------------------------------------------------------ 4. PyTorch's default initialisation


def fan_in(name, d_model, d_mlp, latent):
    """nn.Linear's in_features for each of our weights (and their biases)."""
    prefix = name.rsplit(".", 1)[-1].rsplit("_", 1)[0]
    return {
        "q": d_model, "kv": d_model, "out": d_model, "fc1": d_model, "fc2": d_mlp, "unembed": d_model,
        "dkv": d_model, "dq": d_model, "kr": d_model, "uk": latent, "uv": latent, "uq": latent, "qr": latent,
    }[prefix]  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [dict(position="t5", max_len=128, d_mlp=128), dict(position="learned", learned_position_std=0.5, d_mlp=128), {**MLA, "d_mlp": 128, "mla_latent": 48}],
    ids=["t5", "learned", "mla"],
)
def test_initialisation_follows_pytorch_defaults(overrides):
    encoder = Encoder(config(**overrides), 1).initialise([0])
    c = encoder.config
    seen = set()
    for name, tensor in encoder.checkpoint_tensors(0).items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("ln"):
            assert torch.equal(tensor, torch.full_like(tensor, 1.0 if leaf.endswith("weight") else 0.0)), name
            seen.add("layer norm")
        elif name == "wte":  # nn.Embedding: N(0, 1)
            assert abs(tensor.mean()) < 0.05 and abs(tensor.std() - 1) < 0.05
            seen.add("embedding")
        elif name.endswith("position.table"):
            std = 0.02 if c.position == "t5" else c.learned_position_std
            if std == 0:
                assert torch.equal(tensor, torch.zeros_like(tensor))
            else:
                assert abs(tensor.std() / std - 1) < 0.1, (name, tensor.std())
            seen.add("table")
        else:  # nn.Linear: weight and bias U(±1/√fan_in)
            bound = 1 / math.sqrt(fan_in(name, c.d_model, c.d_mlp, c.mla_latent))
            assert tensor.abs().max() <= bound, name
            assert tensor.abs().max() > (0.95 if tensor.numel() >= 256 else 0.75) * bound, name  # not a narrower law
            if tensor.numel() >= 256:
                assert abs(tensor.std() / (bound / math.sqrt(3)) - 1) < 0.1, name
                assert abs(tensor.mean()) < 0.1 * bound, name
            seen.add("linear")
    assert seen == {"layer norm", "embedding", "table", "linear"}


# ------------------------------------------------------------------ 5. checkpoints


@pytest.mark.parametrize("overrides", [dict(position="t5"), MLA], ids=["t5", "mla"])
def test_checkpoint_round_trip_gives_identical_logits(overrides):
    source = model(**overrides)
    fresh = Encoder(config(**overrides), 1).initialise([1234]).eval()
    ids = right_padded(seed=9)
    with torch.no_grad():
        assert not torch.equal(fresh(ids), source(ids))
        fresh.load_checkpoint_tensors(source.checkpoint_tensors())
        assert torch.equal(fresh(ids), source(ids))


def test_a_missing_or_misshapen_checkpoint_tensor_is_named():
    source = model(position="t5")
    state = source.checkpoint_tensors()
    missing = {k: v for k, v in state.items() if k != "blocks.1.position.table"}
    with pytest.raises(ValueError, match=r"blocks\.1\.position\.table"):
        Encoder(source.config).load_checkpoint_tensors(missing)
    misshapen = {**state, "blocks.0.fc1_weight": torch.zeros(D_MLP + 1, D)}
    with pytest.raises(ValueError, match=r"blocks\.0\.fc1_weight"):
        Encoder(source.config).load_checkpoint_tensors(misshapen)
    extra = {**state, "blocks.0.surprise": torch.zeros(1)}
    with pytest.raises(ValueError, match=r"blocks\.0\.surprise"):
        Encoder(source.config).load_checkpoint_tensors(extra)


# ------------------------------------------------------------------ 6. config errors


@pytest.mark.parametrize(
    "setting, value", [("attention", "gqa"), ("kv_source", "memory"), ("activation", "swish"), ("mla_rope", "yarn"), ("position", "spiral")]
)
def test_bad_settings_are_named(setting, value):
    with pytest.raises(ValueError, match=setting):
        config(**{setting: value})


@pytest.mark.parametrize("rope_heads", [None, -1, H + 1])
def test_partial_rope_needs_a_head_count_within_the_heads(rope_heads):
    with pytest.raises(ValueError, match="rope_heads"):
        config(position="partial_rope", rope_heads=rope_heads)


@pytest.mark.parametrize("position", ["t5", "alibi_symmetric", "rope_sinusoid", "partial_rope", "rope", "alibi"])
def test_mla_refuses_a_position_scheme_acting_inside_attention(position):
    with pytest.raises(ValueError, match="position"):
        config(**{**MLA, "position": position, "rope_heads": 1})


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "nope"])
def test_mla_accepts_input_position_schemes(position):
    assert config(**{**MLA, "position": position}).attention == "mla"


def test_attention_scale_overrides_one_over_root_head_dim():
    ids = right_padded(seed=16)
    with torch.no_grad():
        default = model(position="t5")(ids)
        assert torch.equal(model(position="t5", attention_scale=1 / math.sqrt(DH))(ids), default)
        assert not torch.allclose(model(position="t5", attention_scale=0.5)(ids), default, atol=1e-4)
        mla = model(**MLA)(ids)
        assert torch.equal(model(**MLA, attention_scale=1 / math.sqrt(2 * DH))(ids), mla)  # MLA: 1/√(2·d_head)


def test_unknown_model_settings_are_named():
    with pytest.raises(ValueError, match="n_heads"):
        model_config(VOCAB, {**SMALL, "n_heads": 4})


# ------------------------------------------------------------------ 7. the padding mask


@pytest.mark.parametrize(
    "overrides",
    [dict(position="rope_sinusoid"), dict(position="t5"), dict(position="learned", kv_source="residual"), MLA],
    ids=["rope", "t5", "residual", "mla"],
)
def test_padding_is_invisible_with_the_mask_and_seen_without(overrides):
    """With the mask, what padding carries (the pad id's embedding) and how much padding follows a sentence do
    not change the logits; without it (the authors' trans.py quirk) both do, as do other ids in the padding."""
    ids = right_padded(seed=10, lengths=(20, 11, 5))
    longer = torch.cat([ids, torch.zeros(3, MAX_LEN - T, dtype=torch.long)], dim=1)  # more padding after each row
    refilled = ids.clone()
    refilled[ids == 0] = ids_for(11, 3, T, low=1)[ids == 0]
    for mask in (True, False):
        encoder = model(**{**overrides, "padding_mask": mask})
        with torch.no_grad():
            base = encoder(ids)
            assert torch.isfinite(base).all()
            extended = encoder(longer)
            unpadded = encoder(refilled)
            encoder.wte[0, 0].add_(torch.randn(D, generator=torch.Generator().manual_seed(12)))
            repainted = encoder(ids)
        if mask:
            assert torch.allclose(extended, base, atol=1e-5, rtol=0)
            assert torch.allclose(repainted, base, atol=1e-5, rtol=0)
            assert not torch.allclose(unpadded, base, atol=1e-3)  # real words where padding was do count
        else:
            assert not torch.allclose(extended, base, atol=1e-3)
            assert not torch.allclose(repainted, base, atol=1e-3)
            assert not torch.allclose(unpadded, base, atol=1e-3)


# ------------------------------------------------------------------ 8. head ablation = zeroing V rows


def zero_head(h):
    def fn(z):
        z = z.clone()
        z[:, :, h] = 0.0
        return z

    return fn


@pytest.mark.parametrize(
    "overrides",
    [
        dict(position="rope_sinusoid"),
        dict(position="t5", padding_mask=True),
        dict(position="nope", kv_source="residual", activation="gelu", final_layer_norm=True),
    ],
    ids=["rope", "t5-masked", "nope-residual"],
)
@pytest.mark.parametrize("layer, head", [(0, 0), (1, 2)])
def test_zeroing_a_heads_output_equals_zeroing_its_value_rows(overrides, layer, head):
    encoder = model(**overrides)
    ids = right_padded(seed=13)
    with torch.no_grad():
        base = encoder(ids)
        hooked = encoder(ids, hooks={f"blocks.{layer}.attn.hook_z": zero_head(head)})
        ablated = encoder.member(0).eval()
        rows = slice(D + head * DH, D + (head + 1) * DH)  # kv_weight rows: k then v
        ablated.blocks[layer].kv_weight[0, rows] = 0.0
        ablated.blocks[layer].kv_bias[0, rows] = 0.0
        assert torch.equal(ablated.blocks[layer].v_weight[0, head * DH : (head + 1) * DH], torch.zeros(DH, D))
        weights = ablated(ids)
    assert torch.allclose(hooked, weights, atol=1e-6, rtol=0), (hooked - weights).abs().max()
    assert not torch.allclose(hooked, base, atol=1e-4)  # the ablation does something


@pytest.mark.parametrize("layer, head", [(0, 1), (1, 3)])
def test_mla_zeroing_a_heads_output_equals_zeroing_its_uv_rows(layer, head):
    encoder = model(**MLA)
    ids = right_padded(seed=14)
    with torch.no_grad():
        base = encoder(ids)
        hooked = encoder(ids, hooks={f"blocks.{layer}.attn.hook_z": zero_head(head)})
        ablated = encoder.member(0).eval()
        ablated.blocks[layer].uv_weight[0, head * DH : (head + 1) * DH] = 0.0
        weights = ablated(ids)
    assert torch.allclose(hooked, weights, atol=1e-6, rtol=0), (hooked - weights).abs().max()
    assert not torch.allclose(hooked, base, atol=1e-4)


def test_hook_z_sees_each_heads_output():
    encoder = model(position="rope_sinusoid")
    ids = right_padded(seed=15)
    cache = encoder.run_with_cache(ids, ["blocks.1.attn.hook_z", "blocks.1.hook_resid_pre"])
    z = cache["blocks.1.attn.hook_z"]
    assert z.shape == (1, 3, H, T, DH)
    # the layer's attention output is out_linear(merge(z)): rebuild block 1's residual update from z by hand
    block = encoder.blocks[1]
    merged = z[0].transpose(1, 2).reshape(3, T, D)
    attn_out = merged @ block.out_weight[0].T + block.out_bias[0]
    x = cache["blocks.1.hook_resid_pre"][0] + attn_out
    h = F.layer_norm(x, (D,), block.ln2_weight[0], block.ln2_bias[0], 1e-5)
    x = x + F.relu(h @ block.fc1_weight[0].T + block.fc1_bias[0]) @ block.fc2_weight[0].T + block.fc2_bias[0]
    with torch.no_grad():
        logits = x.mean(1) @ encoder.unembed_weight[0].T + encoder.unembed_bias[0]
        assert torch.allclose(logits, encoder(ids), atol=1e-5, rtol=0)
