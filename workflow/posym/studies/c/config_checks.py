"""Constraints of paper C's section that its JSON schema cannot express (called by posym.config)."""

from __future__ import annotations


def problems(section: dict, study_id: str) -> list[str]:
    rope = section["checks"]["rope"]
    found = []
    if rope["rotary_dim"] > rope["d_k"]:
        found.append(f"config key '{study_id}.checks.rope.rotary_dim': {rope['rotary_dim']} is more than d_k = {rope['d_k']}")
    if rope["rotary_dim"] % 2:
        found.append(f"config key '{study_id}.checks.rope.rotary_dim': {rope['rotary_dim']} is odd (dims rotate in pairs)")
    return found
