"""Wall times of a run's jobs, from Snakemake's ``benchmark:`` files (the machine: :func:`posym.pipeline.provenance.hardware_description`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

COLUMNS = ["rule", "stage", "task", "seed", "seeds", "seconds"]


def read_benchmarks(paths: Iterable[str | Path], stages: Mapping[str, str] = {}) -> pd.DataFrame:
    """Wall seconds of benchmark files named ``<rule>/<variant>/<task>-seed<seed>.tsv`` or ``<rule>.tsv`` (in a
    folder named ``benchmarks``); ``stages`` groups rules into the stages of a compute table (a rule not named is its own).

    A job that trains several seeds packed into one model is named by all of them, ``<rule>/<task>-seed0+1+2.tsv``:
    its ``seed`` is "0+1+2" and ``seeds`` (the seeds its time covers) 3; a job of one seed has ``seeds`` 1, a job
    not per seed (``<rule>.tsv``) none.
    """
    rows = []
    for path in map(Path, paths):
        seconds = float(pd.read_csv(path, sep="\t")["s"].iloc[-1])
        if path.parent.name == "benchmarks":
            rule, task, seed, seeds = path.stem, "all", None, pd.NA
        else:
            rule = path.parts[path.parts.index("benchmarks") + 1]
            task, _, seed = path.stem.rpartition("-seed")
            seeds = len(seed.split("+"))
        rows.append({"rule": rule, "stage": stages.get(rule, rule), "task": task, "seed": seed, "seeds": seeds, "seconds": seconds})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["seeds"] = frame["seeds"].astype("Int64")  # a count, missing for jobs not per seed
    return frame


def duration(seconds: float) -> str:
    """'1 h 5 min', '3 min 20 s', '12 s'; empty for NaN."""
    if not np.isfinite(seconds):
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else (f"{minutes} min {secs} s" if minutes else f"{secs} s")
