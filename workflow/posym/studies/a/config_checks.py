"""Constraints between keys of paper A's config section that its schema cannot express."""

from __future__ import annotations

import math


def problems(section: dict, prefix: str) -> list[str]:
    """What is wrong with the section, each naming its key as ``<prefix>.<key>``."""
    found = []

    def problem(key: str, text: str) -> None:
        found.append(f"config key '{prefix}.{key}': {text}")

    data, model = section["data"], section["model"]
    if section["length"]["samples"] > data["test_samples"]:
        problem("length.samples", f"{section['length']['samples']} exceeds data.test_samples={data['test_samples']}")
    if section["geometry"]["layer"] >= model["n_layer"]:
        problem("geometry.layer", f"{section['geometry']['layer']} is not a layer of a {model['n_layer']}-layer model")
    theory = section["theory"]
    # Thm 3.1 needs 0 < theta < omega / (2 n0) with omega = 2 pi / |ALPH| for Retrieval to be exact.
    limit = math.pi / (theory["alphabet"] * theory["max_length"])
    if theory["theta_retrieval"] >= limit:
        problem("theory.theta_retrieval", f"{theory['theta_retrieval']} must be below pi / (alphabet * max_length) = {limit:.4g}")
    if section["discrepancy"]["samples"] > section["length"]["samples"]:
        problem("discrepancy.samples", f"{section['discrepancy']['samples']} exceeds length.samples={section['length']['samples']}")
    final, every = section["final_checkpoint"], section["train"]["checkpoint_every"]
    if final["choice"] == "best_validation" and final["validation_every"] % every:
        problem("final_checkpoint.validation_every", f"{final['validation_every']} is not a multiple of train.checkpoint_every={every}: the compared steps must have checkpoints")
    if section["llm"]["model"] and section["llm"]["endpoint_model"]:
        problem("llm.endpoint_model", "set llm.model or llm.endpoint_model, not both")
    low, high = section["claims"]["a4"]["letter_layer0_ids"]
    if low > high:
        problem("claims.a4.letter_layer0_ids", f"[{low}, {high}] is not a band: its lowest ID exceeds its highest")
    return found
