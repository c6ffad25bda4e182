"""Which seeds a training job trains: one, or all of a task's seeds packed into one model (``train.pack_seeds``).

The workflow decides the packs when it builds the DAG, so this module imports nothing heavy (no torch): the
Snakefile reads it on a login node too. A pack is named by its seeds (``seed0``, ``seed0+1+2``); the name is the
``{pack}`` wildcard of the training rules.
"""

from __future__ import annotations

import shlex
from typing import Mapping, Sequence

PACK_SEEDS = ("auto", True, False)


def packs_seeds(train: Mapping) -> bool:
    """Whether the seeds of a task train as one job: ``pack_seeds`` true, or ``auto`` and the job asks for a GPU
    (device cuda or auto; the workflow decides before any job runs, so auto cannot look for a GPU itself)."""
    setting = train.get("pack_seeds", "auto")
    return setting is True or (setting == "auto" and train.get("device", "auto") != "cpu")


def pack_name(seeds: Sequence[int]) -> str:
    """A training job's name by its seeds: ``seed0`` for one, ``seed0+1+2`` for three packed."""
    return "seed" + "+".join(str(int(s)) for s in seeds)


def pack_members(name: str) -> list[int]:
    """The seeds of a pack named by :func:`pack_name`."""
    if not name.startswith("seed"):
        raise ValueError(f"{name!r} is not a pack name (seed0, seed0+1+2, ...)")
    return [int(s) for s in name[len("seed"):].split("+")]


def seed_pack(train: Mapping, seeds: Sequence[int], seed: int) -> str:
    """The name of the training job that trains ``seed``: all of ``seeds`` when they are packed, else its own."""
    return pack_name(seeds if packs_seeds(train) and seed in seeds else [seed])


def train_outputs_options(choice: str, every: int | None = None, validation: str | None = None) -> str:
    """The options of ``posym train-outputs`` (a member's tables, from its pack's checkpoints) for a final
    checkpoint ``choice``: the last, or the best on the ``validation`` split compared every ``every`` steps."""
    if choice != "best_validation":
        return "--final last"
    return shlex.join(["--final", choice, "--validation-every", str(every), "--validation-data", validation])
