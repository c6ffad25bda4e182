"""The toy study's analysis: its final test accuracy and the verdicts of claim T-1 (what a study's analysis module
holds, CONTRIBUTING.md: one function ``claim_<id>`` per claim, its thresholds from the study's ``claims`` section)."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from posym.pipeline import claims


def claim_t1(final: pd.DataFrame, thresholds: Mapping) -> pd.DataFrame:
    """Claim T-1: every task and seed reaches ``thresholds["accuracy"]`` final test accuracy (``final``: one row per
    task and seed, its ``accuracy``). Rows in :mod:`posym.pipeline.claims`'s format, with a "k of n seeds pass" row
    per task when several seeds ran."""
    least = thresholds["accuracy"]
    rows = [
        claims.row(
            "T-1", f"final test accuracy ≥ {least:g}", f"{r.accuracy:.3f}", f"≥ {least:g}", r.accuracy >= least,
            source="the toy study's own threshold", task=r.task, seed=r.seed,
        )  # fmt: skip
        for r in final.itertuples()
    ]
    return claims.with_seed_summary(rows)
