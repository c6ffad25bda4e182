"""Paper C's run grid: each arm of its constrained training (``c.training.run``, spec §C6) is a variant of the
``c.training`` settings (its position scheme over ``training.model``; its penalty and λ are the arm's objective),
trained for every ``training.seeds`` seed on the random-map task. Light: the workflow reads it."""

from __future__ import annotations

from collections.abc import Mapping

from posym.pipeline import variants
from posym.pipeline.scale import Scale


def trained_scale(section: dict) -> Scale:
    """The size of the constrained training that claim C-4 judges (steps: the cap; seeds may stop earlier)."""
    training = section["training"]
    model, train = training["model"], training["train"]
    return Scale(model["n_layer"], model["n_head"], training["task"]["length"], train["max_steps"], train["batch_size"], len(training["seeds"]))

#: The task of every arm's runs (the random-map stream of c.training.task).
TASK = "random_map"


def arm_overrides(spec: Mapping) -> dict:
    """An arm's overrides of the ``c.training`` settings."""
    return {"model": {"position": spec["position"]}}


def run_grid(section: dict) -> variants.RunGrid:
    training = section["training"]
    arms = {arm: arm_overrides(training["arms"][arm]) for arm in training["run"]}
    rows = [{"variant": arm, "task": TASK, "seed": seed} for arm in arms for seed in training["seeds"]]
    return variants.RunGrid(arms, {variants.OWN: rows})
