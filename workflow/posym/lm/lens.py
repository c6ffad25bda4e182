"""A posym checkpoint as a TransformerLens ``HookedTransformer``, offline.

:func:`transformer_lens_model` builds the TransformerLens (3.x) config from the checkpoint's ``config.json`` instead
of looking a model name up on the Hub (``from_pretrained`` knows only published GPT-J names and downloads their
files), converts the weights with TransformerLens's own ``convert_gptj_weights`` and sets posym's word-level
tokenizer on the model. Its logits, attention patterns, queries and keys equal posym's to 1e-5, also past 2048 tokens
(tests/core/test_lens.py). Only the core's GPT-J with RoPE base 10000 (``config.json``: ``posym.hf_compatible``)
converts; ALiBi, NoPE, other RoPE bases and a study's own architecture (``posym.study``, paper B) have no GPT-J
counterpart and are refused.

Pitfalls when comparing TransformerLens's numbers with posym's:

* **RoPE pairing.** posym and GPT-J rotate *interleaved* pairs (dims 2i, 2i+1; ``rotate_every_two``), on the first
  ``rotary_dim`` dims of each head. TransformerLens's default, and Llama/GPT-NeoX, is *rotate-half* (dims i,
  i + rotary_dim/2). The TransformerLens setting is ``cfg.rotary_adjacent_pairs``: True here. A hand-made config
  that leaves it False still runs, but on different attention patterns (nothing fails loudly). The model's ``W_Q`` /
  ``W_K`` keep GPT-J's layout too: read RoPE planes off them with ``pairing="interleaved"`` in
  :mod:`posym.studies.c.qk_fingerprint`, not the ``"rotate_half"`` of TransformerLens's own Llama-style models.
* **Pre- and post-rotation hooks.** The names mean the same in both: ``blocks.<l>.attn.hook_q`` / ``hook_k`` are the
  queries and keys *before* RoPE, ``hook_rot_q`` / ``hook_rot_k`` after it (what the attention scores are made of,
  and what paper A's head scores read). The layouts differ: TransformerLens's q/k/z are (batch, pos, head, d_head),
  posym's (member, batch, head, pos, d_head); ``hook_attn_scores`` / ``hook_pattern`` are (batch, head, query, key)
  in both, posym's with its leading member axis. TransformerLens 4.3's ``TransformerBridge`` (4.0 removed
  HookedTransformer) lists ``hook_rot_q`` / ``hook_rot_k`` on GPT-J but never fires them, one reason posym pins 3.x.
* **Weight processing.** TransformerLens's ``from_pretrained`` folds LayerNorm weights into the next layer
  (``fold_ln``) and centres the weights that write to the residual stream (``center_writing_weights``) and the
  unembedding (``center_unembed``). Folding and centring the writing weights leave the logits unchanged (up to float
  error), but ``ln*.hook_normalized`` lose the LayerNorm's scale and shift and the residual stream its mean;
  centring the unembedding subtracts each position's mean logit, a constant per position. Default here: all off, so
  logits and activations equal posym's; with them on, compare log-softmax (or probabilities, argmax, loss), never raw
  logits or residual streams. Attention patterns are the same either way.
* **Context length.** ``n_ctx`` defaults to 8192 (:data:`posym.nn.hf.HF_N_POSITIONS`, above the 5,017 tokens of the
  paper's longest input), not to the ``n_positions`` a checkpoint recorded (128 in older posym versions, a limit RoPE
  does not have). ``model.to_tokens`` silently truncates at ``n_ctx``; the forward pass fails on longer inputs.
  TransformerLens computes RoPE's table for 2048 positions and extends it on a longer input, and builds the causal
  mask per input, so a large ``n_ctx`` costs nothing until an input is that long.
* **No BOS.** posym's inputs start with their first word: the default here is ``default_prepend_bos=False`` (the
  TransformerLens default, True, would shift every position by one). TransformerLens gives a tokenizer without
  BOS/EOS the string ``<|endoftext|>`` as both, which is no posym word: ``prepend_bos=True`` fails ("Missing [UNK]
  token") or, in a vocabulary with ``[UNK]``, silently turns the first word into ``[UNK]`` (the string is glued to
  it), and ``generate`` needs ``stop_at_eos=False`` (or, with ``[UNK]``, stops at ``[UNK]``).
* **Dropout.** A HookedTransformer has none; posym evaluates without it too (dropout acts only in training steps), so
  the forward passes agree, but a TransformerLens training step is not a posym training step.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from posym.training import checkpoints
from posym.data.files import read_json
from posym.nn.hf import HF_N_POSITIONS

INSTALL_HINT = "pip install 'posym[lens]'"


def transformer_lens_model(
    checkpoint_dir: str | Path,
    device: str | torch.device = "cpu",
    *,
    n_ctx: int = HF_N_POSITIONS,
    fold_ln: bool = False,
    center_writing_weights: bool = False,
    center_unembed: bool = False,
):
    """(HookedTransformer in eval mode, its tokenizer) of the posym checkpoint ``checkpoint_dir``, built offline.

    The checkpoint's files are checked against its checksums first (:func:`posym.training.checkpoints.verify`). The tokenizer
    (also ``model.tokenizer``) maps posym's whitespace-separated words to posym's ids, with no BOS or EOS, so
    ``model.to_tokens("a1 b2 17")`` gives the ids posym trains on. The three weight-processing flags are those of
    TransformerLens's ``from_pretrained`` (which turns them all on); off, the logits equal posym's (see the module
    docstring). Raises ValueError for a checkpoint that is not the core's GPT-J with RoPE base 10000, and ImportError
    naming the install command when TransformerLens 3.x is not installed.
    """
    directory = Path(checkpoint_dir)
    checkpoints.verify(directory)
    saved = read_json(directory / "config.json")
    _require_gptj(directory, saved)
    hooked_transformer, hooked_transformer_config, convert_gptj_weights = _import_transformer_lens()
    import transformers

    config = hooked_transformer_config(
        d_model=saved["n_embd"],
        d_head=saved["n_embd"] // saved["n_head"],
        n_heads=saved["n_head"],
        d_mlp=saved["n_inner"] or 4 * saved["n_embd"],  # TransformerLens's own GPT-J loader ignores n_inner
        n_layers=saved["n_layer"],
        n_ctx=n_ctx,
        d_vocab=saved["vocab_size"],
        eps=saved["layer_norm_epsilon"],  # its loader hard-codes 1e-5
        act_fn=saved["activation_function"],  # "gelu": the exact GELU in HF and TransformerLens alike
        normalization_type="LN",
        parallel_attn_mlp=True,
        positional_embedding_type="rotary",
        rotary_dim=saved["rotary_dim"],
        rotary_adjacent_pairs=True,  # GPT-J's interleaved pairs, not rotate-half
        rotary_base=saved["posym"]["model"]["rope_base"],
        original_architecture="GPTJForCausalLM",
        default_prepend_bos=False,
        init_weights=False,  # the weights are loaded next; random ones would only cost time and the caller's RNG
        device=str(device),
        dtype=torch.float32,
    )
    hf_model = transformers.GPTJForCausalLM.from_pretrained(directory, local_files_only=True)
    with warnings.catch_warnings():
        # 3.x warns on every HookedTransformer that 4.0 removes it; posym pins 3.x for it (see the README).
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        model = hooked_transformer(config, tokenizer=_posym_tokenizer(read_json(directory / "vocab.json")))
    model.load_and_process_state_dict(
        convert_gptj_weights(hf_model, model.cfg),
        fold_ln=fold_ln,
        center_writing_weights=center_writing_weights,
        center_unembed=center_unembed,
        fold_value_biases=False,  # GPT-J has no value bias: nothing to fold
        refactor_factored_attn_matrices=False,
    )
    return model.eval(), model.tokenizer


def _require_gptj(directory: Path, saved: dict) -> None:
    """Refuse, with the reason, a checkpoint whose model GPT-J (hence TransformerLens's GPT-J) does not compute."""
    settings = saved.get("posym", {})
    if settings.get("hf_compatible") is True and settings.get("study") is None:
        return
    if settings.get("study") is not None:
        reason = f"it holds study {settings['study']!r}'s own architecture"
    else:
        model = settings.get("model", {})
        reason = f"its position scheme is {model.get('position')!r} with rope_base {model.get('rope_base')!r}"
    raise ValueError(
        f"{directory}: TransformerLens can run only posym's core GPT-J with RoPE base 10000 (config.json: "
        f"posym.hf_compatible true), and {reason}; load it with posym.training.checkpoints.load_model instead"
    )


def _import_transformer_lens():
    """HookedTransformer, HookedTransformerConfig and convert_gptj_weights, imported here so that posym imports
    without TransformerLens. 4.0 removed HookedTransformer, hence the version in the error."""
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
        from transformer_lens.pretrained.weight_conversions import convert_gptj_weights
    except ImportError as err:
        from importlib import metadata

        try:
            found = f"TransformerLens {metadata.version('transformer-lens')} is installed"
        except metadata.PackageNotFoundError:
            found = "TransformerLens is not installed"
        raise ImportError(f"posym.lm.lens needs TransformerLens 3.x ({found}): {INSTALL_HINT}") from err
    return HookedTransformer, HookedTransformerConfig, convert_gptj_weights


def _posym_tokenizer(vocab: list[str]):
    """The checkpoint's word-level tokenizer, built from its checksummed ``vocab.json`` with the function that wrote
    its ``tokenizer.json`` (so the two agree), which also serves checkpoints written before tokenizer files."""
    import transformers
    from tokenizers import Tokenizer

    files = checkpoints.hf_tokenizer_files(vocab)
    settings = {key: value for key, value in files["tokenizer_config.json"].items() if key != "tokenizer_class"}
    tokenizer = Tokenizer.from_str(json.dumps(files["tokenizer.json"]))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **settings)


# ---------------------------------------------------------------------------------- pretrained language models

#: The TransformerLens architecture each converted model's ``config.json`` architecture loads as: a Llama's
#: config TransformerLens builds from the directory itself (``convert_hf_model_config`` reads a local config); a
#: Gemma-3 it knows only by name, so its hard-coded config of that name is used after checking the directory's
#: config matches it (:data:`GEMMA3_CHECKED`).
PRETRAINED_NAMES = {"LlamaForCausalLM": None, "Gemma3ForCausalLM": "google/gemma-3-270m"}
GEMMA3_CHECKED = {"hidden_size": "d_model", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                  "num_key_value_heads": "n_key_value_heads", "head_dim": "d_head", "intermediate_size": "d_mlp",
                  "vocab_size": "d_vocab"}  # fmt: skip


def pretrained_lens_model(model_dir: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """(HookedTransformer in eval mode, tokenizer) of a model directory made by :func:`posym.lm.pretrained.convert`,
    with nothing downloaded: the directory is verified against its checksums, the weights and tokenizer are read
    from it (``local_files_only``), and the TransformerLens config is built from its ``config.json`` (Llama) or
    TransformerLens's own config for the architecture (Gemma-3 270M, checked against ``config.json``).

    Weight processing as paper C loads its models (spec §C1): ``fold_ln=True`` (ln1's gain folds into W_Q / W_K,
    so ``blocks.l.ln1.hook_normalized`` is what they read), and for LayerNorm models ``center_writing_weights``
    and ``center_unembed``; RMSNorm models (both here) are not centred. Raises ValueError for an architecture
    without a TransformerLens counterpart here."""
    from posym.lm import pretrained

    directory = Path(model_dir)
    manifest = pretrained.verify(directory)
    hooked_transformer, _, _ = _import_transformer_lens()
    import transformers
    from transformer_lens import loading_from_pretrained as loading

    saved = read_json(directory / "config.json")
    architecture = (saved.get("architectures") or [manifest.get("architecture")])[0]
    if architecture not in PRETRAINED_NAMES:
        raise ValueError(f"{directory}: architecture {architecture!r} has no TransformerLens loader here ({sorted(PRETRAINED_NAMES)})")
    name = PRETRAINED_NAMES[architecture] or str(directory)
    cfg = loading.get_pretrained_model_config(name, fold_ln=True, device=str(device), dtype=dtype)
    if architecture == "Gemma3ForCausalLM":
        text = saved.get("text_config", saved)
        mismatched = {k: (text.get(k), getattr(cfg, v)) for k, v in GEMMA3_CHECKED.items() if text.get(k) != getattr(cfg, v)}
        if mismatched:
            raise ValueError(f"{directory}: not Gemma-3 270M, whose config TransformerLens has: {mismatched}")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=dtype).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    state = loading.get_pretrained_state_dict(name, cfg, hf_model, dtype=dtype)
    layer_norm = cfg.normalization_type in ("LN", "LNPre")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        model = hooked_transformer(cfg, tokenizer, move_to_device=False)
    model.load_and_process_state_dict(
        state, fold_ln=True, center_writing_weights=layer_norm, center_unembed=layer_norm,
        fold_value_biases=True, refactor_factored_attn_matrices=False,
    )  # fmt: skip
    del hf_model, state
    return model.to(device).eval(), tokenizer
