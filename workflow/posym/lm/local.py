"""A local Hugging Face causal language model and its tokenizer, loaded offline.

A model is a directory already on disk: weights are never downloaded (``local_files_only=True``), and only
safetensors are read, nothing is unpickled. A directory that :mod:`posym.lm.pretrained` converted (from a GGUF file
or a weight package) is verified against its checksums before it is loaded. ``transformers`` and torch are imported
only when a model is loaded, so importing this module is cheap.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("posym.lm")


class LocalModelError(RuntimeError):
    """A local model cannot be loaded as asked (no such directory, no safetensors weights, no chat template)."""


@dataclass
class LocalModel:
    """A loaded causal LM and its tokenizer. ``chat``: wrap each prompt as one user turn of the chat template."""

    model: object
    tokenizer: object
    name: str
    chat: bool = False

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def separator(self) -> str:
        """What precedes the answer: a space after the raw prompt's ``Output:``, nothing after a chat header."""
        return "" if self.chat else " "

    def prompt_text(self, prompt: str) -> str:
        if not self.chat:
            return prompt
        messages = [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def prompt_ids(self, text: str) -> list[int]:
        """Token ids of a prompt text; the tokenizer's special tokens (e.g. BOS) only for raw prompts, a chat template
        writes its own."""
        return self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"]

    def stop_ids(self) -> set[int]:
        """End-of-sequence ids of the tokenizer and the generation config (which may list several)."""
        ids = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            ids.update(value if isinstance(value, (list, tuple)) else [value])
        return ids - {None}


def load_local_model(
    path: str | os.PathLike,
    device: str = "auto",
    dtype: str = "auto",
    chat_template: str = "auto",
    name: str | None = None,
) -> LocalModel:
    """Load a causal LM and tokenizer from a local directory; nothing is ever fetched from the Hub.

    ``chat_template``: "on" / "off", or "auto" = use the tokenizer's chat template when it has one (instruct
    models were probed through chat APIs in the paper; base models get the raw few-shot prompt).
    """
    path = Path(path)
    if not path.is_dir():
        raise LocalModelError(f"{path}: not a directory; llm.model must be a local Hugging Face model directory")
    from posym.lm import pretrained  # imports torch: only once a model is loaded
    from posym.nn.precision import resolve_device

    if (path / pretrained.MANIFEST).is_file():
        manifest = pretrained.verify(path)  # a converted model (posym convert-model): refused if altered since
        log.info("%s: %s from %s (%s)", path, manifest["name"], manifest["source"], manifest.get("quantisation") or "-")
    import torch

    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise LocalModelError("local models need transformers: pip install 'posym[models]'") from None
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    kwargs = {} if dtype == "auto" else {"dtype": getattr(torch, dtype)}
    # safetensors only: a pytorch_model.bin would be unpickled (torch.load), and posym unpickles nothing
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, use_safetensors=True, **kwargs)
    except OSError as err:
        raise LocalModelError(f"{path}: no usable safetensors weights ({err}); posym loads no pickled .bin weights") from err
    device = resolve_device(device)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise LocalModelError(f"{path}: the tokenizer has no chat template (use chat_template off or auto)")
    chat = chat_template == "on" or (chat_template == "auto" and has_template)
    log.info("loaded %s on %s (%s, chat template %s)", path, device, model.dtype, "on" if chat else "off")
    return LocalModel(model=model.to(device).eval(), tokenizer=tokenizer, name=name or path.name, chat=chat)
