"""HF ``GPTJForCausalLM``'s weight layout and ``config.json`` for posym's GPT-J (:mod:`posym.nn.gptj`): what makes a
checkpoint load into ``transformers``."""

from __future__ import annotations

from typing import Mapping

import torch

#: ``n_positions`` of the HF config. RoPE has no length limit, but HF GPT-J precomputes its sin/cos table for this
#: many positions (and copies it per batch row on every forward, so a huge bound costs memory). 8192 lies above
#: every input posym evaluates (the paper's longest length-generalisation input has 5,017 tokens); for longer
#: inputs, raise it when loading: ``GPTJForCausalLM.from_pretrained(path, n_positions=...)``.
HF_N_POSITIONS = 8192


_HF_BLOCK_NAMES = {
    "ln_weight": "ln_1.weight",
    "ln_bias": "ln_1.bias",
    "q_weight": "attn.q_proj.weight",
    "k_weight": "attn.k_proj.weight",
    "v_weight": "attn.v_proj.weight",
    "out_weight": "attn.out_proj.weight",
    "fc_in_weight": "mlp.fc_in.weight",
    "fc_in_bias": "mlp.fc_in.bias",
    "fc_out_weight": "mlp.fc_out.weight",
    "fc_out_bias": "mlp.fc_out.bias",
}



class HFGPTJLayout:
    """The methods of :class:`posym.nn.gptj.PosymModel` that read and write HF GPT-J's names and config."""

    def hf_state_dict(self, m: int = 0) -> dict[str, torch.Tensor]:
        """Member m's weights under ``GPTJForCausalLM``'s parameter names."""
        out = {
            "transformer.wte.weight": self.wte[m],
            "transformer.ln_f.weight": self.ln_f_weight[m],
            "transformer.ln_f.bias": self.ln_f_bias[m],
            "lm_head.weight": self.unembed_weight[m],
            "lm_head.bias": self.unembed_bias[m],
        }
        for i, block in enumerate(self.blocks):
            for ours, theirs in _HF_BLOCK_NAMES.items():
                out[f"transformer.h.{i}.{theirs}"] = getattr(block, ours)[m]
        return {k: v.detach().clone().contiguous().cpu() for k, v in out.items()}

    def load_hf_state_dict(self, state: Mapping[str, torch.Tensor], m: int = 0) -> None:
        expected = set(self.hf_state_dict(m))
        missing, unexpected = expected - set(state), set(state) - expected
        if missing or unexpected:
            raise ValueError(f"weights do not fit this model: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
        with torch.no_grad():
            targets = {
                "transformer.wte.weight": self.wte,
                "transformer.ln_f.weight": self.ln_f_weight,
                "transformer.ln_f.bias": self.ln_f_bias,
                "lm_head.weight": self.unembed_weight,
                "lm_head.bias": self.unembed_bias,
            }
            for i, block in enumerate(self.blocks):
                for ours, theirs in _HF_BLOCK_NAMES.items():
                    targets[f"transformer.h.{i}.{theirs}"] = getattr(block, ours)
            for name, param in targets.items():
                if state[name].shape != param[m].shape:
                    raise ValueError(f"{name}: shape {tuple(state[name].shape)} != {tuple(param[m].shape)}")
                param[m].copy_(state[name])

    def hf_config(self) -> dict:
        """A ``config.json`` that ``GPTJForCausalLM.from_pretrained`` accepts, plus posym's own settings."""
        c = self.config
        # HF GPT-J hard-codes RoPE with base 10000; other schemes load only into posym.
        hf_compatible = c.position == "rope" and c.rope_base == 10000.0
        return {
            "architectures": ["GPTJForCausalLM"],
            "model_type": "gptj",
            "vocab_size": c.vocab_size,
            "n_positions": HF_N_POSITIONS,
            "n_embd": c.d_model,
            "n_layer": c.n_layer,
            "n_head": c.n_head,
            "rotary_dim": c.rotary_dim if c.rotary_dim is not None else c.head_dim,
            "n_inner": c.d_mlp,
            "activation_function": "gelu",
            "resid_pdrop": c.resid_pdrop,
            "embd_pdrop": c.embd_pdrop,
            "attn_pdrop": c.attn_pdrop,
            "layer_norm_epsilon": c.layer_norm_epsilon,
            "initializer_range": c.initializer_range,
            "use_cache": False,
            "tie_word_embeddings": False,
            "bos_token_id": None,
            "eos_token_id": None,
            "pad_token_id": 0,
            "torch_dtype": "float32",
            "posym": {"model": c.to_dict(), "hf_compatible": hf_compatible},
        }
