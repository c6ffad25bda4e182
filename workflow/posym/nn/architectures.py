"""Which model a study trains, and how a checkpoint names its model so that it loads again.

The core's model is the GPT-J decoder of :mod:`posym.nn.gptj` (paper A). A study with a model of its own puts it
in ``posym/studies/<id>/architecture.py``, which defines ``model_config(vocab_size, settings)``: the config of
its model from the study's ``model`` settings. A config has ``build(members)``, which makes the model, and
``to_dict()``; the model follows the interface the trainer and the checkpoints use (members, ``initialise``,
``forward(ids, dropout=...)`` returning logits, ``decays(name)``, ``checkpoint_tensors(m)``,
``load_checkpoint_tensors(state, m)``, ``checkpoint_config()``, ``member(m)``). A checkpoint's
``config.json`` records the study under ``posym.study`` (none: the core's GPT-J), so loading needs no guess.
"""

from __future__ import annotations

from typing import Any, Mapping

from posym import registry
from posym.nn.gptj import ModelConfig


def model_config(study_id: str | None, vocab_size: int, settings: Mapping[str, Any]):
    """The config of the model that ``study_id`` trains, from its ``model`` settings (and the vocabulary size)."""
    module = _architecture(study_id)
    if module is None:
        return ModelConfig(vocab_size=vocab_size, **settings)
    return module.model_config(vocab_size, settings)


def from_checkpoint(saved: Mapping[str, Any]):
    """The model config a checkpoint's ``config.json`` records (its ``posym`` entry)."""
    settings = dict(saved["model"])
    study_id = saved.get("study")
    if _architecture(study_id) is None:
        return ModelConfig.from_dict(settings)
    return model_config(study_id, settings.pop("vocab_size"), settings)


def _architecture(study_id: str | None):
    if study_id is None:
        return None
    return registry.study_module(study_id, "architecture")
