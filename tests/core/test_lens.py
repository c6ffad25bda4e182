"""posym.lm.lens: a posym checkpoint as a TransformerLens HookedTransformer computes posym's logits and hook values."""

import dataclasses
import json
import re
import sys
import warnings

import pytest
import torch

pytest.importorskip("transformer_lens")
transformers = pytest.importorskip("transformers")

from conftest import model_config  # noqa: E402
from posym.training import checkpoints  # noqa: E402
from posym.pipeline import config as posym_config  # noqa: E402
from posym.data import files  # noqa: E402
from posym.lm.lens import INSTALL_HINT, transformer_lens_model  # noqa: E402
from posym.nn.gptj import PosymModel  # noqa: E402
from posym.studies.b.architecture import model_config as paper_b_model_config  # noqa: E402

VOCAB = ["<pad>"] + [f"w{i}" for i in range(39)]
CHECKPOINTS = {
    # several heads, RoPE over the whole head
    "full_rotary": dict(n_layer=3, n_head=4, d_model=32, d_mlp=48),
    # RoPE on 8 of 16 dims per head; an MLP width that is not 4 * d_model and an epsilon that is not 1e-5, which
    # TransformerLens's own GPT-J loader would get wrong
    "partial_rotary": dict(n_layer=2, n_head=4, d_model=64, rotary_dim=8, d_mlp=96, layer_norm_epsilon=1e-3),
}
QK_HOOKS = ("hook_q", "hook_k", "hook_rot_q", "hook_rot_k")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write(root, vocab=VOCAB, **settings):
    """(posym model, its checkpoint directory); biases and LayerNorms perturbed off their constant initialisation,
    so that a dropped or swapped weight shows."""
    model = PosymModel(model_config(len(vocab), **settings)).initialise([3]).eval()
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name or "ln" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model, checkpoints.write_checkpoint(root, 0, model, 0, vocab, {"eval": [], "log": []})


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def converted(request, tmp_path_factory):
    """(posym model, checkpoint directory, TransformerLens model, tokenizer) of each kind of checkpoint."""
    model, directory = write(tmp_path_factory.mktemp(request.param), **CHECKPOINTS[request.param])
    lens_model, tokenizer = transformer_lens_model(directory)
    return model, directory, lens_model, tokenizer


def ids_for(length, batch=2, seed=0):
    return torch.randint(1, len(VOCAB), (batch, length), generator=torch.Generator().manual_seed(seed))


def posym_cache(model, ids, names):
    """posym's logits at every position and its hook values, member axis dropped."""
    cache = {}
    hooks = {name: (lambda key: lambda t: cache.__setitem__(key, t[0].detach()))(name) for name in names}
    with torch.no_grad():
        logits = model(ids, last_only=False, hooks=hooks)
    return logits, cache


def test_logits_patterns_and_rotated_queries_equal_posyms_beyond_128_tokens(converted):
    model, _, lens_model, _ = converted
    ids = ids_for(300)
    layers = range(model.config.n_layer)
    names = [f"blocks.{l}.attn.{hook}" for l in layers for hook in ("hook_pattern", *QK_HOOKS)]
    ours, cache = posym_cache(model, ids, names)
    with torch.no_grad():
        theirs, lens_cache = lens_model.run_with_cache(ids)
    assert lens_model.cfg.rotary_adjacent_pairs  # GPT-J's interleaved pairs
    assert torch.allclose(theirs, ours, atol=1e-5, rtol=0)
    for l in layers:
        pattern = f"blocks.{l}.attn.hook_pattern"
        assert lens_cache[pattern].shape == cache[pattern].shape == (2, model.config.n_head, 300, 300)
        assert torch.allclose(lens_cache[pattern], cache[pattern], atol=1e-5, rtol=0), pattern
        for hook in QK_HOOKS:  # same meaning (before / after RoPE), TransformerLens's layout (batch, pos, head, d)
            name = f"blocks.{l}.attn.{hook}"
            assert torch.allclose(lens_cache[name], cache[name].transpose(1, 2), atol=1e-5, rtol=0), name


def test_logits_equal_posyms_past_transformer_lens_first_rope_table(converted):
    """TransformerLens builds RoPE's table for 2048 positions and extends it on longer inputs."""
    model, _, lens_model, _ = converted
    ids = ids_for(2100, batch=1, seed=1)
    with torch.no_grad():
        assert torch.allclose(lens_model(ids), model(ids, last_only=False), atol=1e-5, rtol=0)


def test_the_rotate_half_pairing_computes_another_model(converted):
    """The pitfall the conversion avoids: the same weights under TransformerLens's default pairing attend elsewhere."""
    _, _, lens_model, _ = converted
    from transformer_lens import HookedTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.x's notice that 4.0 removes HookedTransformer
        rotate_half = HookedTransformer(dataclasses.replace(lens_model.cfg, rotary_adjacent_pairs=False))
    weights = {k: v for k, v in lens_model.state_dict().items() if "rotary_" not in k}  # keep its own RoPE table
    rotate_half.load_state_dict(weights, strict=False)
    ids = ids_for(40)
    with torch.no_grad():
        _, interleaved_cache = lens_model.run_with_cache(ids, names_filter="blocks.0.attn.hook_pattern")
        _, rotate_half_cache = rotate_half.eval().run_with_cache(ids, names_filter="blocks.0.attn.hook_pattern")
    pattern = "blocks.0.attn.hook_pattern"
    assert not torch.allclose(rotate_half_cache[pattern], interleaved_cache[pattern], atol=1e-3)


def test_tokenizer_gives_posyms_ids_without_a_bos(converted):
    _, directory, lens_model, tokenizer = converted
    ids = ids_for(50)[0]
    words = [VOCAB[i] for i in ids.tolist()]
    assert lens_model.tokenizer is tokenizer and len(tokenizer) == len(VOCAB)
    assert torch.equal(lens_model.to_tokens(" ".join(words)), ids[None])  # no BOS by default
    assert lens_model.to_str_tokens(" ".join(words)) == words
    assert lens_model.to_string(ids) == " ".join(words)
    checkpoint_tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    assert tokenizer(" ".join(words))["input_ids"] == checkpoint_tokenizer(" ".join(words))["input_ids"]
    with pytest.raises(Exception, match="UNK"):  # TransformerLens's stand-in BOS is no posym word
        lens_model.to_tokens("w1 w2", prepend_bos=True)


def test_folding_shifts_each_positions_logits_by_a_constant(converted):
    model, directory, _, _ = converted
    ids = ids_for(30)
    ours, cache = posym_cache(model, ids, ["blocks.0.attn.hook_pattern"])
    folded, _ = transformer_lens_model(directory, fold_ln=True, center_writing_weights=True)
    centred, _ = transformer_lens_model(directory, fold_ln=True, center_writing_weights=True, center_unembed=True)
    with torch.no_grad():
        assert torch.allclose(folded(ids), ours, atol=1e-5, rtol=0)  # folding alone keeps the logits
        theirs, lens_cache = centred.run_with_cache(ids, names_filter="blocks.0.attn.hook_pattern")
    shift = ours - theirs
    assert shift.std(-1).max() < 1e-5 and shift.mean(-1).abs().max() > 1e-3  # a constant per position, not 0
    assert torch.allclose(theirs, ours - ours.mean(-1, keepdim=True), atol=1e-5, rtol=0)
    assert torch.allclose(theirs.log_softmax(-1), ours.log_softmax(-1), atol=1e-5, rtol=0)
    assert torch.allclose(lens_cache["blocks.0.attn.hook_pattern"], cache["blocks.0.attn.hook_pattern"], atol=1e-5)


@pytest.mark.parametrize(
    "settings, reason",
    [
        (dict(position="alibi"), "'alibi'"),
        (dict(position="nope"), "'nope'"),
        (dict(rope_base=500000.0), "rope_base 500000"),
    ],
)
def test_checkpoints_gptj_does_not_compute_are_refused(tmp_path, settings, reason):
    _, directory = write(tmp_path, n_layer=1, n_head=2, d_model=16, **settings)
    with pytest.raises(ValueError, match=f"core GPT-J with RoPE base 10000.*{reason}.*load_model"):
        transformer_lens_model(directory)


def test_a_studys_own_architecture_is_refused(tmp_path):
    settings = {**posym_config.study_defaults("b")["model"], "n_layer": 1, "n_head": 2, "d_model": 16, "d_mlp": 32}
    encoder = paper_b_model_config(len(VOCAB), {**settings, "position": "rope"}).build(1).initialise([0])
    directory = checkpoints.write_checkpoint(tmp_path, 0, encoder, 0, VOCAB, {"eval": [], "log": []})
    with pytest.raises(ValueError, match="study 'b'"):
        transformer_lens_model(directory)


def test_an_altered_checkpoint_is_refused_before_conversion(tmp_path):
    _, directory = write(tmp_path, n_layer=1, n_head=2, d_model=16)
    config = json.loads((directory / "config.json").read_text())
    config["n_layer"] = 2
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(files.IntegrityError, match="config.json"):
        transformer_lens_model(directory)


def test_missing_transformer_lens_names_the_install_command(tmp_path, monkeypatch):
    _, directory = write(tmp_path, n_layer=1, n_head=2, d_model=16)
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # as if not installed
    with pytest.raises(ImportError, match=f"TransformerLens 3.x.*{re.escape(INSTALL_HINT)}"):
        transformer_lens_model(directory)
