"""Paper C's constrained-training summary (spec §C6, claim C-4): formation steps per arm (Table 4), the four
pre-registered contrasts and claim C-4's checks, from the per-arm tables of :mod:`posym.studies.c.training`.

A seed that never reaches the formation threshold within ``max_steps`` counts as forming one evaluation after
the cap (censored: the rank tests then place it last, as they should), and the table says how many formed.
Contrasts are one-sided exact Mann-Whitney tests (scipy) of "the larger arm forms later", BH-adjusted over the
contrasts that both arms of which ran (statsmodels); the shift is the difference of the medians. Each C-4 check
is a measured value, a threshold and a pass/fail (:mod:`posym.pipeline.claims`); besides the spec's four, C-4
judges the paper's other published results on these runs: each contrast's BH q, and the order of the arms' mean
formation steps (APE sym the slowest; the whole order of Table 4's means).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from posym.pipeline import claims as verdicts

from . import paper

SOURCE = "spec §C7.4 (paper §6, Table 4 / Fig 5)"


def censored_steps(runs: pd.DataFrame, training: Mapping) -> pd.Series:
    """Formation steps with a seed that never formed placed one evaluation past ``max_steps``."""
    cap = training["train"]["max_steps"] + training["train"]["eval_every"]
    return runs["formation_step"].fillna(cap)


def table4(runs: pd.DataFrame, training: Mapping) -> pd.DataFrame:
    """Formation step per arm: median, mean ± sd, n (and how many formed), beside the paper's mean ± sd."""
    runs = runs.assign(steps=censored_steps(runs, training))
    rows = []
    for arm, group in runs.groupby("arm", sort=False):
        published = paper.FORMATION.get(arm, (np.nan, np.nan, np.nan))
        rows.append({
            "arm": arm, "n": len(group), "formed": int(group["formation_step"].notna().sum()), "median": float(group["steps"].median()),
            "mean": float(group["steps"].mean()), "sd": float(group["steps"].std(ddof=1)) if len(group) > 1 else np.nan,
            "steps": " ".join(str(int(s)) for s in group["steps"]), "final_ce_pred": float(group["final_ce_pred"].mean()),
            "mean (paper)": published[0], "sd (paper)": published[1], "n (paper)": published[2],
        })  # fmt: skip
    return pd.DataFrame(rows)


def contrasts(runs: pd.DataFrame, training: Mapping) -> pd.DataFrame:
    """The pre-registered contrasts whose arms ran: U, exact one-sided p, BH q, median shift, the paper's."""
    steps = runs.assign(steps=censored_steps(runs, training)).groupby("arm")["steps"].apply(list)
    rows = []
    for cid, (larger, smaller, p_paper, q_paper, shift_paper) in paper.CONTRASTS.items():
        if larger not in steps or smaller not in steps:
            continue
        a, b = np.asarray(steps[larger], float), np.asarray(steps[smaller], float)
        test = stats.mannwhitneyu(a, b, alternative="greater", method="exact")
        rows.append({
            "contrast": cid, "larger": larger, "smaller": smaller, "n": f"{len(a)} vs {len(b)}", "U": float(test.statistic),
            "p": float(test.pvalue), "shift": float(np.median(a) - np.median(b)), "ratio": float(a.mean() / b.mean()),
            "p (paper)": p_paper, "q (paper)": q_paper, "shift (paper)": shift_paper,
        })  # fmt: skip
    table = pd.DataFrame(rows)
    if len(table):
        table.insert(table.columns.get_loc("p") + 1, "q", multipletests(table["p"], method="fdr_bh")[1])
    return table


def measure(runs: pd.DataFrame, training: Mapping, imag_null: np.ndarray) -> pd.DataFrame:
    """Claim C-4's checks as rows ``check, measured, threshold, kind, passed, ours, paper`` (kind: order, min, max).

    Besides the spec's checks (§C7.4), the paper's other published results on these runs: each pre-registered
    contrast that ran must reach BH q ≤ ``contrast_q`` (:func:`contrasts`, computed here from ``runs``), APE sym
    must be the slowest arm by mean formation, and the arms' means must be in the order of Table 4's. Every order
    check is strict: a tie fails, as where every seed of a model that learned nothing sits censored at the cap.

    The sym-RoPE prev head's rope_imag_frac is judged against ``imag_null``, the rope_imag_frac of random heads of
    its shape (posym.studies.c.training.random_imag_fracs): it must exceed their ``sym_prev_imag_quantile``
    quantile. A random head's is 0.5 on average, so the spec's "≥ 0.4" would pass any head.

    Two checks judge the end of training: every arm's final ce_pred against its free arm (the capability floor)
    and the sym-RoPE prev head's dir_frac (how hard the penalty is enforced); the paper reads both after its
    6000 steps. Where seeds stop ``train.stop_after_formation`` steps after forming, they end at different,
    earlier steps, so these two are measured and shown but not judged (``passed`` None: "not tested")."""
    thresholds = training["claims"]
    margin = training["train"]["stop_after_formation"]
    at_the_end = None if margin is None else f" - not judged: seeds stop {margin} steps after forming, the paper reads the end of its {paper.TRAINING_STEPS} steps"
    runs = runs.assign(steps=censored_steps(runs, training))
    median = runs.groupby("arm")["steps"].median()
    mean = runs.groupby("arm")["steps"].mean()
    rows = []

    def add(*args, **kwargs):
        rows.append(_check(*args, **kwargs))

    order = ["ape_free", "rope_free", "rope_sym"]
    if all(a in median for a in order):
        values = [median[a] for a in order]
        add("median formation: APE free < RoPE free < RoPE sym", _chain(values), "strictly increasing (a tie fails)", "order",
            bool(values[0] < values[1] < values[2]))  # fmt: skip
    rows += [row for row in (_slowest_check(runs, mean), _order_check(mean)) if row is not None]
    rows += _significance_checks(runs, training)
    if "ape_sym" in mean and "ape_free" in mean:
        ratio = mean["ape_sym"] / mean["ape_free"]
        add("mean formation APE sym / APE free", f"{ratio:.2f}", f"≥ {thresholds['ape_sym_ratio']:g} (paper {paper.APE_SYM_RATIO}×)", "min",
            bool(ratio >= thresholds["ape_sym_ratio"]), ratio, paper.APE_SYM_RATIO)  # fmt: skip
    final = runs.groupby("arm")["final_ce_pred"].mean()
    position = runs.groupby("arm")["position"].first()
    free = {position[a]: a for a in final.index if runs.loc[runs["arm"] == a, "penalty"].iloc[0] == "none"}
    for arm in final.index:
        reference = free.get(position[arm])
        if reference is None or reference == arm:
            continue
        gap = final[arm] - final[reference]
        add(f"final ce_pred: {arm} − {reference} (nats)", f"{gap:+.3f} ({final[arm]:.3f} vs {final[reference]:.3f})",
            f"|gap| ≤ {thresholds['ce_tolerance']:g}{at_the_end or ''}", "max", None if at_the_end else bool(abs(gap) <= thresholds["ce_tolerance"]))  # fmt: skip
    sym = runs[runs["arm"] == "rope_sym"]
    if len(sym):
        imag, direction = sym["prev_rope_imag_frac"].mean(), sym["prev_dir_frac"].mean()
        quantile = thresholds["sym_prev_imag_quantile"]
        floor = float(np.quantile(imag_null, quantile))
        add("RoPE sym prev head: rope_imag_frac (mean over seeds) above random heads'", f"{imag:.3f} (paper {paper.SYM_PREV_HEAD['rope_imag_frac']})",
            f"> {floor:.3f}, the {quantile:g} quantile of {len(imag_null)} random heads (mean {imag_null.mean():.3f})", "min",
            bool(imag > floor), imag, paper.SYM_PREV_HEAD["rope_imag_frac"])  # fmt: skip
        add("RoPE sym prev head: dir_frac (mean over seeds)", f"{direction:.4f} (paper ≈ {paper.SYM_PREV_HEAD['dir_frac']})",
            f"≤ {thresholds['sym_prev_dir_frac']:g}{at_the_end or ''}", "max", None if at_the_end else bool(direction <= thresholds["sym_prev_dir_frac"]), direction, paper.SYM_PREV_HEAD["dir_frac"])  # fmt: skip
    return pd.DataFrame(_gated(rows, final, training), columns=[*MEASURED, "untrained"])


#: The columns of :func:`measure`'s table (and ``untrained``: not tested because an arm did not learn the task).
MEASURED = ["check", "measured", "threshold", "kind", "passed", "ours", "paper"]


def learned_ce(training: Mapping) -> float:
    """The final ce_pred below which an arm has learned the task: the paper's formation threshold, ½(ln V + 0.15)
    (2.154 for V = 64), whatever floor ``formation.floor`` sets for the formation step (the test configurations
    raise it so that runs of tens of steps "form")."""
    return 0.5 * (math.log(training["task"]["vocab_size"]) + paper.FORMATION_FLOOR)


def _gated(rows: list[dict], final: pd.Series, training: Mapping) -> list[dict]:
    """``rows`` with every check not tested where the arms it reads did not learn the task (final ce_pred at or
    above :func:`learned_ce`): formation steps of models that learned nothing are noise, which an order or a ratio
    can pass. Every formation check is read against a free arm, so both free arms must have learned; the sym-RoPE
    prev head's checks also need the sym arm to have learned (else it has no circuit to read)."""
    bound = learned_ce(training)
    failed = [a for a in ("ape_free", "rope_free") if a in final and final[a] >= bound]
    sym = "rope_sym" in final and final["rope_sym"] >= bound
    gated = []
    for row in rows:
        arms = failed + (["rope_sym"] if sym and row["check"].startswith("RoPE sym prev head") else [])
        if not arms:
            gated.append(row | {"untrained": False})
            continue
        ends = ", ".join(f"{a} {final[a]:.3f}" for a in arms)
        reason = f"not tested: final ce_pred {ends} ≥ {bound:.3f} (the paper's formation threshold), the arm did not learn the task at this size"
        gated.append(row | {"passed": None, "measured": f"{row['measured']}; {reason}", "untrained": True})
    return gated


def _check(check, measured, threshold, kind, passed, ours=None, paper_value=None) -> dict:
    """One row of :func:`measure`'s table."""
    return {"check": check, "measured": measured, "threshold": threshold, "kind": kind, "passed": passed, "ours": ours, "paper": paper_value}


def _chain(values) -> str:
    """Values joined by < where each is above the last, = where tied, > where below ("600 < 1300 = 1300")."""
    signs = ["<" if b > a else "=" if b == a else ">" for a, b in zip(values, values[1:])]
    return f"{values[0]:.0f}" + "".join(f" {sign} {v:.0f}" for sign, v in zip(signs, values[1:]))


def _significance_checks(runs: pd.DataFrame, training: Mapping) -> list[dict]:
    """One check per pre-registered contrast that ran: its BH q at most ``claims.contrast_q`` (paper q .005-.016).

    Identical arms give q near 1, so an untrained model fails. The threshold names the smallest exact p the seeds
    allow, 1/C(n+m, n) (0.05 at 3 against 3): below it no contrast can pass, however well its arms separate."""
    limit = training["claims"]["contrast_q"]
    sizes = runs.groupby("arm").size()
    rows = []
    for _, c in contrasts(runs, training).iterrows():
        smallest = 1 / math.comb(sizes[c["larger"]] + sizes[c["smaller"]], sizes[c["smaller"]])
        # exact p's are ratios of counts and BH multiplies them back: at 3 seeds a complete separation gives q = 0.05
        # itself, which rounding must not push over a 0.05 threshold
        passed = bool(c["q"] <= limit * (1 + 1e-9))
        rows.append(_check(f"contrast {c['contrast']}: {c['larger']} forms later than {c['smaller']} (BH q)",
                           f"q = {c['q']:.3g} (p = {c['p']:.3g}, shift {c['shift']:+.0f})",
                           f"q ≤ {limit:g} (paper q = {c['q (paper)']:g}; smallest p at {c['n']} seeds: {smallest:.3g})", "max",
                           passed, float(c["q"]), c["q (paper)"]))  # fmt: skip
    return rows


def _slowest_check(runs: pd.DataFrame, mean: pd.Series) -> dict | None:
    """APE sym alone the slowest of the arms run by mean formation (the paper's 1740, its slowest arm); None unless
    APE sym and another arm ran. A tie for the slowest fails. ``ours`` / ``paper``: APE sym's mean over the slowest
    other arm's, ours and the paper's over the same arms (> 1 where APE sym is the slowest)."""
    if "ape_sym" not in mean or len(mean) < 2:
        return None
    top = mean.max()
    slowest = list(mean.index[mean == top])
    ratio = float(mean["ape_sym"] / mean.drop("ape_sym").max())
    if len(slowest) > 1:
        # arms tied at the cap are typically a model that learned nothing: name it rather than a winner
        censored = all(runs.loc[runs["arm"] == a, "formation_step"].isna().all() for a in slowest)
        measured = f"tie: {', '.join(slowest)} at {top:.0f}" + (" (all censored: no seed formed)" if censored else "")
    else:
        runner = mean.drop(slowest[0]).idxmax()
        measured = f"{slowest[0]} {top:.0f}, next {runner} {mean[runner]:.0f}; APE sym / slowest other arm {ratio:.2f}"
    published = {a: paper.FORMATION[a][0] for a in mean.index if a in paper.FORMATION}
    others = {a: v for a, v in published.items() if a != "ape_sym"}
    runner_up = max(others, key=others.get) if others else None
    paper_ratio = published["ape_sym"] / others[runner_up] if runner_up else None
    beside = f"; paper's next: {runner_up} {others[runner_up]}" if runner_up else ""
    return _check(f"slowest arm by mean formation: APE sym (paper: APE sym {paper.FORMATION['ape_sym'][0]}, the slowest of its {len(paper.FORMATION)} arms)",
                  measured, f"ape_sym alone the slowest of the {len(mean)} arms run, a tie fails (paper ape_sym {published['ape_sym']}{beside})", "order",
                  slowest == ["ape_sym"], ratio, paper_ratio)  # fmt: skip


def _order_check(mean: pd.Series) -> dict | None:
    """The arms run (at least three with the paper's number) in the order of Table 4's means, every pair strictly:
    a tie or a pair the other way round fails, and the measured text names those pairs. ``ours``: Kendall's τ of
    our means against the paper's (paper 1). The threshold names the paper's narrowest step (smallest gap in units
    of the two arms' sd): the pair most likely to swap on other seeds, from the paper's own spread."""
    arms = sorted((a for a in mean.index if a in paper.FORMATION), key=lambda a: paper.FORMATION[a][0])
    if len(arms) < 3:
        return None
    wrong = [f"{a} {'=' if mean[a] == mean[b] else '>'} {b}" for i, a in enumerate(arms) for b in arms[i + 1:] if not mean[a] < mean[b]]
    values = [mean[a] for a in arms]
    # every arm at one value (all censored) has no order to correlate: τ undefined, not a scipy warning
    tau = float(stats.kendalltau(values, range(len(arms))).statistic) if len(set(values)) > 1 else float("nan")
    by_ours = sorted(arms, key=lambda a: mean[a])
    measured = " ".join(f"{a} {mean[a]:.0f}" + ("" if b is None else " =" if mean[a] == mean[b] else " <") for a, b in zip(by_ours, by_ours[1:] + [None]))
    measured += f"; out of the paper's order: {', '.join(wrong)}" if wrong else ""
    theirs = " < ".join(f"{a} {paper.FORMATION[a][0]}" for a in arms)
    narrow = min(zip(arms, arms[1:]), key=lambda p: _gap_in_sd(*p))
    (a, b), (fa, fb) = narrow, (paper.FORMATION[narrow[0]], paper.FORMATION[narrow[1]])
    return _check("mean formation: the arms run in the paper's order (Table 4)", f"{measured} (Kendall τ {tau:.2f})",
                  f"{theirs}, every pair strict: a tie or a swapped pair fails (paper's narrowest step: {a} {fa[0]} ± {fa[1]} < {b} {fb[0]} ± {fb[1]})",
                  "order", not wrong, tau, 1.0)  # fmt: skip


def _gap_in_sd(a: str, b: str) -> float:
    """The paper's gap between two arms' mean formation steps over the sd of their difference."""
    (ma, sa, _), (mb, sb, _) = paper.FORMATION[a], paper.FORMATION[b]
    return abs(mb - ma) / float(np.hypot(sa, sb))


def claim_c4(measured: pd.DataFrame) -> pd.DataFrame:
    """Claim C-4's verdict rows from :func:`measure`'s table, which the job ``posym c formation`` writes (each check's
    value, threshold and pass / fail, at the section's ``training.claims``); the training notebook calls this."""
    rows = [
        verdicts.row("C-4", r["check"], str(r["measured"]), str(r["threshold"]), None if _untested(r["passed"]) else _true(r["passed"]), source=SOURCE,
                     ours=_number(r.get("ours")), paper=_number(r.get("paper")), untrained=_true(r.get("untrained", False)))  # fmt: skip
        for _, r in measured.iterrows()
    ]
    return pd.DataFrame(rows, columns=verdicts.COLUMNS)


def _number(value) -> float | None:
    """A table cell as a number; None for an empty one (a check without the paper's number)."""
    return None if value is None or value == "" or (isinstance(value, float) and np.isnan(value)) else float(value)


def _untested(passed) -> bool:
    """A check not judged: None in :func:`measure`'s table, an empty cell once it went through a CSV file."""
    return passed is None or (isinstance(passed, float) and np.isnan(passed)) or passed == ""


def _true(passed) -> bool:
    return passed is True or str(passed) == "True"
