"""Constraints of paper C's section that its JSON schema cannot express (called by posym.pipeline.config)."""

from __future__ import annotations


def problems(section: dict, study_id: str) -> list[str]:
    rope = section["checks"]["rope"]
    found = []
    if rope["rotary_dim"] > rope["d_k"]:
        found.append(f"config key '{study_id}.checks.rope.rotary_dim': {rope['rotary_dim']} is more than d_k = {rope['d_k']}")
    if rope["rotary_dim"] % 2:
        found.append(f"config key '{study_id}.checks.rope.rotary_dim': {rope['rotary_dim']} is odd (dims rotate in pairs)")
    return found + training_problems(section.get("training"), study_id)


def training_problems(training: dict | None, study_id: str) -> list[str]:
    """The constrained training's: arms named, stops and checkpoints on evaluation steps, heads that fit RoPE."""
    if training is None:
        return []
    found = []
    key = f"config key '{study_id}.training"
    for arm in training["run"]:
        if arm not in training["arms"]:
            found.append(f"{key}.run': no arm {arm!r} in training.arms ({', '.join(training['arms'])})")
    train, model = training["train"], training["model"]
    for name in ("stop_after_formation", "checkpoint_every"):
        if train[name] is not None and train[name] % train["eval_every"]:
            found.append(f"{key}.train.{name}': {train[name]} is not a multiple of train.eval_every = {train['eval_every']}")
    if model["d_model"] % model["n_head"]:
        found.append(f"{key}.model.n_head': {model['n_head']} does not divide d_model = {model['d_model']}")
    elif model["rotary_dim"] is not None and (model["rotary_dim"] % 2 or model["rotary_dim"] > model["d_model"] // model["n_head"]):
        found.append(f"{key}.model.rotary_dim': {model['rotary_dim']} must be even and at most the head size {model['d_model'] // model['n_head']}")
    return found
