"""Offline substitute for paper A's frontier-LLM probes (spec §A10.2, Fig 5C/D, Table 3, claim A-7 of §A12).

Paper A asked GPT 5.4 / 5.5 and Claude Sonnet 3.7, through their closed APIs, for single-token answers to 1-hop
Number and Letter probes with growing target windows: the token ``n`` places left of a final integer ``n``
(Number), or the one token whose first character is the final token's second character (Letter). Those rows
cannot be rerun offline; this module runs the same prompts and items (each task's ``probe_prompt`` and
``probe_sequence``) on a model we can reach (:mod:`posym.studies.a.language_models`), scored two ways per item:

* ``greedy``: the model's first word must equal the answer. This is the paper's protocol.
* ``restricted`` (local models only): the window's distinct tokens are the only candidates and the most probable
  wins (spec §A10.2's "logit argmax over window tokens"). Ties go to the candidate seen first in the window.

The prompt text follows paper A's Table 2 as transcribed in spec §A10.2 (instructions and few-shot examples); the
"Example k:" / "Task:" layout follows the transcription in jcalataiut-cli/CENIA
``Position_symbolic_dynamics/report_code.md`` §8.1. The item generators are the spec's PROPOSED ones.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from posym.pipeline import claims
from posym.studies.a import language_models
from posym.studies.a.language_models import EndpointClient, parse_answer
from posym.lm.local import LocalModel

from . import paper
from .tasks import PAPER_ORDER, get

log = logging.getLogger("posym.a.llm")

#: The paper's target-window sizes W (spec §0, §A10.2): the x axis of Fig 5C/D.
PAPER_WINDOWS = (12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300)

METHODS = ("greedy", "restricted")
ITEM_COLUMNS = [
    "model",
    "task",
    "window",
    "run",
    "item",
    "answer",
    "greedy",
    "greedy_correct",
    "restricted",
    "restricted_correct",
]
SUMMARY_COLUMNS = ["model", "task", "window", "method", "accuracy", "sd", "runs", "items"]

#: The probe job of an endpoint model: its name may hold any character, so it does not name the job's files.
ENDPOINT_JOB = "endpoint"


def probe_jobs(llm: dict, models: dict) -> dict[str, str | None]:
    """The probe's jobs, by the name that labels a model's rows and files: each llm.model entry's directory (a
    model of the top-level ``models`` section, converted to results/models/<name>, or a local directory named by
    its folder), or None for the endpoint model (job :data:`ENDPOINT_JOB`). A directory that does not exist stops
    the workflow as a missing input, before any job runs."""
    entries = llm["model"] if isinstance(llm["model"], list) else [llm["model"]] if llm["model"] else []
    jobs = {}
    for entry in entries:
        if entry in models:
            name, directory = entry, f"results/models/{entry}"
        else:
            name, directory = os.path.basename(os.path.normpath(entry)), entry
        if name in jobs:
            raise ValueError(f"config key 'a.llm.model': two models are named {name!r}")
        jobs[name] = directory
    if llm["endpoint_model"]:
        jobs[ENDPOINT_JOB] = None
    return jobs


def probe_input(jobs: dict[str, str | None], name: str) -> str | list:
    """The input of probe job ``name`` (:func:`probe_jobs`): its model directory, nothing for the endpoint."""
    return jobs[name] or []


def probe_gpus(jobs: dict[str, str | None], llm: dict, name: str) -> int:
    """A probe job asks for a GPU when it loads a model and llm.device is not cpu."""
    return int(jobs[name] is not None and llm["device"] != "cpu")


def probe_items(task: str, window: int, n_items: int, seed: int) -> list[dict]:
    """``n_items`` 1-hop items with a target window of ``window`` tokens (generators PROPOSED in spec §A10.2),
    deterministic in (task, window, seed).

    Each item: ``tokens`` (window tokens then the query), ``query``, ``answer``, ``target_index`` (of the answer
    in ``tokens``), ``window``, ``task``, ``prompt``.
    """
    generator = get(task)
    if window < 1:
        raise ValueError("window must be ≥ 1")
    draw = np.random.default_rng([seed, window, generator.probe_stream])
    items = []
    for _ in range(n_items):
        sequence, target_index = generator.probe_sequence(draw, window)
        items.append(
            {
                "task": task,
                "window": window,
                "tokens": sequence,
                "query": sequence[-1],
                "answer": sequence[target_index],
                "target_index": target_index,
                "prompt": generator.render_probe(sequence),
            }
        )
    return items


def window_candidates(item: dict) -> list[str]:
    """The window's distinct tokens (the query excluded), in order of first appearance."""
    return list(dict.fromkeys(item["tokens"][:-1]))


# ----------------------------------------------------------------------------------------------- probes


#: Answers a list of items: (greedy answer, restricted answer or None) per item.
Answerer = Callable[[list[dict]], list[tuple[str, str | None]]]


def local_answerer(local: LocalModel, max_new_tokens: int, batch_size: int = 1) -> Answerer:
    """Items ``batch_size`` at a time through :func:`posym.studies.a.language_models.answer_batch`."""

    def answer(items: list[dict]) -> list[tuple[str, str]]:
        out = []
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            prompts, candidates = [i["prompt"] for i in batch], [window_candidates(i) for i in batch]
            out += language_models.answer_batch(local, prompts, candidates, max_new_tokens)
        return out

    return answer


def endpoint_answerer(client: EndpointClient) -> Answerer:
    return lambda items: [(parse_answer(client.complete(item["prompt"])), None) for item in items]


def run_probes(
    answer: Answerer, model: str, tasks: Iterable[str], windows: Iterable[int], runs: Iterable[int], n_items: int
) -> pd.DataFrame:
    """One row per item (columns :data:`ITEM_COLUMNS`); run ``r`` draws a fresh item set with seed ``r`` (§A10.2).

    ``restricted`` and ``restricted_correct`` are empty for an answerer without logits (an endpoint).
    """
    rows = []
    for task in tasks:
        for window in windows:
            for run in runs:
                block = []
                items = probe_items(task, window, n_items, seed=run)
                for k, (item, (greedy, restricted)) in enumerate(zip(items, answer(items))):
                    block.append(
                        {
                            "model": model,
                            "task": task,
                            "window": window,
                            "run": run,
                            "item": k,
                            "answer": item["answer"],
                            "greedy": greedy,
                            "greedy_correct": greedy == item["answer"],
                            "restricted": restricted,
                            "restricted_correct": None if restricted is None else restricted == item["answer"],
                        }
                    )
                rows += block
                log.info(
                    "%s W=%d run %d: greedy %.2f", task, window, run, np.mean([r["greedy_correct"] for r in block])
                )
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)


def read_items(path: str | os.PathLike) -> pd.DataFrame:
    """An items CSV with answers kept as strings ("1", "nan" stay text) and empty correctness as missing."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in ("window", "run", "item"):
        frame[column] = frame[column].astype(int)
    for method in METHODS:
        frame[f"{method}_correct"] = frame[f"{method}_correct"].map({"True": True, "False": False, "": None})
    return frame


def run_accuracy(items: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per model, task, window, run and method (methods without answers are left out)."""
    frames = []
    for method in METHODS:
        scored = items.dropna(subset=[f"{method}_correct"])
        if len(scored):
            grouped = scored.groupby(["model", "task", "window", "run"], sort=False)[f"{method}_correct"]
            frames.append(
                grouped.agg(accuracy=lambda s: s.astype(float).mean(), items="size").reset_index().assign(method=method)
            )
    if not frames:
        return pd.DataFrame(columns=["model", "task", "window", "run", "method", "accuracy", "items"])
    return pd.concat(frames, ignore_index=True)


def summarise(items: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd (ddof 1) over runs of the per-run accuracy, per model, task, window and method (§A10.2)."""
    per_run = run_accuracy(items)
    keys = ["model", "task", "window", "method"]
    summary = per_run.groupby(keys, sort=False).agg(
        accuracy=("accuracy", "mean"), sd=("accuracy", "std"), runs=("run", "size"), items=("items", "first")
    )
    return summary.reset_index()[SUMMARY_COLUMNS]


# ---------------------------------------------------------------------------- Fig 5C/D, Table 3, claim A-7


def chance_accuracy(task: str, windows: Iterable[int], n_items: int = 100, runs: Iterable[int] = range(5)) -> pd.Series:
    """Accuracy of a uniform guess among the window's distinct tokens (the restricted choice), per window: the mean
    over the probe's items of 1 / (their number of candidates)."""
    return pd.Series(
        {
            w: np.mean([1 / len(window_candidates(i)) for r in runs for i in probe_items(task, w, n_items, seed=r)])
            for w in windows
        }
    )


def plot_llm_accuracy(published: pd.DataFrame, models: Iterable[str], ours: pd.DataFrame | None):
    """Fig 5C/D: accuracy against window size, one panel per task; the paper's models (dashed, ±1 sd bars) beside
    ours (solid, one line per model and method). Without ours, the figure says that no model was configured."""
    import matplotlib.pyplot as plt

    models = list(models)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, task in zip(axes, PAPER_ORDER):
        for model in models:
            rows = published[(published["model"] == model) & (published["task"] == task)]
            ax.errorbar(
                rows["window"],
                rows["accuracy"],
                yerr=rows["sd"].fillna(0),
                ls="--",
                marker="o",
                ms=3,
                capsize=2,
                label=f"{model} (paper)",
            )
        if ours is not None:
            for (model, method), rows in ours[ours["task"] == task].groupby(["model", "method"], sort=False):
                ax.errorbar(
                    rows["window"],
                    rows["accuracy"],
                    yerr=rows["sd"].fillna(0),
                    marker="s",
                    ms=3,
                    capsize=2,
                    label=f"{model}, {method} (ours)",
                )
        chance = chance_accuracy(task, PAPER_WINDOWS)
        ax.plot(chance.index, chance.values, ls=":", color="grey", label="chance (uniform over window tokens)")
        ax.set_xscale("log")
        ax.set_xticks(PAPER_WINDOWS, [str(w) for w in PAPER_WINDOWS], fontsize=7)
        ax.minorticks_off()
        ax.set_title(f"{task.capitalize()} task (1 hop)")
        ax.set_xlabel("target-window size")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("accuracy")
    axes[1].legend(fontsize=7)
    if ours is None:
        fig.suptitle("paper values only: no model configured (config llm.model / llm.endpoint_model)", fontsize=9)
    fig.tight_layout()
    return fig


def table3(published: pd.DataFrame, ours: pd.DataFrame | None) -> pd.DataFrame:
    """Table 3: one row per window, one "mean (sd)" column per model and task, the paper's first, ours after."""
    frames = [published.assign(column=published["model"] + " " + published["task"] + " (paper)")]
    if ours is not None:
        frames.append(ours.assign(column=ours["model"] + ", " + ours["method"] + " " + ours["task"] + " (ours)"))
    long = pd.concat(frames, ignore_index=True)
    long["cell"] = [f"{a:.2f}" + ("" if np.isnan(s) else f" ({s:.2f})") for a, s in zip(long["accuracy"], long["sd"])]
    wide = long.pivot(index="window", columns="column", values="cell")
    return wide[list(dict.fromkeys(long["column"]))].sort_index().fillna("—").reset_index()


def claim_a7(items: pd.DataFrame | None, thresholds: Mapping) -> pd.DataFrame:
    """Claim A-7 (spec §A12), per model and scoring method: a local model that passes filter 1 of §A10.2 (Letter
    accuracy at W = 16 ≥ 0.85, mean over runs) must have Letter > Number at W = 32, 100 and 300, in every run (then
    "k of n seeds pass"). A model that fails the filter leaves the comparisons "not tested", their values still
    shown. The filter's window and accuracy and the compared windows are ``thresholds`` (the study's
    ``claims.a7``)."""
    if items is None:
        return pd.DataFrame(
            [
                claims.row("A-7", check, "no model configured", expected, None, source=source, task=task)
                for task, check, expected, source in _claim_checks("", thresholds)
            ],
            columns=claims.COLUMNS,
        )
    rows = []
    for (model, method), frame in run_accuracy(items).groupby(["model", "method"], sort=False):
        at = frame.set_index(["task", "window", "run"])["accuracy"]
        filter_values = frame[(frame["task"] == "letter") & (frame["window"] == thresholds["filter_window"])]["accuracy"]
        qualifies = bool(filter_values.mean() >= thresholds["filter_accuracy"]) if len(filter_values) else None
        (task, check, expected, source), *comparisons = _claim_checks(f"{model}, {method}: ", thresholds)
        measured = f"{filter_values.mean():.3f} over {len(filter_values)} runs" if len(filter_values) else "—"
        rows.append(claims.row("A-7", check, measured, expected, qualifies, source=source, task=task, seed="mean"))
        note = {True: "", False: " (the model fails the filter)", None: " (filter not measured)"}[qualifies]
        for (task, check, expected, source), window in zip(comparisons, thresholds["windows"]):
            measured_runs = [
                r for r in sorted(frame["run"].unique()) if ("letter", window, r) in at and ("number", window, r) in at
            ]
            if not measured_runs:
                rows.append(claims.row("A-7", check, f"W = {window} not measured", expected, None, source=source, task=task))
            for run in measured_runs:
                letter, number = at[("letter", window, run)], at[("number", window, run)]
                measured = f"letter {letter:.3f}, number {number:.3f}{note}"
                rows.append(
                    claims.row(
                        "A-7",
                        check,
                        measured,
                        expected,
                        (letter > number) if qualifies else None,
                        source=source,
                        task=task,
                        seed=run,
                        ours=letter - number,
                        paper=published_gap(window),
                    )
                )
    return claims.with_seed_summary(rows)


def published_gap(window: int) -> float | None:
    """Letter − Number accuracy at ``window``, the mean over the paper's models (Table 3): what a substitute model's
    gap is set beside."""
    table = paper.LLM_ACCURACY[paper.LLM_ACCURACY["window"] == window].pivot(index="model", columns="task", values="accuracy").dropna()
    return float((table["letter"] - table["number"]).mean()) if len(table) else None


def _claim_checks(prefix: str, thresholds: Mapping) -> list[tuple[str, str, str, str]]:
    """(task, check, expected, source) of claim A-7: the filter, then one comparison per window."""
    filter_source = "paper §3.7 / App. H filter 1 (spec §A10.2: ≥ 85 % on 1-hop Letter at length 16)"
    comparison_source = "spec §A12 A-7 (substitute for Table 3's closed-API rows)"
    window, accuracy = thresholds["filter_window"], thresholds["filter_accuracy"]
    return [("letter", f"{prefix}filter: letter accuracy at W = {window}", f"≥ {accuracy}", filter_source)] + [
        ("", f"{prefix}letter > number at W = {w}", "letter > number", comparison_source) for w in thresholds["windows"]
    ]
