"""Verdicts on a study's claims in one table format, and the report's claims summary.

Every analysis writes its claim's checks as rows ``claim, task, check, seed, measured, expected, source, verdict,
evidence`` (verdict: pass, fail or not tested); with several seeds, :func:`with_seed_summary` adds one "all seeds"
row per check saying how many seeds pass. The claims themselves (statement, published value, the kinds of
evidence that decide them) are rows of the study's table (``study.yaml``).

``source`` says where a check's threshold comes from (the paper's sentence, figure value or the spec section that
sets it, or posym's own choice, named as such). It is a required argument of :func:`row` so that no check can
state a threshold without saying whose it is. ``evidence`` is the check's kind (:data:`EVIDENCE`), empty for the
claim's own first kind. A "not tested" row is also how a check reports an observation that the claim does not
judge (say, a case the theorem excludes): it is shown but never counted by :func:`summary`.

A claim is judged by its *deciding* checks, those of a kind the claim names (:func:`summary`); the others are
supporting evidence, shown and counted apart, and never make a claim reproduced. A code check tests posym's
implementation, not the paper, so it never decides.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

COLUMNS = ["claim", "task", "check", "seed", "measured", "expected", "source", "verdict", "evidence", "ours", "paper", "difference", "relative"]
#: The columns of a check's distance to the paper, where it has numbers (:func:`row`'s ``ours`` and ``paper``).
DISTANCE = ["ours", "paper", "difference", "relative"]
ALL_SEEDS = "all"

#: The kinds of evidence a check can be, as the report explains them.
EVIDENCE = {
    "trained": "measured on models this run trained",
    "released": "recomputed from the authors' released data",
    "theorem": "a numerical check of a stated theorem",
    "code": "a code check: an identity or construction that tests posym's implementation, not the paper",
    "substitute": "measured on a substitute for the paper's model",
}
CODE = "code"

#: A claim's verdicts, from best to worst, then the two that judge nothing.
REPRODUCED, PARTLY, NOT_REPRODUCED = "reproduced", "partly", "not reproduced"
NOT_TESTABLE = "not testable here"
#: The verdict of a claim whose checks do not apply to the configuration (say, RoPE checks on an ALiBi model).
NOT_APPLICABLE = "not applicable"
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_TESTABLE, NOT_APPLICABLE)


def unknown_kinds(kinds: Iterable[str]) -> list[str]:
    return [kind for kind in kinds if kind not in EVIDENCE]


#: The verdict of a row that reports what its claim does not judge.
OBSERVATION = "observation"


def verdict(passed: bool | None) -> str:
    return "not tested" if passed is None else ("pass" if passed else "fail")


def row(
    claim: str, check: str, measured: str, expected: str, passed: bool | None, *, source: str, task: str = "", seed="",
    evidence: str = "", observation: bool = False, ours: float | None = None, paper: float | None = None,
) -> dict:
    """One check's row. ``evidence``: its kind (:data:`EVIDENCE`) where it is not the claim's first kind;
    ``observation``: a row that reports without judging (its verdict :data:`OBSERVATION`, ``passed`` None);
    ``ours`` and ``paper``: the check's number and the paper's, whose difference (ours − paper, and relative to the
    paper's) says how far we are."""
    if evidence and evidence not in EVIDENCE:
        raise ValueError(f"claim {claim}: unknown kind of evidence {evidence!r} (known: {', '.join(EVIDENCE)})")
    return {
        "claim": claim,
        "task": task,
        "check": check,
        "seed": str(seed),
        "measured": measured,
        "expected": expected,
        "source": source,
        "verdict": OBSERVATION if observation else verdict(passed),
        "evidence": evidence,
        **distance(ours, paper),
    }


def distance(ours: float | None, paper: float | None) -> dict:
    """ours, paper, ours − paper and (ours − paper) / |paper|; NaN where either is missing."""
    ours, paper = (float("nan") if v is None else float(v) for v in (ours, paper))
    difference = ours - paper
    relative = difference / abs(paper) if paper not in (0.0,) and not np.isnan(paper) else float("nan")
    return {"ours": ours, "paper": paper, "difference": difference, "relative": relative}


def with_seed_summary(rows: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows plus, for each check tested on several seeds, 'k of n seeds pass' (pass only if all do)."""
    table = pd.DataFrame(rows, columns=COLUMNS) if not isinstance(rows, pd.DataFrame) else rows[COLUMNS]
    parts = []
    for _, group in table.groupby(["claim", "task", "check"], sort=False):
        parts.append(group)
        if group["seed"].nunique() < 2 or (group["verdict"] == OBSERVATION).all():
            continue
        tested = group[group["verdict"] != "not tested"]
        passes = int((tested["verdict"] == "pass").sum())
        measured = f"{passes} of {len(tested)} seeds pass" if len(tested) else "no seed tested"
        values = pd.to_numeric(group["ours"], errors="coerce").dropna()
        if len(values):  # the spread over seeds, and the mean's distance to the paper
            measured += f"; {values.mean():.4g} ± {values.std(ddof=1) if len(values) > 1 else 0:.2g} (range {values.min():.4g} … {values.max():.4g})"
        paper = pd.to_numeric(group["paper"], errors="coerce").dropna()
        summary = group.iloc[0].to_dict() | {
            "seed": ALL_SEEDS,
            "measured": measured,
            "verdict": verdict(None if tested.empty else passes == len(tested)),
            **distance(values.mean() if len(values) else None, paper.iloc[0] if len(paper) else None),
        }
        parts.append(pd.DataFrame([summary]))
    return pd.concat(parts, ignore_index=True) if parts else table


def summary(tables: Iterable[pd.DataFrame], claims: Iterable[Mapping]) -> pd.DataFrame:
    """One row per claim (``claims``: the study's claim rows, ``id``, ``statement``, ``paper``, ``evidence`` (the
    kinds that decide it), optionally ``needs`` (what would make it testable, and which configuration supplies it)
    and, when the notebook that checks it does not apply, ``applicable`` false and the ``reason``): its verdict
    and how it was reached. Only the 'all seeds' rows count where a check was run on several seeds.

    ``why``: for a claim partly or not reproduced, its failing and untested deciding checks (:func:`why`).

    Verdicts: *reproduced* when every deciding check was tested and passes; *not reproduced* when none that was
    tested passes; *partly* otherwise (some fail, or some were not tested); *not testable here* when no deciding
    check was tested, or the claim is decided by code checks alone (they test posym, not the paper).
    """
    tables = list(tables)
    # reindex, not select: a verdict table written before a column existed (say ``evidence``) still counts
    found = pd.concat([t.reindex(columns=COLUMNS) for t in tables], ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS)
    found["evidence"] = found["evidence"].astype(object).where(found["evidence"].notna(), "")
    rows = []
    for claim in claims:
        kinds = list(claim.get("evidence") or ["trained"])
        checks = found[(found["claim"] == claim["id"]) & (found["verdict"] != OBSERVATION)]
        several = checks.groupby(["task", "check"])["seed"].transform(lambda s: (s == ALL_SEEDS).any()) if len(checks) else []
        counted = checks[(checks["seed"] == ALL_SEEDS) | ~pd.Series(several, index=checks.index, dtype=bool)] if len(checks) else checks
        kind = counted["evidence"].where(counted["evidence"] != "", kinds[0])
        deciding = counted[kind.isin([k for k in kinds if k != CODE])]
        supporting = counted[~counted.index.isin(deciding.index)]
        overall, ours = _verdict(claim, kinds, deciding, supporting)
        rows.append(
            {"claim": claim["id"], "distance": farthest(deciding), "statement": claim["statement"], "paper": claim["paper"],
             "evidence": ", ".join(kinds), "ours": ours, "why": why(deciding) if overall in (PARTLY, NOT_REPRODUCED) else "",
             "verdict": overall}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=SUMMARY)


#: The columns of :func:`summary`.
SUMMARY = ["claim", "distance", "statement", "paper", "evidence", "ours", "why", "verdict"]


def why(deciding: pd.DataFrame, shown: int = 2) -> str:
    """Why a claim is not reproduced: its failing deciding checks, then those not tested, each with what was
    measured against what was expected ("fails: count: NoPE − RoPE: −27.7 points (expected > 0)"), the first
    ``shown`` of each, and how many more."""
    parts = []
    for verdict_, label in (("fail", "fails"), ("not tested", "not tested")):
        found = deciding[deciding["verdict"] == verdict_]
        if found.empty:
            continue
        named = [f"{r['task'] + ': ' if r['task'] else ''}{r['check']}: {_clip(r['measured'])} (expected {r['expected']})" for _, r in found.head(shown).iterrows()]
        more = f"; and {len(found) - shown} more" if len(found) > shown else ""
        parts.append(f"{label}: " + "; ".join(named) + more)
    return " | ".join(parts)


def farthest(checks: pd.DataFrame) -> str:
    """How far we are: the check with the largest relative difference to the paper ("A-3 number: pure positional
    heads 2 vs 4 (−2, −50 %)"); empty where no check has the paper's number."""
    relative = pd.to_numeric(checks["relative"], errors="coerce")
    if relative.notna().sum() == 0:
        return ""
    r = checks.loc[relative.abs().idxmax()]
    ours, paper, difference = (float(r[k]) for k in ("ours", "paper", "difference"))
    where = f"{r['task']}: " if r["task"] else ""
    return f"{where}{r['check']}: {ours:.4g} vs {paper:.4g} ({difference:+.3g}, {100 * float(r['relative']):+.0f} %)"


def _clip(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _verdict(claim: Mapping, kinds: list[str], deciding: pd.DataFrame, supporting: pd.DataFrame) -> tuple[str, str]:
    if not claim.get("applicable", True):
        if claim.get("needs"):  # the analysis needs something this configuration lacks, and says where to get it
            return NOT_TESTABLE, f"needs {claim['needs']}"
        return NOT_APPLICABLE, claim["reason"]
    support = _counts(supporting, "supporting checks") if len(supporting) else ""
    if set(kinds) == {CODE}:
        return NOT_TESTABLE, "; ".join(filter(None, ["decided by code checks alone, which test posym, not the paper", support]))
    tested = deciding[deciding["verdict"] != "not tested"]
    if tested.empty:
        why = deciding["measured"].iloc[0] if len(deciding) else "no deciding check ran on this configuration"
        return NOT_TESTABLE, "; ".join(filter(None, [f"needs {claim['needs']}" if claim.get("needs") else why, support]))
    passes = int((tested["verdict"] == "pass").sum())
    untested = len(deciding) - len(tested)
    if passes == len(tested) and not untested:
        overall = REPRODUCED
    elif passes == 0:
        overall = NOT_REPRODUCED
    else:
        overall = PARTLY
    ours = f"{passes} of {len(tested)} deciding checks pass" + (f" ({untested} not tested)" if untested else "")
    return overall, "; ".join(filter(None, [ours, support]))


def _counts(table: pd.DataFrame, what: str) -> str:
    tested = table[table["verdict"] != "not tested"]
    text = f"{what}: {int((tested['verdict'] == 'pass').sum())} of {len(tested)} pass"
    return text + (f" ({len(table) - len(tested)} not tested)" if len(table) > len(tested) else "")


def headline(name: str, verdicts: Iterable[str]) -> str:
    """A study's verdicts in one line: "paper B: 2 of 5 claims reproduced, 1 partly, 1 not reproduced, 1 not
    testable here". "reproduced" alone only when every claim is."""
    counts = Counter(verdicts)
    total = sum(counts.values())
    if total and counts[REPRODUCED] == total:
        return f"{name}: all {total} claims reproduced" if total > 1 else f"{name}: its claim reproduced"
    parts = [f"{counts[REPRODUCED]} of {total} claims reproduced"]
    parts += [f"{counts[v]} {v}" for v in VERDICTS[1:] if counts[v]]
    return f"{name}: " + ", ".join(parts)
