"""Verdicts on paper A's claims (spec §A12) in one table format, and the report's claims summary.

Every analysis writes its claim's checks as rows ``claim, task, check, seed, measured, expected,
verdict`` (verdict: pass, fail or not tested); with several seeds, :func:`with_seed_summary`
adds one "all seeds" row per check saying how many seeds pass.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

COLUMNS = ["claim", "task", "check", "seed", "measured", "expected", "verdict"]
ALL_SEEDS = "all"

# §A12, in the words of the spec; ``paper`` is the published value the check is built around.
CLAIMS = {
    "A-1": ("Training: both tasks reach ≥ 0.99 test accuracy on every hop", "≥ 0.999 on every hop"),
    "A-2": ("Hop-wise dynamics: Number learns hop by hop (spread ≥ 1000 steps), Letter all hops at once (≤ 300)", "Number spread ≈ 1350; Letter ≈ 50"),
    "A-3": ("Purity at convergence (γ = 0.1): Number ≥ 3 positional + ≥ 7 symbolic heads; Letter 0 positional, ≥ 10 symbolic; uniform at step 0", "Number 4 + 8; Letter 0 + 11"),
    "A-4": ("Frequency use: Number layers 0–3 use ID ≤ 3; symbolic layers ID ≥ 30; Letter layer 0 in between", "Table 1"),
    "A-5": ("Length extrapolation: Letter ≥ 0.90 at +500 and ≥ 0.85 at +850; Number ≤ 0.85 at +100 and ≤ 0.55 at +300", "Letter 0.955 at +500; Number 0.74 at +100"),
    "A-6": ("Theory: the constructions compute Index/Retrieval exactly; Δ(n) within the Thm 3.2 bounds; Fig 5A values", "0.303 plateau, 0.2437 at n = 9, 0.291 → 0.131"),
    "A-7": ("LLM probes: Letter > Number at lengths 32, 100 and 300 (substitute: a local open RoPE model)", "Table 3 (closed APIs)"),
}


def verdict(passed: bool | None) -> str:
    return "not tested" if passed is None else ("pass" if passed else "fail")


def row(claim: str, check: str, measured: str, expected: str, passed: bool | None, *, task: str = "", seed="") -> dict:
    return {
        "claim": claim,
        "task": task,
        "check": check,
        "seed": str(seed),
        "measured": measured,
        "expected": expected,
        "verdict": verdict(passed),
    }


def with_seed_summary(rows: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows plus, for each check tested on several seeds, 'k of n seeds pass' (pass only if all do)."""
    table = pd.DataFrame(rows, columns=COLUMNS) if not isinstance(rows, pd.DataFrame) else rows[COLUMNS]
    parts = []
    for _, group in table.groupby(["claim", "task", "check"], sort=False):
        parts.append(group)
        if group["seed"].nunique() < 2:
            continue
        tested = group[group["verdict"] != "not tested"]
        passes = int((tested["verdict"] == "pass").sum())
        summary = group.iloc[0].to_dict() | {
            "seed": ALL_SEEDS,
            "measured": f"{passes} of {len(tested)} seeds pass" if len(tested) else "no seed tested",
            "verdict": verdict(None if tested.empty else passes == len(tested)),
        }
        parts.append(pd.DataFrame([summary]))
    return pd.concat(parts, ignore_index=True) if parts else table


def summary(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """One row per claim of §A12: statement, the paper's value, how many checks pass, overall verdict.

    Only the 'all seeds' rows count where a check was run on several seeds.
    """
    found = pd.concat([t[COLUMNS] for t in tables], ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS)
    rows = []
    for claim, (statement, paper) in CLAIMS.items():
        checks = found[found["claim"] == claim]
        several = checks.groupby(["task", "check"])["seed"].transform(lambda s: (s == ALL_SEEDS).any()) if len(checks) else []
        counted = checks[(checks["seed"] == ALL_SEEDS) | ~pd.Series(several, index=checks.index, dtype=bool)] if len(checks) else checks
        tested = counted[counted["verdict"] != "not tested"]
        passes = int((tested["verdict"] == "pass").sum())
        if tested.empty:
            overall = "not tested"
        elif passes == len(tested):
            overall = "pass"
        elif passes == 0:
            overall = "fail"
        else:
            overall = "partly"
        rows.append(
            {
                "claim": claim,
                "statement": statement,
                "paper": paper,
                "ours": f"{passes} of {len(tested)} checks pass" if len(tested) else "—",
                "verdict": overall,
            }
        )
    return pd.DataFrame(rows)
