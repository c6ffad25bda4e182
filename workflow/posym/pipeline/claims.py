"""Verdicts on a study's claims in one table format, and the report's claims summary.

Every analysis writes its claim's checks as rows ``claim, task, check, seed, measured, expected,
source, verdict`` (verdict: pass, fail or not tested); with several seeds, :func:`with_seed_summary`
adds one "all seeds" row per check saying how many seeds pass. The claims themselves (statement,
published value) are rows of the study's table (``study.yaml``).

``source`` says where a check's threshold comes from (the paper's sentence, figure value or the spec
section that sets it, or posym's own choice, named as such). It is a required argument of :func:`row`
so that no check can state a threshold without saying whose it is. A "not tested" row is also how a
check reports an observation that the claim does not judge (say, a case the theorem excludes): it is
shown but never counted by :func:`summary`.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

COLUMNS = ["claim", "task", "check", "seed", "measured", "expected", "source", "verdict"]
ALL_SEEDS = "all"
#: The verdict of a claim whose checks do not apply to the configuration (say, RoPE checks on an ALiBi model).
NOT_APPLICABLE = "not applicable"


def verdict(passed: bool | None) -> str:
    return "not tested" if passed is None else ("pass" if passed else "fail")


def row(
    claim: str, check: str, measured: str, expected: str, passed: bool | None, *, source: str, task: str = "", seed=""
) -> dict:
    return {
        "claim": claim,
        "task": task,
        "check": check,
        "seed": str(seed),
        "measured": measured,
        "expected": expected,
        "source": source,
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


def summary(tables: Iterable[pd.DataFrame], claims: Iterable[dict]) -> pd.DataFrame:
    """One row per claim (``claims``: the study's claim rows, ``id``, ``statement``, ``paper`` and, when the
    notebook that checks it does not apply, ``applicable`` false and the ``reason``): how many checks pass and
    the overall verdict, and how many checks were not tested. Only the 'all seeds' rows count where a check was run
    on several seeds.
    """
    tables = list(tables)
    # reindex, not select: a verdict table written before a column existed (say ``source``) still counts
    found = pd.concat([t.reindex(columns=COLUMNS) for t in tables], ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS)
    rows = []
    for claim in claims:
        checks = found[found["claim"] == claim["id"]]
        several = checks.groupby(["task", "check"])["seed"].transform(lambda s: (s == ALL_SEEDS).any()) if len(checks) else []
        counted = checks[(checks["seed"] == ALL_SEEDS) | ~pd.Series(several, index=checks.index, dtype=bool)] if len(checks) else checks
        tested = counted[counted["verdict"] != "not tested"]
        passes = int((tested["verdict"] == "pass").sum())
        if not claim.get("applicable", True):
            overall, ours = NOT_APPLICABLE, claim["reason"]
        elif tested.empty:
            overall, ours = "not tested", "—"
        else:
            overall = "pass" if passes == len(tested) else ("fail" if passes == 0 else "partly")
            ours = f"{passes} of {len(tested)} checks pass"
            if len(counted) > len(tested):  # a claim judged on part of its checks says so
                ours += f" ({len(counted) - len(tested)} not tested)"
        rows.append({"claim": claim["id"], "statement": claim["statement"], "paper": claim["paper"], "ours": ours, "verdict": overall})
    return pd.DataFrame(rows, columns=["claim", "statement", "paper", "ours", "verdict"])
