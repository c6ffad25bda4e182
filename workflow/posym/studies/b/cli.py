"""Paper B's commands (``posym b <command>``): the analyses of a trained run, one per job of the study's rules;
their flags are those of the study's jobs table (``jobs.py``).

Each reads its settings from the ``b`` section of the configuration: the rules pass them with ``--settings``,
people with ``--config`` / ``--set`` (``posym b ablation ... --set ablation.samples=500``); the schema's defaults
fill the rest. Training and the test evaluation are the core's ``posym train`` and ``posym evaluate``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from posym.pipeline.config import command_settings
from posym.data.files import read_json, write_csv

log = logging.getLogger("posym.b")

STUDY = "b"


def _final(index: Path):
    """The run's final model and the precision it was trained at."""
    from posym.training.checkpoints import load_final_model

    model, _, _ = load_final_model(index)
    return model, read_json(index)["train"].get("precision", "fp32")


def cmd_ablation(args) -> None:
    from posym.data import datasets
    from posym.data.tasks import TaskData

    from .deposit import ablate_heads

    section = command_settings(args, STUDY, "ablation")["ablation"]
    model, precision = _final(args.index)
    stored = {"train": args.train_data, "test": args.test_data}
    parts = [datasets.load_split(stored[split]).select(slice(0, section["samples"])) for split in section["splits"]]
    data = parts[0] if len(parts) == 1 else TaskData.concatenate(parts)
    table = ablate_heads(model, data, section["mla"], precision)
    write_csv(args.out, table)
    top = table.loc[table["drop"].idxmax()]
    log.info("baseline %.4f on %d samples; largest drop %.1f points (layer %d head %d)", top["baseline"], len(data), top["drop"], top["layer"], top["head"])


def _model_and_samples(args, key: str):
    """The command's settings (the section ``key``), the run's final model and the first ``samples`` of --data."""
    from posym.data import datasets

    section = command_settings(args, STUDY, key)[key]
    model, _ = _final(args.index)
    return section, model, datasets.load_split(args.data).select(slice(0, section["samples"]))


def cmd_toeplitz(args) -> None:
    from .toeplitz import check

    section, model, data = _model_and_samples(args, "toeplitz")
    table = check(model, data.tokens, section["tolerance"])
    write_csv(args.out, table)
    log.info("%s", table.iloc[0].to_dict())


def cmd_probe(args) -> None:
    from .probe import position_probe

    section, model, data = _model_and_samples(args, "probe")
    table = position_probe(model, data.tokens, section["ridge"])
    write_csv(args.out, table)
    log.info("position probe accuracy by layer: %s", " ".join(f"{a:.3f}" for a in table["accuracy"]))

