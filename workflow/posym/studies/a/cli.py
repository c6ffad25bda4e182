"""Paper A's commands (``posym a <command>``): its data and analyses, one per job of the study's rules.

Each command reads its settings from the ``a`` section of the configuration: the rules pass them with
``--settings``, people with ``--config`` / ``--set`` (``posym a scores ... --set scores.tau=1e-3``); the schema's
defaults fill the rest.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from posym.pipeline.config import add_settings_arguments, command_settings
from posym.data.files import write_csv, write_json

log = logging.getLogger("posym.a")

STUDY = "a"


def _command(sub, name: str, help: str, func, data: str | None = None) -> argparse.ArgumentParser:
    """A subcommand with the settings arguments; with ``data`` (its help), one that reads a run's final checkpoint
    (--index) and a stored set (--data)."""
    s = sub.add_parser(name, help=help)
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="torch CPU threads")
    s.set_defaults(func=func)
    if data is not None:
        s.add_argument("--index", type=Path, required=True, help="the run's checkpoints.json")
        s.add_argument("--data", type=Path, required=True, help=data)
    return s


def cmd_length_data(args) -> None:
    from posym.data import datasets

    from .tasks import get

    length = command_settings(args, STUDY, "length")["length"]
    task = get(args.task)
    # Each length draws its fillers from its own stream; the base samples are shared by all lengths.
    filler_seed = {x: int(np.random.SeedSequence([args.seed, x]).generate_state(1)[0]) for x in length["extra_tokens"]}
    sets = {
        f"extra{x}": task.length_extension_set(length["samples"], x, filler_seed[x], base_seed=args.seed)
        for x in length["extra_tokens"]
    }
    record = {"samples": length["samples"], "seed": args.seed, "extra_tokens": list(length["extra_tokens"])}
    datasets.save_splits(args.out, sets, record)
    log.info("%s: %d length-extended sets of %d samples -> %s", args.task, len(sets), length["samples"], args.out)


def cmd_scores(args) -> None:
    from .head_scores import purity_counts, score_run

    section = command_settings(args, STUDY, "scores")["scores"]
    scores = score_run(args.index, args.data, section["samples"], section["tau"])
    write_csv(args.out_scores, scores)
    write_csv(args.out_purity, purity_counts(scores, section["gammas"]))
    steps = scores["step"].nunique()
    log.info("%d checkpoints x %d heads -> %s, %s", steps, len(scores) // steps, args.out_scores, args.out_purity)


def cmd_flow(args) -> None:
    from .information_flow import arrivals_text, flow_run

    grid, summary = flow_run(args.index, args.task, args.input.split() if args.input else None)
    write_csv(args.out_grid, grid)
    write_json(args.out_summary, summary)
    log.info(
        "%s: predicted %s, answer %s; the answer reaches %s",
        args.task,
        summary["prediction"],
        summary["answer"],
        arrivals_text(summary["answer_arrivals"]),
    )


def cmd_frequency(args) -> None:
    from posym.data import datasets
    from posym.training.checkpoints import load_final_model

    from .rope_frequency import example_tokens, frequency_use

    samples = command_settings(args, STUDY, "frequency")["frequency"]["samples"]
    model, _, _ = load_final_model(args.index)
    data = datasets.load_split(args.data)
    frames = [frequency_use(model, data.tokens[:samples], "test"), frequency_use(model, example_tokens(data.task), "example")]
    write_csv(args.out, pd.concat(frames, ignore_index=True))
    log.info("%s: frequency use of %d layers on %d inputs -> %s", data.task, model.config.n_layer, min(samples, len(data)), args.out)


def cmd_geometry(args) -> None:
    from posym.data import datasets
    from posym.training.checkpoints import load_final_model

    from .rope_frequency import example_tokens
    from .rope_geometry import dominant_plane, plane_coordinates

    section = command_settings(args, STUDY, "geometry")["geometry"]
    model, _, _ = load_final_model(args.index)
    data = datasets.load_split(args.data)
    layer = section["layer"]
    plane = dominant_plane(pd.read_csv(args.frequency), layer)
    frames = [
        plane_coordinates(model, example_tokens(data.task), layer, plane).assign(inputs="example"),
        plane_coordinates(model, data.tokens[: section["samples"]], layer, plane).assign(inputs="test"),
    ]
    write_csv(args.out, pd.concat(frames, ignore_index=True).assign(layer=layer, plane_id=plane))
    log.info("%s layer %d: queries and keys on plane ID %d -> %s", data.task, layer, plane, args.out)


def cmd_discrepancy(args) -> None:
    from posym.data import datasets
    from posym.training.checkpoints import load_final_model

    from .length_generalisation import discrepancy_table

    samples = command_settings(args, STUDY, "discrepancy")["discrepancy"]["samples"]
    model, _, _ = load_final_model(args.index)
    write_csv(args.out, discrepancy_table(model, datasets.load_splits(args.data), samples))
    log.info("discrepancy of %d layers -> %s", model.config.n_layer, args.out)


def cmd_theory(args) -> None:
    from .theory import TheorySettings, discrepancy_curves, exactness_table

    theory = TheorySettings(**command_settings(args, STUDY, "theory")["theory"])
    write_csv(args.out_discrepancy, discrepancy_curves(theory))
    write_csv(args.out_exactness, exactness_table(theory))
    log.info("theory tables -> %s, %s", args.out_discrepancy, args.out_exactness)


def cmd_llm_probe(args) -> None:
    from posym.lm.local import LocalModelError, load_local_model

    from .language_models import EndpointClient, ProbeError
    from .llm_probes import endpoint_answerer, local_answerer, run_probes, summarise

    section = command_settings(args, STUDY, "tasks", "llm")
    llm = section["llm"]
    directory = args.model or (llm["model"] if isinstance(llm["model"], str) else None)
    try:
        if directory is not None:
            local = load_local_model(directory, llm["device"], llm["dtype"], llm["chat_template"], args.llm)
            answer, name = local_answerer(local, llm["max_new_tokens"], llm["batch_size"]), local.name
        elif llm["endpoint_model"] is not None:
            client = EndpointClient.from_environment(llm["endpoint_model"], llm["url_env"], llm["key_env"], max_tokens=llm["max_new_tokens"])
            answer, name = endpoint_answerer(client), llm["endpoint_model"]
        else:
            raise ProbeError("no model configured: pass --model, or set llm.model (a local directory) or llm.endpoint_model")
        items = run_probes(answer, name, section["tasks"], llm["windows"], llm["runs"], llm["items"])
    except (ProbeError, LocalModelError) as err:
        raise SystemExit(f"llm-probe: {err}") from None
    write_csv(args.out_probe_items, items)
    write_csv(args.out_probe_summary, summarise(items))
    log.info("%d items -> %s, summary -> %s", len(items), args.out_probe_items, args.out_probe_summary)


def cmd_llm_gather(args) -> None:
    import pandas as pd

    from .llm_probes import read_items, summarise

    items = pd.concat([read_items(path) for path in args.probe_items], ignore_index=True)
    write_csv(args.out_probe_items, items)
    write_csv(args.out_probe_summary, summarise(items))
    log.info("%d models, %d items -> %s", items["model"].nunique(), len(items), args.out_probe_items)


def add_commands(sub) -> None:
    from .tasks import PAPER_ORDER

    s = _command(sub, "length-data", "length-extended test sets (prepend protocol, spec §A10.1)", cmd_length_data)
    s.add_argument("--task", choices=PAPER_ORDER, required=True)
    s.add_argument("--seed", type=int, required=True, help="dataset seed (data.seed_offset + run seed)")
    s.add_argument("--out", type=Path, required=True)

    help = "positional / symbolic scores, entropy and purity of every head at every checkpoint of a run (spec §A6)"
    s = _command(sub, "scores", help, cmd_scores, data="the run's test split; its first scores.samples samples are scored")
    s.add_argument("--out-scores", type=Path, required=True, help="CSV: step, layer, head, positional, symbolic, entropy, entropy_norm")
    s.add_argument("--out-purity", type=Path, required=True, help="CSV: step, gamma, kind, count, heads")

    s = _command(sub, "flow", "information-flow grid of a run's final checkpoint on one input (spec §A8, Fig 3A/B)", cmd_flow)
    s.add_argument("--index", type=Path, required=True, help="the run's checkpoints.json")
    s.add_argument("--task", choices=PAPER_ORDER, required=True)
    s.add_argument("--input", help="space-separated tokens, the query last (default: the paper's Fig 3 example)")
    s.add_argument("--out-grid", type=Path, required=True, help="CSV: depth, position, token, changed, attended, step")
    s.add_argument("--out-summary", type=Path, required=True, help="JSON: input, answer, prediction, where the answer arrives in which layer")

    s = _command(sub, "frequency", "RoPE frequency use per layer of a run's final checkpoint (spec §A7)", cmd_frequency, data="the test split")
    s.add_argument("--out", type=Path, required=True)

    s = _command(sub, "geometry", "queries and keys on a layer's dominant RoPE plane (Fig 4B)", cmd_geometry, data="the test split")
    s.add_argument("--frequency", type=Path, required=True, help="the run's frequency-use table (posym a frequency)")
    s.add_argument("--out", type=Path, required=True)

    help, data = "logit gap of trained heads on the length-extended sets (spec §A9)", "the length-extended sets (posym a length-data)"
    s = _command(sub, "discrepancy", help, cmd_discrepancy, data=data)
    s.add_argument("--out", type=Path, required=True)

    s = _command(sub, "theory", "Thm 3.1 constructions and Thm 3.2 discrepancy (spec §A9, Fig 5A)", cmd_theory)
    s.add_argument("--out-discrepancy", type=Path, required=True, help="CSV: bound and measured Δ per curve and n")
    s.add_argument("--out-exactness", type=Path, required=True, help="CSV: constructions vs Listing 1 on random inputs")

    s = _command(sub, "llm-probe", "the 1-hop LLM probes on a local model or an endpoint (spec §A10.2; settings llm.*)", cmd_llm_probe)
    s.add_argument("--model", type=Path, help="a local Hugging Face model directory (default: llm.model when it names one)")
    s.add_argument("--llm", help="label of a local model in the outputs (default: its directory's name)")
    s.add_argument("--out-probe-items", type=Path, required=True, help="CSV: one row per item and its answers")
    s.add_argument("--out-probe-summary", type=Path, required=True, help="CSV: accuracy per model, task, window and method")

    s = _command(sub, "llm-gather", "the LLM probes' items of every model in one table, and its summary", cmd_llm_gather)
    s.add_argument("--probe-items", type=Path, nargs="+", required=True, help="items CSVs of posym a llm-probe")
    s.add_argument("--out-probe-items", type=Path, required=True)
    s.add_argument("--out-probe-summary", type=Path, required=True)
