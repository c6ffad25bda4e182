"""Paper C's detectors and ablations (posym.studies.c.qk_detectors) and the offline TransformerLens loader of converted models
(posym.lm.lens.pretrained_lens_model), on a tiny random Llama (2 layers, 4 heads, GQA with 2 KV heads, rotate-half
RoPE) written here with its own tokenizer; nothing is downloaded (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from posym.lm import pretrained
from posym.studies.c import qk_detectors as D
from posym.studies.c import qk_fingerprint as qk

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformer_lens")

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOCAB, LENGTH = 128, 8


def build_llama(directory):
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, bos_token_id=0, eos_token_id=1,
        pad_token_id=None, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # non-trivial norm gains, so folding them matters
        for layer in model.model.layers:
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(directory)
    core = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t2"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, bos_token="t0", eos_token="t1", unk_token="t2")
    tokenizer.save_pretrained(directory)
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(HookedTransformer, HF reference model) of a converted tiny Llama, loaded offline."""
    from posym.lm.lens import pretrained_lens_model

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        source = tmp_path_factory.mktemp("hf") / "tiny-llama"
        reference = build_llama(source)
        out = tmp_path_factory.mktemp("converted") / "tiny"
        pretrained.convert(str(source), out)
        model, _ = pretrained_lens_model(out)
    return model, reference


def tokens(n=3, seed=0):
    return D.repeated_tokens(VOCAB, 0, n, LENGTH, seed)


def test_loads_offline_with_the_hf_models_outputs_and_rotate_half(tiny):
    model, reference = tiny
    x = tokens(2)
    with torch.no_grad():
        ours, theirs = model(x).log_softmax(-1), reference(x).logits.log_softmax(-1)
    assert (ours - theirs).abs().max() < 1e-4
    geo = D.Geometry.of(model)
    assert (geo.pairing, geo.rotary_dim, geo.rep, geo.qk_norm, geo.layer_norm) == ("rotate_half", 16, 2, False, False)
    assert geo.bases == (10000.0, 10000.0)
    cos, sin = D._pair_tables(model, 1, 20)  # the model's tables are θ_t = base^(−2t/r) on the rotate-half pairs
    angles = np.arange(20)[:, None] * qk.frequencies(16, 10000.0)[None]
    assert np.abs(cos.numpy() - np.cos(angles)).max() < 1e-5 and np.abs(sin.numpy() - np.sin(angles)).max() < 1e-5


def _run(model, x, layer, extra=()):
    """(cache of n and the scores of ``layer``, the scores as the last hook sees them)."""
    seen = {}

    def grab(scores, hook):
        seen["scores"] = scores.detach().clone()

    with torch.no_grad(), model.hooks(fwd_hooks=[*extra, (f"blocks.{layer}.attn.hook_attn_scores", grab)]):
        _, cache = model.run_with_cache(x)
    return cache, seen["scores"]


def test_scores_reconstruct_from_n_and_the_folded_weights_on_the_diagonal(tiny):
    model, _ = tiny
    x = tokens(2)
    for layer in range(2):
        cache, scores = _run(model, x, layer)
        n = cache[f"blocks.{layer}.ln1.hook_normalized"].double().numpy()
        scale = model.blocks[layer].attn.attn_scale
        for head in range(4):
            W_Q, W_K = D.head_weights(model, layer, head)
            M = W_Q @ W_K.T
            diagonal = np.einsum("bpi,ij,bpj->bp", n, M, n) / scale
            actual = np.diagonal(scores[:, head].double().numpy(), axis1=-2, axis2=-1)
            assert np.abs(diagonal - actual).max() < 1e-4 * np.abs(actual).max()
            off = np.einsum("bpi,ij,bqj->bpq", n, M, n) / scale  # off the diagonal RoPE turns the score
            assert np.abs(np.tril(off - scores[:, head].double().numpy(), -1)).max() > 1e-3


def test_the_im_ablation_leaves_the_cos_only_kernel_on_that_head_only(tiny):
    model, _ = tiny
    x, layer, head = tokens(2), 1, 2
    cache, clean = _run(model, x, layer)
    _, ablated = _run(model, x, layer, D.ablation_hooks(model, layer, head, "rope"))
    n = cache[f"blocks.{layer}.ln1.hook_normalized"].double().numpy()
    W_Q, W_K = D.head_weights(model, layer, head)
    operators = qk.pair_operators(W_Q, W_K, 16, "rotate_half")  # M_t, t = 0..7
    real = np.einsum("bpi,tij,bqj->bpqt", n, operators.real, n)
    delta = np.arange(x.shape[1])[None, :] - np.arange(x.shape[1])[:, None]  # j − i
    cos = np.cos(delta[..., None] * qk.frequencies(16, 10000.0))
    expected = (real * cos).sum(-1) / model.blocks[layer].attn.attn_scale
    lower = np.tril(np.ones_like(delta, dtype=bool))
    got = ablated[:, head].double().numpy()
    assert np.abs(np.where(lower, got - expected, 0)).max() < 1e-4 * np.abs(expected).max()
    assert np.abs(np.where(lower, clean[:, head].numpy() - got, 0)).max() > 1e-3  # it did something
    others = [h for h in range(4) if h != head]
    assert torch.equal(ablated[:, others], clean[:, others])  # and only to that head
    assert torch.isinf(ablated[:, head][:, ~torch.from_numpy(lower)]).all()  # the causal mask stays


def test_the_ablated_kernel_is_even(tiny):
    """One token repeated: layer 0's n is the same at every position, so the full scores (unmasked, from hook_rot_q /
    hook_rot_k) minus the Im part depend on |j − i| only (a symmetric matrix), which the scores alone do not."""
    model, _ = tiny
    x = torch.full((1, 24), 5)
    layer, head = 0, 1
    cache, _ = _run(model, x, layer)
    attn = model.blocks[layer].attn
    rot_q, rot_k = cache["blocks.0.attn.hook_rot_q"][0, :, head], cache["blocks.0.attn.hook_rot_k"][0, :, head // 2]
    full = (rot_q @ rot_k.T / attn.attn_scale).double()
    n = cache["blocks.0.ln1.hook_normalized"][0]
    q, k = n @ attn.W_Q[head], n @ attn.W_K[head]
    delta = D.score_delta(q, k, "rope", float(attn.attn_scale), D._pair_tables(model, 0, 24), 16, "rotate_half").double()
    even = full - delta
    assert (even - even.T).abs().max() < 1e-5 * even.abs().max()
    assert (full - full.T).abs().max() > 1e-3 * full.abs().max()


def test_sym_and_anti_split_the_static_score():
    rng = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 6, 8, generator=rng, dtype=torch.float64), torch.randn(2, 6, 8, generator=rng, dtype=torch.float64)
    sym, anti = D.score_delta(q, k, "sym", 2.0), D.score_delta(q, k, "anti", 2.0)
    assert torch.allclose(sym + anti, q @ k.transpose(-1, -2) / 2.0)
    assert torch.allclose(sym, -sym.transpose(-1, -2)) and torch.allclose(anti, anti.transpose(-1, -2))
    with pytest.raises(ValueError, match="mode"):
        D.score_delta(q, k, "cos", 1.0)


def test_detectors_read_a_forced_pattern(tiny):
    model, _ = tiny
    x = tokens(3)
    P = x.shape[1]
    targets = {0: 1, 1: LENGTH, 2: LENGTH - 1}  # head 0 attends p−1, head 1 p−L, head 2 p−L+1

    def force(pattern, hook):
        pattern = pattern.clone()
        for head, offset in targets.items():
            forced = torch.zeros(P, P)
            rows = torch.arange(offset, P)
            forced[rows, rows - offset] = 1.0
            forced[torch.arange(offset), 0] = 1.0
            pattern[:, head] = forced
        return pattern

    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_pattern", force)]):
        scores, ce = D.head_scores(model, x, LENGTH, batch_size=2)
    layer1 = scores[scores["layer"] == 1].set_index("head")
    assert layer1.loc[0, "prev"] == pytest.approx(1.0) and layer1.loc[0, "dup"] == 0.0
    assert layer1.loc[1, "dup"] == pytest.approx(1.0) and layer1.loc[1, "ind"] == 0.0
    assert layer1.loc[2, "ind"] == pytest.approx(1.0) and layer1.loc[2, "prev"] == 0.0
    assert layer1.loc[3, ["prev", "dup", "ind"]].max() < 1.0
    assert 0 < ce < 2 * np.log(VOCAB)


def test_repeated_tokens():
    x = tokens(4)
    assert x.shape == (4, 2 * LENGTH + 1) and (x[:, 0] == 0).all()
    assert torch.equal(x[:, 1 : LENGTH + 1], x[:, LENGTH + 1 :]) and torch.equal(x, tokens(4))
    assert not torch.equal(x, tokens(4, seed=1))


def test_copying_score_of_a_constructed_ov(tiny):
    model, _ = tiny
    model = _copy(model)
    d, d_head = model.cfg.d_model, model.cfg.d_head
    basis, _ = torch.linalg.qr(torch.randn(VOCAB, d, generator=torch.Generator().manual_seed(1)))
    with torch.no_grad():
        model.embed.W_E.copy_(basis)  # W_U W_E = I
        model.unembed.W_U.copy_(basis.T)
        frame, _ = torch.linalg.qr(torch.randn(d, d_head, generator=torch.Generator().manual_seed(2)))
        signs = torch.ones(d_head)
        signs[:3] = -1  # 13 of 16 eigenvalues positive
        attn = model.blocks[0].attn
        attn._W_V[0] = frame  # KV head 0 serves query heads 0 and 1
        attn.W_O[0] = signs[:, None] * frame.T  # W_O W_U W_E W_V = diag(signs)
        attn.W_O[1] = -signs[:, None] * frame.T
    table = D.copying_scores(model).set_index(["layer", "head"])["copying"]
    assert table[(0, 0)] == pytest.approx(13 / 16) and table[(0, 1)] == pytest.approx(3 / 16)


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_k_composition_matches_brute_force_and_ranks_the_only_writer_first(tiny):
    model, _ = tiny
    table = D.k_composition(model, 1, 3)
    attn1 = model.blocks[1].attn
    M = D.head_weights(model, 1, 3)[0] @ D.head_weights(model, 1, 3)[1].T
    for row in table.itertuples():
        attn0 = model.blocks[0].attn
        OV = (attn0.W_V[row.head] @ attn0.W_O[row.head]).detach().double().numpy()
        brute = np.linalg.norm(M @ OV.T) / (np.linalg.norm(M) * np.linalg.norm(OV))
        assert row.k_composition == pytest.approx(brute, rel=1e-6)  # OV formed in float32 here
    assert len(table) == 4 and sorted(table["rank"]) == [1, 2, 3, 4] and attn1 is model.blocks[1].attn
    model = _copy(model)
    with torch.no_grad():  # head 0.2 writes inside W_K of head 1.3's KV head; the others write elsewhere
        W_K = model.blocks[1].attn.W_K[3].detach().double()
        inside, _ = torch.linalg.qr(W_K)
        outside = torch.linalg.qr(torch.eye(64, dtype=torch.float64) - inside @ inside.T)[0][:, 16:32]
        for head in range(4):
            model.blocks[0].attn.W_O[head] = (inside if head == 2 else outside).T.float()
    ranks = D.k_composition(model, 1, 3).set_index("head")
    assert ranks.loc[2, "rank"] == 1 and ranks.drop(2)["k_composition"].max() < 1e-3 * ranks.loc[2, "k_composition"]


def test_ablated_induction_starts_from_the_clean_residual_correctly(tiny):
    model, _ = tiny
    x = tokens(3)
    table, clean = D.ablated_induction(model, x, ["rope", "sym"], LENGTH, batch_size=2, heads=[(1, 0), (0, 3)])
    _, scores_ce = D.head_scores(model, x, LENGTH, batch_size=3)
    assert clean == pytest.approx(scores_ce, rel=1e-5)
    for mode in ("rope", "sym"):
        with torch.no_grad(), model.hooks(fwd_hooks=D.ablation_hooks(model, 0, 3, mode)):
            logits = model(x)
        nll = torch.nn.functional.cross_entropy(logits[:, LENGTH + 1 : 2 * LENGTH].flatten(0, 1), x[:, LENGTH + 2 :].flatten())
        row = table.set_index(["layer", "head"]).loc[(0, 3)]
        assert row[f"ce_{mode}"] == pytest.approx(float(nll), rel=1e-5)
        assert row[f"dInd_{mode}"] == pytest.approx(float(nll) - clean, abs=1e-6) and row[f"dInd_{mode}"] != 0


def test_static_table_has_every_head_with_its_null_and_rope_features(tiny):
    model, _ = tiny
    table = D.static_table(model, draws=20)
    assert len(table) == 8 and list(table[["layer", "head"]].iloc[5]) == [1, 1]
    for column in ("dir_frac", "D_head", "content_pos_frac", "imag_mass", "dir_frac_z", "D_head_z", "self_match", "rope_imag_frac", "freq_centroid", "hi_freq_dir"):
        assert table[column].notna().all(), column
    W_Q, W_K = D.head_weights(model, 1, 1)
    assert table.loc[5, "dir_frac"] == pytest.approx(qk.head_fingerprint(W_Q, W_K)["dir_frac"])
    # GQA: heads 0 and 1 share a KV head, not their metrics
    assert table.loc[0, "dir_frac"] != table.loc[1, "dir_frac"]
    assert isinstance(table, pd.DataFrame)
