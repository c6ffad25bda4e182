"""posym's study of the length protocol: Fig 5B under each filler rule (issue 29; spec §A10.1, §Y).

The paper prepends "extra symbols prior to the window containing the to-be-retrieved target symbol" (§3.6) and says
no more; the spec's rule (uniform letters) is PROPOSED, and with it posym's Number curve stays far below Fig 5B's.
This study measures the final checkpoint of every run on the same base samples as Fig 5B under each rule of
:data:`~posym.studies.a.tasks.multihop.FILLER_RULES` (inference only: no training), and says which rule's curve is
closest to the digitised Fig 5B. Distance per task and rule, from the mean curve over seeds at the measured lengths
inside the digitised range: the mean |ours − paper| (the ranking), and the gap at +100 (Number's headline point,
0.74 in the paper) beside it.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from posym.nn.gptj import PosymModel
from posym.training.evaluate import accuracy, predict

from .length_generalisation import accuracy_at, paper_accuracy
from .tasks import PAPER_ORDER, get, palette
from .tasks.multihop import FILLER_RULES, HOP_LENS, filler_seed

log = logging.getLogger("posym.a.length_protocol")

#: The point whose gap the distance table shows beside the mean: Fig 5B's Number curve reads 0.74 there, and the
#: §3.6 text says the Number mechanism "barely generalizes at all".
HEADLINE_EXTRA = 100


@torch.no_grad()
def protocol_accuracy(
    model: PosymModel, task: str, rules, extra_tokens, samples: int, data_seed: int, precision: str = "fp32"
) -> pd.DataFrame:
    """Accuracy (per hop and ``hop='all'``) of ``model`` on ``samples`` hop-balanced test samples of ``task`` with
    each number of ``extra_tokens`` prepended by each filler rule of ``rules``.

    The base samples and each length's filler stream are Fig 5B's (``posym a length-data`` with the same seed), so
    the ``uniform`` rows equal Fig 5B's accuracies when the lengths and sample counts agree. Every set is validated:
    a rule that broke an input would stop the job here.
    """
    unknown = [rule for rule in rules if rule not in FILLER_RULES]
    if unknown:
        raise ValueError(f"length_protocol.fillers: unknown rule {unknown[0]!r} (the rules: {', '.join(FILLER_RULES)})")
    if samples % len(HOP_LENS):
        raise ValueError(f"length_protocol.samples: {samples} is not a multiple of {len(HOP_LENS)}, so not balanced over hops")
    maker = get(task)
    base = maker.length_base_set(samples, base_seed=data_seed)
    rows = []
    for rule in rules:
        for extra in extra_tokens:
            data = maker.extend(base, extra, filler_seed(data_seed, extra), rule)
            maker.validate(data)
            predictions = predict(model, data.tokens, precision=precision)
            rows += [{"filler": rule, "extra_tokens": extra, "length": data.seq_len, **r} for r in accuracy(predictions, data)]
            log.info("%s, %s fillers, +%d: accuracy %.4f", task, rule, extra, rows[-1]["accuracy"])
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------ the report item


def _overall(protocol: pd.DataFrame) -> pd.DataFrame:
    """Accuracy over all hops, mean and sd over seeds, per task, rule and length (rules in the study's order)."""
    overall = protocol[protocol["hop"].astype(str) == "all"]
    table = overall.groupby(["task", "filler", "extra_tokens"], sort=False)["accuracy"].agg(["mean", "std", "count"])
    return table.reset_index().rename(columns={"mean": "ours", "std": "ours sd", "count": "seeds"})


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the paper's task order, the rules in FILLER_RULES' order."""
    task_rank = {task: i for i, task in enumerate(PAPER_ORDER)}
    rule_rank = {rule: i for i, rule in enumerate(FILLER_RULES)}
    keys = frame[["task", "filler"]].apply(lambda r: (task_rank[r["task"]], rule_rank[r["filler"]]), axis=1)
    return frame.assign(_key=keys).sort_values("_key", kind="stable").drop(columns="_key").reset_index(drop=True)


def protocol_table(protocol: pd.DataFrame) -> pd.DataFrame:
    """Rules × prepended tokens: one row per task and rule (mean accuracy over seeds), and per task a row
    ``paper`` with Fig 5B's digitised value (linear between its points; empty outside them)."""
    overall = _overall(protocol)
    wide = overall.pivot_table(index=["task", "filler"], columns="extra_tokens", values="ours", sort=False).reset_index()
    wide = _ordered(wide)
    lengths = sorted(overall["extra_tokens"].unique())
    frames = []
    for task, rows in wide.groupby("task", sort=False):
        reference = paper_accuracy(task, lengths)
        frames += [rows, pd.DataFrame([{"task": task, "filler": "paper (Fig 5B)", **dict(zip(lengths, reference))}])]
    table = pd.concat(frames, ignore_index=True)
    table.columns = [c if isinstance(c, str) else f"+{c}" for c in table.columns]
    return table


def protocol_distances(protocol: pd.DataFrame) -> pd.DataFrame:
    """Per task and rule: the mean |ours − paper| over the measured lengths inside Fig 5B's digitised range (the
    mean curve over seeds), the gap at +100 (measured or interpolated, and which), how many lengths and seeds, the
    rank by mean |gap| (1 = closest) and whether it is the closest rule."""
    overall = _overall(protocol)
    rows = []
    for (task, rule), curve in overall.groupby(["task", "filler"], sort=False):
        curve = curve.sort_values("extra_tokens")
        reference = paper_accuracy(task, curve["extra_tokens"])
        inside = ~np.isnan(reference)
        gaps = curve["ours"].to_numpy(float)[inside] - reference[inside]
        at_headline, how = accuracy_at(curve.set_index("extra_tokens")["ours"], HEADLINE_EXTRA)
        rows.append(
            {
                "task": task,
                "filler": rule,
                "mean |gap|": float(np.abs(gaps).mean()) if len(gaps) else float("nan"),
                f"gap at +{HEADLINE_EXTRA}": at_headline - float(paper_accuracy(task, [HEADLINE_EXTRA])[0]),
                f"at +{HEADLINE_EXTRA}": how,
                "lengths": int(inside.sum()),
                "seeds": int(curve["seeds"].min()),
            }
        )
    table = _ordered(pd.DataFrame(rows))
    table["rank"] = table.groupby("task")["mean |gap|"].rank(method="min").astype("Int64")
    table["closest"] = table["rank"] == 1
    return table


def closest_finding(distances: pd.DataFrame) -> pd.DataFrame:
    """Per task, the sentence that names the rule closest to Fig 5B (rank 1 of :func:`protocol_distances`: the
    smallest mean |gap|; every rule tied with it) and how far the others are."""
    rows = []
    headline = f"gap at +{HEADLINE_EXTRA}"
    for task, rules in distances.groupby("task", sort=False):
        ranked = rules.dropna(subset=["mean |gap|"])
        if ranked.empty:
            rows.append({"task": task, "closest": "", "finding": f"{task}: no measured length inside Fig 5B's digitised range."})
            continue
        closest = ranked[ranked["rank"] == 1]
        best = closest.iloc[0]
        names = " and ".join(closest["filler"])
        others = ranked[ranked["rank"] != 1].sort_values("rank", kind="stable")
        finding = (
            f"{task}: of {len(ranked)} filler rules, {names} {'comes' if len(closest) == 1 else 'come'} closest to "
            f"Fig 5B (mean |ours − paper| {best['mean |gap|']:.3f} over {best['lengths']} lengths, {headline} "
            f"{best[headline]:+.3f})"
        )
        if len(others):
            finding += "; the others: " + ", ".join(f"{r['filler']} {r['mean |gap|']:.3f}" for _, r in others.iterrows())
        rows.append({"task": task, "closest": names, "finding": finding + "."})
    return pd.DataFrame(rows)


def plot_protocol(protocol: pd.DataFrame):
    """One panel per task: the mean accuracy over seeds against prepended tokens, one line per filler rule, and the
    paper's digitised curve (dashed, black)."""
    import matplotlib.pyplot as plt

    overall = _overall(protocol)
    tasks = [task for task in PAPER_ORDER if task in set(overall["task"])]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 3.6), squeeze=False)
    markers = dict(zip(FILLER_RULES, "osD^"))
    for ax, task in zip(axes[0], tasks):
        frame = overall[overall["task"] == task]
        for rule, curve in frame.groupby("filler", sort=False):
            ax.errorbar(curve["extra_tokens"], curve["ours"], yerr=curve["ours sd"].fillna(0), marker=markers[rule], ms=4, capsize=2, label=rule)
        reach = np.arange(0, max(frame["extra_tokens"].max(), 1) + 1)
        ax.plot(reach, paper_accuracy(task, reach), ls="--", c="black", alpha=0.7, label="paper (Fig 5B)")
        ax.set_title(task, color=palette()[task])
        ax.set_xlabel("tokens prepended before the target window")
        ax.set_ylabel("accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
