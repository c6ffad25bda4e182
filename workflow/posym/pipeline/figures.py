"""Saving the figures and tables of the report, shared by every study's notebooks.

Every figure is written as PNG and SVG, every table as CSV and Markdown, each atomically, to the paths the
notebook's ``outputs`` parameter gives for that output (:meth:`posym.pipeline.study.Output.files`). With several seeds,
curves show the mean with a ±1 sd band (seaborn's ``errorbar="sd"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from posym.data.files import atomic_path, write_csv, write_text  # noqa: E402


def save_figure(fig: plt.Figure, output: Mapping[str, str | Path]) -> None:
    """Write ``fig`` to the output's files (``{"png": path, "svg": path}``) and close it."""
    for fmt in ("png", "svg"):
        with atomic_path(output[fmt]) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
    plt.close(fig)


def save_table(
    frame: pd.DataFrame, output: Mapping[str, str | Path], floatfmt: str = ".3f", formats: Mapping[str, str] | None = None
) -> None:
    """Write ``frame`` to the output's files (``{"csv": path, "md": path}``); see :func:`to_markdown`."""
    write_csv(output["csv"], frame)
    write_text(output["md"], to_markdown(frame, floatfmt, formats) + "\n")


def to_markdown(frame: pd.DataFrame, floatfmt: str = ".3f", formats: Mapping[str, str] | None = None) -> str:
    """A GitHub-style Markdown table (no extra dependency). Floats take ``floatfmt``, or ``formats[column]`` in the
    columns it names, so that a table of steps can keep a loss's decimals."""
    formats = formats or {}
    unknown = set(formats) - set(frame.columns)
    if unknown:
        raise KeyError(f"formats names columns the table lacks: {sorted(unknown)}")
    column_formats = [formats.get(column, floatfmt) for column in frame.columns]

    def cell(value, fmt: str) -> str:
        if isinstance(value, (float, np.floating)):
            return "" if np.isnan(value) else format(value, fmt)
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(map(cell, row, column_formats)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def read_runs(paths: Iterable[str | Path], tasks: Iterable[str], seeds: Iterable[int], text: Iterable[str] = ()) -> pd.DataFrame:
    """Concatenate per-run tables given in task-major order (as a notebook's inputs are), adding ``task`` and
    ``seed`` columns; the columns named in ``text`` are read as strings (paper A's ``hop``: '1'..'4', 'all')."""
    return read_run_tables(paths, [{"task": t, "seed": s} for t in tasks for s in seeds], text)


def read_run_tables(paths: Iterable[str | Path], runs: Iterable[Mapping], text: Iterable[str] = ()) -> pd.DataFrame:
    """Concatenate per-run tables, one per run in ``runs`` order, each with its run's keys as columns (``task``,
    ``seed``, and ``variant`` for a study that trains variants: the ``runs`` a notebook is given)."""
    runs, paths = list(runs), list(paths)
    if len(paths) != len(runs):
        raise ValueError(f"{len(paths)} tables for {len(runs)} runs")
    dtype = {column: str for column in text}
    frames = [pd.read_csv(p, dtype=dtype).assign(**run) for p, run in zip(paths, runs)]
    return pd.concat(frames, ignore_index=True)
