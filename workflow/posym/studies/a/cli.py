"""Paper A's commands (``posym a <command>``): its data and analyses, one per job of the study's rules; their
flags are those of the study's jobs table (``jobs.py``).

Each command reads its settings from the ``a`` section of the configuration: the rules pass them with
``--settings``, people with ``--config`` / ``--set`` (``posym a scores ... --set scores.tau=1e-3``); the schema's
defaults fill the rest.
"""

from __future__ import annotations

import logging

import pandas as pd

from posym.pipeline.config import command_settings
from posym.data.files import write_csv, write_json

log = logging.getLogger("posym.a")

STUDY = "a"


def cmd_length_data(args) -> None:
    from posym.data import datasets

    from .tasks import get
    from .tasks.multihop import filler_seed

    length = command_settings(args, STUDY, "length")["length"]
    task, rule = get(args.task), length["filler"]
    # Each length draws its fillers from its own stream; the base samples are shared by all lengths.
    base = task.length_base_set(length["samples"], base_seed=args.seed)
    sets = {f"extra{x}": task.extend(base, x, filler_seed(args.seed, x), rule) for x in length["extra_tokens"]}
    record = {"samples": length["samples"], "seed": args.seed, "extra_tokens": list(length["extra_tokens"]), "filler": rule}
    datasets.save_splits(args.out, sets, record)
    log.info("%s: %d length-extended sets of %d samples (fillers: %s) -> %s", args.task, len(sets), length["samples"], rule, args.out)


def cmd_length_protocol(args) -> None:
    from posym.data.files import read_json
    from posym.training.checkpoints import load_final_model

    from .length_protocol import protocol_accuracy

    section = command_settings(args, STUDY, "length_protocol")["length_protocol"]
    model, _, final = load_final_model(args.index)
    precision = read_json(args.index)["train"].get("precision", "fp32")  # as the test evaluation (posym evaluate)
    table = protocol_accuracy(
        model, args.task, section["fillers"], section["extra_tokens"], section["samples"], args.seed, precision
    )
    write_csv(args.out, table.assign(step=final["step"]))
    log.info("%s: %d filler rules x %d lengths -> %s", args.task, len(section["fillers"]), len(section["extra_tokens"]), args.out)


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

