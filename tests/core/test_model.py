"""The model is GPT-J: same logits as HF's GPTJForCausalLM, RoPE convention, hooks, packing."""

import json
import math

import pytest
import torch

from conftest import model_config
from posym.training import checkpoints
from posym.data import files
from posym.nn.hf import HF_N_POSITIONS
from posym.nn.packing import MemberDropout, attention, query_key_products
from posym.nn.gptj import PosymModel
from posym.nn.positions import NoPE, Rope

transformers = pytest.importorskip("transformers")


def hf_model_from(directory):
    return transformers.GPTJForCausalLM.from_pretrained(directory).eval()


@pytest.mark.parametrize(
    "settings",
    [
        dict(vocab_size=137),  # paper A: 12 layers, one 128-dim head, full RoPE
        dict(vocab_size=50, n_layer=3, n_head=4, d_model=64, rotary_dim=8, d_mlp=96),  # partial RoPE, several heads
    ],
)
def test_logits_equal_hf_gptj_loaded_from_a_checkpoint(tmp_path, settings):
    model = PosymModel(model_config(**settings)).initialise([3]).eval()
    # Perturb biases and LayerNorms, which initialise to constants, so that every weight is exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name or "ln" in name:
                p.add_(0.1 * torch.randn_like(p))
    directory = checkpoints.write_checkpoint(tmp_path, 0, model, 0, [str(i) for i in range(settings["vocab_size"])], {"eval": [], "log": []})
    hf = hf_model_from(directory)
    ids = torch.randint(0, settings["vocab_size"], (5, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = hf(input_ids=ids).logits
        ours_all = model(ids, last_only=False)
        ours_last = model(ids)
        ours_explicit = model(ids, last_only=False, hooks={"blocks.0.attn.hook_pattern": lambda t: None})
    assert torch.allclose(ours_all, theirs, atol=1e-5, rtol=0)
    assert torch.allclose(ours_last, theirs[:, -1], atol=1e-5, rtol=0)
    assert torch.allclose(ours_explicit, theirs, atol=1e-5, rtol=0)


def test_rotation_in_split_halves_trains_as_gptjs_interleaved_pairs():
    """Without hooks a block projects queries and keys with each head's pairs split into halves (a compiled step
    vectorises that rotation); the loss and every weight's gradient are those of GPT-J's interleaved layout, which a
    hook on the queries keeps."""
    model = PosymModel(model_config(50, n_layer=2, n_head=4, d_model=64, rotary_dim=8, d_mlp=96)).initialise([3])
    ids = torch.randint(0, 50, (6, 11), generator=torch.Generator().manual_seed(0))
    interleaved = {f"blocks.{layer}.attn.hook_q": lambda t: None for layer in range(2)}
    results = []
    for hooks in (None, interleaved):
        model.zero_grad()
        loss = model(ids, last_only=False, hooks=hooks).logsumexp(-1).mean()
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (split_loss, split_grads), (loss, grads) = results
    assert torch.allclose(split_loss, loss, atol=1e-6, rtol=0)
    for name, grad in grads.items():
        assert torch.allclose(split_grads[name], grad, atol=1e-6, rtol=1e-5), name
    block = model.blocks[0]
    split = model.position.with_split_pairs()
    reordered = block._split_pairs(split)[0, 2 * 64 : 2 * 64 + 16]  # head 0's query rows
    assert torch.equal(reordered[:4], block.q_weight[0, 0:8:2]) and torch.equal(reordered[4:8], block.q_weight[0, 1:8:2])
    assert torch.equal(reordered[8:], block.q_weight[0, 8:16])  # dimensions past rotary_dim keep their place


@pytest.mark.parametrize("autocast", [False, True])
def test_query_key_products_differentiate_as_autograds_matmul(autocast):
    generator = torch.Generator().manual_seed(0)
    q, k, g = (torch.randn(2, 3, 5, 8, generator=generator) for _ in range(3))
    g = g[..., :5]
    results = []
    for product in (query_key_products, lambda a, b: torch.matmul(a, b.transpose(-1, -2))):
        a, b = q.clone().requires_grad_(), k.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = product(a, b)
        out.backward(g.to(out.dtype))
        results.append((out, a.grad, b.grad))
    for ours, theirs in zip(*results):
        assert ours.dtype == theirs.dtype and torch.allclose(ours, theirs, atol=1e-6 if not autocast else 1e-2, rtol=0)


def test_hf_runs_a_checkpoint_on_inputs_longer_than_the_old_128_limit(tmp_path):
    model = PosymModel(model_config(30, n_layer=2, d_model=32, n_head=2)).initialise([5]).eval()
    directory = checkpoints.write_checkpoint(tmp_path, 0, model, 0, [str(i) for i in range(30)], {"eval": [], "log": []})
    hf = hf_model_from(directory)
    assert hf.config.n_positions == HF_N_POSITIONS > 5017  # the paper's longest length-generalisation input
    ids = torch.randint(0, 30, (2, 1100), generator=torch.Generator().manual_seed(1))  # posym's longest default input
    with torch.no_grad():
        assert torch.allclose(model(ids, last_only=False), hf(input_ids=ids).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("vocab", [["<pad>", "a1", "b2", "17", "1"], ["<pad>", "[UNK]", "[CLS]", "w000", "w001"]])
def test_auto_tokenizer_loads_a_checkpoint_with_posyms_ids(tmp_path, vocab):
    model = PosymModel(model_config(len(vocab), n_layer=1, d_model=16)).initialise([0])
    directory = checkpoints.write_checkpoint(tmp_path, 0, model, 0, vocab, {"eval": [], "log": []})
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    words = vocab[1:] + vocab[1:][::-1]
    ids = tokenizer(" ".join(words))["input_ids"]
    assert ids == [vocab.index(w) for w in words]  # no BOS/EOS added, ids equal posym's
    assert tokenizer.decode(ids) == " ".join(words)
    assert tokenizer.pad_token_id == 0 and tokenizer.decode([0, 0], skip_special_tokens=True) == ""
    assert len(tokenizer) == len(vocab)
    if "[UNK]" in vocab:
        assert tokenizer("w000 zzz")["input_ids"] == [3, 1]
    else:
        with pytest.raises(Exception, match="UNK"):  # an unknown word is an error, never a silent id
            tokenizer("a1 zzz")


def test_checkpoints_written_before_tokenizer_files_and_with_n_positions_still_load(tmp_path):
    """Checkpoints of earlier posym versions: ``n_positions: 128`` among the model settings, no tokenizer files."""
    model = PosymModel(model_config(20, n_layer=2, d_model=16)).initialise([2]).eval()
    directory = checkpoints.write_checkpoint(tmp_path, 0, model, 0, list("abcdefghijklmnopqrst"), {"eval": [], "log": []})
    config = json.loads((directory / "config.json").read_text())
    config["posym"]["model"]["n_positions"] = 128
    (directory / "config.json").write_text(json.dumps(config))
    checksums = json.loads((directory / "checksums.json").read_text())
    for name in checkpoints.TOKENIZER_FILES:
        (directory / name).unlink()
        del checksums[name]
    checksums["config.json"] = files.sha256_file(directory / "config.json")
    (directory / "checksums.json").write_text(json.dumps(checksums))
    loaded, _ = checkpoints.load_model(directory)
    ids = torch.randint(0, 20, (3, 9))
    assert torch.equal(loaded(ids), model(ids))


def test_checkpoint_round_trip_gives_the_same_model(tmp_path):
    model = PosymModel(model_config(20, n_layer=2, d_model=16)).initialise([1]).eval()
    directory = checkpoints.write_checkpoint(tmp_path, 50, model, 0, list("abcdefghijklmnopqrst"), {"eval": [], "log": []})
    loaded, vocab = checkpoints.load_model(directory)
    ids = torch.randint(0, 20, (3, 9))
    assert vocab == list("abcdefghijklmnopqrst")
    assert torch.equal(loaded(ids), model(ids))


def test_rope_rotates_plane_k_by_g_k_per_position():
    # Paper A numbers planes from 1: g_k = 10000^(-2(k-1)/128).
    rope = Rope(head_dim=128, rotary_dim=128)
    for k in (1, 2, 10, 42, 64):
        g_k = 10000 ** (-2 * (k - 1) / 128)
        assert rope.frequencies[k - 1].item() == pytest.approx(g_k, rel=1e-6)
        for position in (0, 1, 7, 16, 1000):
            x = torch.zeros(1, 128)
            x[0, 2 * (k - 1)] = 1.0  # the first dimension of plane k (interleaved pairs)
            rotated = rope.rotate(x, torch.tensor([position]))[0]
            angle = position * g_k
            assert rotated[2 * (k - 1)].item() == pytest.approx(math.cos(angle), abs=1e-4)
            assert rotated[2 * (k - 1) + 1].item() == pytest.approx(math.sin(angle), abs=1e-4)
            others = torch.cat([rotated[: 2 * (k - 1)], rotated[2 * k :]])
            assert torch.count_nonzero(others) == 0
    assert rope.frequencies[1].item() == pytest.approx(0.8660, abs=1e-4)  # Table 1's ID 2


def test_rope_logits_depend_on_relative_position_only():
    rope = Rope(head_dim=8, rotary_dim=8)
    q, k = torch.randn(1, 8), torch.randn(1, 8)

    def logit(i, j):
        return (rope.rotate(q, torch.tensor([i])) * rope.rotate(k, torch.tensor([j]))).sum().item()

    assert logit(5, 2) == pytest.approx(logit(105, 102), abs=1e-4)
    assert logit(5, 2) != pytest.approx(logit(5, 3), abs=1e-4)


def test_packed_members_equal_their_single_models():
    config = model_config(30, n_layer=2, d_model=32)
    packed = PosymModel(config, members=3).initialise([0, 1, 2]).eval()
    ids = torch.randint(0, 30, (3, 4, 11))
    logits = packed(ids)
    for m, seed in enumerate([0, 1, 2]):
        single = PosymModel(config).initialise([seed]).eval()
        assert torch.allclose(logits[m], single(ids[m]), atol=1e-6)
        assert torch.equal(packed.member(m).wte, single.wte)


def test_hooks_expose_causal_patterns_and_can_edit_them():
    model = PosymModel(model_config(30, n_layer=3, d_model=32)).initialise([0]).eval()
    ids = torch.randint(0, 30, (2, 9))
    names = [f"blocks.{l}.{h}" for l in range(3) for h in ("hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_attn_scores", "attn.hook_pattern")]
    cache = model.run_with_cache(ids, names)
    # TransformerLens's names: hook_q / hook_k before the rotation, hook_rot_q / hook_rot_k after it.
    positions = torch.arange(9)
    for kind in "qk":
        before, after = cache[f"blocks.1.attn.hook_{kind}"], cache[f"blocks.1.attn.hook_rot_{kind}"]
        assert torch.allclose(model.position.rotate(before, positions), after, atol=1e-6)
        assert torch.equal(before[..., 0, :], after[..., 0, :]) and not torch.allclose(before, after)
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (1, 2, 1, 9, 9)
    assert torch.allclose(pattern.sum(-1), torch.ones(1, 2, 1, 9))
    assert torch.count_nonzero(torch.triu(pattern[0, :, 0], diagonal=1)) == 0
    # Running block 1 alone on its residual input gives the same pattern.
    alone = model.attention_pattern(1, cache["blocks.1.hook_resid_pre"])
    assert torch.allclose(alone, pattern, atol=1e-6)
    # Editing a pattern through a hook changes the output.
    uniform = lambda p: torch.tril(torch.ones_like(p)) / torch.tril(torch.ones_like(p)).sum(-1, keepdim=True)  # noqa: E731
    assert not torch.allclose(model(ids), model(ids, hooks={"blocks.0.attn.hook_pattern": uniform}))
    with pytest.raises(KeyError):
        model.run_with_cache(ids, ["blocks.7.attn.hook_pattern"])


@pytest.mark.parametrize("position", ["nope", "alibi"])
def test_other_position_schemes_run_through_the_same_attention(position):
    model = PosymModel(model_config(30, n_layer=2, d_model=32, n_head=2, position=position)).initialise([0]).eval()
    ids = torch.randint(0, 30, (2, 7))
    fused, explicit = model(ids, last_only=False), model(ids, last_only=False, hooks={"blocks.0.attn.hook_pattern": lambda t: None})
    assert torch.allclose(fused, explicit, atol=1e-5)


def test_nope_attention_is_permutation_equivariant_over_keys():
    # Without positions, permuting the keys/values before the query leaves the last query's output unchanged.
    q, k, v = torch.randn(1, 1, 6, 4), torch.randn(1, 1, 6, 4), torch.randn(1, 1, 6, 4)
    positions = torch.arange(6)
    out = attention(q, k, v, NoPE(), positions, positions)
    perm = torch.tensor([3, 1, 4, 0, 2, 5])
    permuted = attention(q, k[:, :, perm], v[:, :, perm], NoPE(), positions, positions)
    assert torch.allclose(out[..., -1, :], permuted[..., -1, :], atol=1e-6)


def test_dropout_masks_are_reproducible_and_keep_the_expected_share():
    x = torch.ones(2, 1000, 100)
    a = MemberDropout([torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)])(x, 0.1)
    b = MemberDropout([torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)])(x, 0.1)
    assert torch.equal(a, b)
    kept = (a > 0).float().mean(dim=(1, 2))
    assert torch.allclose(kept, torch.tensor([0.9, 0.9]), atol=0.005)
    assert not torch.equal(a[0], a[1])  # members draw from their own generators
    assert a.mean().item() == pytest.approx(1.0, abs=0.01)  # kept values are rescaled


def test_config_rejects_impossible_shapes():
    with pytest.raises(ValueError, match="n_head"):
        model_config(10, d_model=30, n_head=4)
    with pytest.raises(ValueError, match="rotary_dim"):
        model_config(10, d_model=32, rotary_dim=3)
    with pytest.raises(ValueError, match="position"):
        model_config(10, position="sinusoid")


def test_bfloat16_autocast_runs_rope_in_float32_and_stays_close_to_float32():
    model = PosymModel(model_config(50, n_layer=2, d_model=64, n_head=2)).initialise([0]).eval()
    ids = torch.randint(1, 50, (8, 12), generator=torch.Generator().manual_seed(0))
    rope = model.position
    q = torch.randn(8, 2, 12, 32)
    assert rope.rotate(q.bfloat16(), torch.arange(12)).dtype == torch.bfloat16
    torch.testing.assert_close(rope.rotate(q.bfloat16(), torch.arange(12)).float(), rope.rotate(q, torch.arange(12)), atol=0.05, rtol=0.02)
    with torch.no_grad():
        reference = model(ids)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(ids)
    assert low.dtype == torch.bfloat16
    # bfloat16 keeps 8 significant bits: logits agree to about 1 % of their scale, not to 1e-5.
    assert (low.float() - reference).abs().max() < 0.02 * reference.abs().max()
