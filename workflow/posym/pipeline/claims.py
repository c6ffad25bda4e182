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
implementation, not the paper, so it never decides. Nor does a check that a model which learned nothing passes:
its row says so (``supporting``: why, e.g. a one-sided "≤ 0.85" that chance accuracy meets), and the tests run
every deciding check on untrained models to keep that true. A check that reads a model which did not learn its
task is not tested (``untrained``): a claim whose deciding checks are all such is "not testable at this size".
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from posym.pipeline.scale import JUDGED_ON

COLUMNS = [
    "claim", "task", "check", "seed", "measured", "expected", "source", "verdict", "evidence", "ours", "paper", "difference", "relative",
    "supporting", "untrained",
]  # fmt: skip
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
#: The verdict of a claim whose deciding checks all read models that did not learn their task at this size.
NOT_TESTABLE_AT_SIZE = "not testable at this size"
#: The verdict of a claim whose checks do not apply to the configuration (say, RoPE checks on an ALiBi model).
NOT_APPLICABLE = "not applicable"
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_TESTABLE_AT_SIZE, NOT_TESTABLE, NOT_APPLICABLE)

#: How a study's headline names the claims of each kind (a claim's kind: the first it names).
KIND_LABELS = {
    "trained": "trained",
    "theorem": "theory",
    "released": "released-data",
    "substitute": "substitute-model",
    "code": "code",
}


def unknown_kinds(kinds: Iterable[str]) -> list[str]:
    return [kind for kind in kinds if kind not in EVIDENCE]


#: The verdict of a row that reports what its claim does not judge.
OBSERVATION = "observation"


def verdict(passed: bool | None) -> str:
    return "not tested" if passed is None else ("pass" if passed else "fail")


def row(
    claim: str, check: str, measured: str, expected: str, passed: bool | None, *, source: str, task: str = "", seed="",
    evidence: str = "", observation: bool = False, ours: float | None = None, paper: float | None = None,
    supporting: str = "", untrained: bool = False,
) -> dict:
    """One check's row. ``evidence``: its kind (:data:`EVIDENCE`) where it is not the claim's first kind;
    ``observation``: a row that reports without judging (its verdict :data:`OBSERVATION`, ``passed`` None);
    ``ours`` and ``paper``: the check's number and the paper's, whose difference (ours − paper, and relative to the
    paper's) says how far we are; ``supporting``: why the check cannot decide the claim (a model that learned
    nothing passes it), which makes it supporting evidence; ``untrained``: not tested (``passed`` None) because the
    model it reads did not learn its task."""
    if untrained and passed is not None:
        raise ValueError(f"claim {claim}, {check}: a check on a model that did not learn is not tested (passed None)")
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
        "supporting": supporting,
        "untrained": "yes" if untrained else "",
    }


def distance(ours: float | None, paper: float | None) -> dict:
    """ours, paper, ours − paper and (ours − paper) / |paper|; NaN where either is missing."""
    ours, paper = (float("nan") if v is None else float(v) for v in (ours, paper))
    difference = ours - paper
    relative = difference / abs(paper) if paper not in (0.0,) and not np.isnan(paper) else float("nan")
    return {"ours": ours, "paper": paper, "difference": difference, "relative": relative}


def with_seed_summary(rows: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows plus, for each check tested on several seeds, 'k of n seeds pass' (pass only if all do)."""
    table = _complete(pd.DataFrame(rows, columns=COLUMNS) if not isinstance(rows, pd.DataFrame) else rows)
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
            "untrained": "yes" if tested.empty and (group["untrained"] == "yes").all() else "",
            **distance(values.mean() if len(values) else None, paper.iloc[0] if len(paper) else None),
        }
        parts.append(pd.DataFrame([summary]))
    return pd.concat(parts, ignore_index=True) if parts else table


def _complete(table: pd.DataFrame) -> pd.DataFrame:
    """A check table in :data:`COLUMNS`, the text columns a table written before them lacks (``evidence``,
    ``supporting``, ``untrained``) empty, as are the empty cells of ``task`` and ``seed`` of a table read without
    ``keep_default_na=False`` (grouping by them would drop those rows)."""
    table = table.reindex(columns=COLUMNS)
    for column in ("task", "seed", "evidence", "supporting", "untrained"):
        table[column] = table[column].astype(object).where(table[column].notna(), "")
    return table


def summary(tables: Iterable[pd.DataFrame], claims: Iterable[Mapping], scale: Mapping | None = None) -> pd.DataFrame:
    """One row per claim (``claims``: the study's claim rows, ``id``, ``statement``, ``paper``, ``evidence`` (the
    kinds that decide it), optionally ``needs`` (what would make it testable, and which configuration supplies it)
    and, when the notebook that checks it does not apply, ``applicable`` false and the ``reason``): its verdict
    and how it was reached. Only the 'all seeds' rows count where a check was run on several seeds. ``scale``:
    the size the study trained at beside the paper's (posym.pipeline.scale.of_study), shown in the ``judged at``
    of each claim decided on trained models.

    A check decides when it is of a kind the claim names (not code) and no model that learned nothing passes it
    (its row's ``supporting`` is empty); ``why``: for a claim partly or not reproduced, its failing and untested
    deciding checks (:func:`why`).

    Verdicts: *reproduced* when every deciding check was tested and passes; *not reproduced* when none that was
    tested passes; *partly* otherwise, and ``why`` names what failed or went untested; *not testable at this size*
    when no deciding check was tested because every one reads a model that did not learn its task; *not testable
    here* when no deciding check was tested for another reason, or the claim is decided by code checks alone
    (they test posym, not the paper).
    """
    found = _found(tables)
    rows = []
    for claim in claims:
        kinds = list(claim.get("evidence") or ["trained"])
        deciding, supporting = split_checks(found, claim)
        overall, ours = _verdict(claim, kinds, deciding, supporting)
        tested = overall not in (NOT_TESTABLE, NOT_TESTABLE_AT_SIZE, NOT_APPLICABLE)
        rows.append(
            {"claim": claim["id"], "kind": kinds[0], "judged at": judged_at(kinds[0], scale),
             "distance": farthest(deciding) or (NO_NUMBER if tested and len(deciding) else ""),
             "statement": claim["statement"], "paper": claim["paper"],
             "evidence": ", ".join(kinds), "ours": ours, "why": why(deciding) if overall in (PARTLY, NOT_REPRODUCED) else "",
             "verdict": overall}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=SUMMARY)


def _found(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    tables = list(tables)
    # reindex, not select: a verdict table written before a column existed (say ``evidence``) still counts
    return _complete(pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS))


def split_checks(found: pd.DataFrame | Iterable[pd.DataFrame], claim: Mapping) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A claim's counted checks (its 'all seeds' rows where a check ran on several seeds, observations left out),
    split into those that decide it and the supporting rest: a deciding check is of a kind the claim names, not
    code, and not marked ``supporting`` (a model that learned nothing passes it)."""
    found = found if isinstance(found, pd.DataFrame) else _found(found)
    kinds = list(claim.get("evidence") or ["trained"])
    checks = found[(found["claim"] == claim["id"]) & (found["verdict"] != OBSERVATION)]
    several = checks.groupby(["task", "check"])["seed"].transform(lambda s: (s == ALL_SEEDS).any()) if len(checks) else []
    counted = checks[(checks["seed"] == ALL_SEEDS) | ~pd.Series(several, index=checks.index, dtype=bool)] if len(checks) else checks
    kind = counted["evidence"].where(counted["evidence"] != "", kinds[0])
    deciding = counted[kind.isin([k for k in kinds if k != CODE]) & (counted["supporting"] == "")]
    return deciding, counted[~counted.index.isin(deciding.index)]


#: The columns of :func:`summary`.
SUMMARY = ["claim", "kind", "judged at", "distance", "statement", "paper", "evidence", "ours", "why", "verdict"]
#: The distance of a judged claim none of whose tested deciding checks has both our number and the paper's.
NO_NUMBER = "no tested check has a number beside the paper's"


def judged_at(kind: str, scale: Mapping | None) -> str:
    """What a claim of ``kind`` was judged on: the trained size beside the paper's, or the data it read."""
    if kind == "trained":
        return scale.get("short", scale["line"]) if scale else ""
    return JUDGED_ON.get(kind, "")


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
    """How far we are: of the checks with the paper's number, the one with the largest relative difference to it
    ("A-3 number: pure positional heads 2 vs 4 (−2, −50 %)"), among those that failed where any did (a passing
    check is named only where all pass, and says so); empty where no tested check has the paper's number."""
    relative = pd.to_numeric(checks["relative"], errors="coerce")
    numbered = checks[relative.notna() & checks["verdict"].isin(["pass", "fail"])]  # an untested check measured nothing that counts
    if numbered.empty:
        return ""
    failing = numbered[numbered["verdict"] != "pass"]
    pool = failing if len(failing) else numbered
    r = pool.loc[relative[pool.index].abs().idxmax()]
    ours, paper, difference = (float(r[k]) for k in ("ours", "paper", "difference"))
    where = f"{r['task']}: " if r["task"] else ""
    passes = " (passes)" if r["verdict"] == "pass" else ""
    return f"{where}{r['check']}: {ours:.4g} vs {paper:.4g} ({difference:+.3g}, {100 * float(r['relative']):+.0f} %){passes}"


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
        if len(deciding) and (deciding["untrained"] == "yes").all():
            return NOT_TESTABLE_AT_SIZE, "; ".join(filter(None, [f"every deciding check reads a model that did not learn its task: {_clip(deciding['measured'].iloc[0])}", support]))
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


def claim_kinds(summary: pd.DataFrame) -> pd.Series:
    """Each claim's kind: the summary's ``kind``, or, in a summary recorded before it, the first of its
    ``evidence``."""
    if "kind" in summary and summary["kind"].notna().all():
        return summary["kind"].astype(str)
    if "evidence" in summary:
        return summary["evidence"].fillna("trained").astype(str).str.split(",").str[0].str.strip().replace("", "trained")
    return pd.Series(["trained"] * len(summary), index=summary.index)


def headline(name: str, summary: pd.DataFrame, scale: Mapping | None = None) -> str:
    """A study's verdicts in one line, the claims decided on models this run trained counted apart from those
    decided otherwise: "paper C: 1 of 2 trained claims reproduced, 1 not reproduced; also 1 of 1 theory claim
    reproduced, 1 of 1 released-data claim reproduced, 2 code claims not testable here". "reproduced" alone only
    when every claim of the kind is; a study trained below the paper's size (``scale``) says so after its name."""
    kinds = claim_kinds(summary)
    groups = [k for k in [*KIND_LABELS, *sorted(set(kinds) - set(KIND_LABELS))] if (kinds == k).any()]
    parts = [_group_text(KIND_LABELS.get(kind, kind), summary.loc[kinds == kind, "verdict"]) for kind in groups]
    if not parts:
        return f"{name}: no claims"
    if groups[0] != "trained":
        return f"{name}: no trained claims; " + ", ".join(parts)
    size = " (trained below the paper's size)" if scale is not None and scale.get("below") else ""
    return f"{name}{size}: " + parts[0] + ("; also " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def _group_text(label: str, verdicts: Iterable[str]) -> str:
    counts = Counter(verdicts)
    total = sum(counts.values())
    noun = "claim" if total == 1 else "claims"
    if counts[REPRODUCED] == total:
        return f"all {total} {label} {noun} reproduced" if total > 1 else f"its {label} claim reproduced"
    if not counts[REPRODUCED] and len(counts) == 1:
        (only,) = counts
        return f"{total} {label} {noun} {only}"
    parts = [f"{counts[REPRODUCED]} of {total} {label} {noun} reproduced"]
    parts += [f"{counts[v]} {v}" for v in VERDICTS[1:] if counts[v]]
    return ", ".join(parts)
