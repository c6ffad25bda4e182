"""The ``posym`` command: the pipeline's rules and people call the same code through it.

Core commands (``posym data``, ``train``, ``evaluate``, ``export-samples``, ``notebook``, ``report``) work for
every study's tasks; each study adds its own under its id (``posym a scores ...``), from its ``cli.py``.
Commands read their settings from the study's config section: the rules pass the section's values as JSON
(``--settings``), people use ``--config`` and ``--set``; either way the schema's defaults fill the rest and a bad
value is refused by its key.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from posym import registry
from posym.pipeline import jobs
from posym.pipeline.config import add_settings_arguments, command_settings

log = logging.getLogger("posym")


def _setup(threads: int | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if threads:
        import torch

        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- data


def cmd_data(args) -> None:
    from posym.data import datasets, tasks

    options = json.loads(args.options) if args.options else {}
    data, record = tasks.get(args.task).generate(args.split, args.n, args.seed, options)
    generator = {"split": args.split, "n": args.n, "base_seed": args.seed, **({"options": options} if options else {}), **record}
    datasets.save_split(args.out, data, generator)
    log.info("%s %s: %d samples, seed %s -> %s", args.task, args.split, args.n, record.get("seed", args.seed), args.out)


def cmd_export_samples(args) -> None:
    from posym.data import tasks

    task = tasks.get(args.task)
    data_settings = command_settings(args, task.study, "data")["data"]
    own = data_settings.get(task.name, {})  # the task's own subsection: sizes and generator options
    size = args.split_size if args.split_size is not None else {**data_settings, **own}[f"{args.split}_samples"]
    if args.n > size:
        raise SystemExit(f"--n {args.n} exceeds the {args.split} split's {size} samples")
    seed = args.seed if args.seed is not None else data_settings["seed_offset"]
    data = task.head(args.split, size, seed, args.n, {k: v for k, v in own.items() if not k.endswith("_samples")})
    for row in range(args.n):
        sample = {"tokens": task.vocabulary.decode(data.tokens[row]), "label": task.label_text(data.labels[row])}
        sample.update({name: int(data.arrays[name][row]) for name in task.arrays})
        print(json.dumps(sample))


# --------------------------------------------------------------------------- training


def cmd_train(args) -> None:
    from posym.nn import architectures
    from posym.data import datasets, tasks
    from posym.data.files import write_json
    from posym.training.splits import Run, TrainConfig, train

    task = tasks.get(args.task)
    section = command_settings(args, task.study, "data", "model", "train")
    seeds, outs = args.seed, args.out
    stored = (args.train_data or [], args.test_data or [])
    if len(outs) != len(seeds) or any(files and len(files) != len(seeds) for files in stored):
        raise SystemExit("posym train: give one --out (and one --train-data and --test-data, if any) per --seed, in order")
    data = {**section["data"], **section["data"].get(task.name, {})}  # the task's own subsection, if any
    options = {k: v for k, v in section["data"].get(task.name, {}).items() if not k.endswith("_samples")}
    runs = []
    for i, seed in enumerate(seeds):
        if args.train_data:
            train_data, test_data = datasets.load_split(args.train_data[i]), datasets.load_split(args.test_data[i])
            meta = {"task": args.task, "train_data": str(args.train_data[i]), "test_data": str(args.test_data[i])}
        else:
            base = section["data"]["seed_offset"] + seed
            train_data, _ = task.generate("train", data["train_samples"], base, options)
            test_data, _ = task.generate("test", data["test_samples"], base, options)
            meta = {"task": args.task, "data_seed": base}
        runs.append(Run(seed=seed, train=train_data, test=test_data, out=Path(outs[i]), meta=meta))
    model_config = architectures.model_config(task.study, len(task.vocabulary), section["model"])
    trainer = train(runs, model_config, TrainConfig.from_dict(section["train"]), list(task.vocabulary.tokens), outputs=args.record is None)
    if args.record is not None:
        write_json(args.record, trainer.objective.pack_record())


def cmd_train_outputs(args) -> None:
    from posym.data.files import read_json
    from posym.training.splits import write_outputs

    record = read_json(args.record)
    members = {m["seed"]: m for m in record["members"]}
    if args.seed not in members:
        raise SystemExit(f"posym train-outputs: seed {args.seed} is not in {args.record} (seeds {sorted(members)})")
    member = members[args.seed]
    run = args.run or args.out
    if Path(member["out"]).resolve() != run.resolve():
        raise SystemExit(f"posym train-outputs: seed {args.seed} of {args.record} trained into {member['out']}, not {run}")
    final = {"choice": args.final, "every": args.validation_every, "validation": args.validation_data}
    write_outputs(run, member, final, tables=args.out)
    log.info("seed %d of %s: tables written to %s", args.seed, record["pack"], args.out)


# --------------------------------------------------------------------------- evaluation


def cmd_evaluate(args) -> None:
    import pandas as pd

    from posym.data import datasets
    from posym.training.checkpoints import load_final_model
    from posym.training.evaluate import accuracy, predict
    from posym.data.files import read_json, write_csv

    model, _, final = load_final_model(args.index)
    # A model is evaluated at the precision it was trained at, as HF Trainer evaluates.
    precision = read_json(args.index)["train"].get("precision", "fp32")
    rows = []
    for name, data in datasets.load_splits(args.data).items():
        extra = int(name.removeprefix("extra")) if name.startswith("extra") else 0
        predictions = predict(model, data.tokens, precision=precision)
        rows += [{"step": final["step"], "extra_tokens": extra, "length": data.seq_len, **r} for r in accuracy(predictions, data)]
        log.info("%s: accuracy %.4f", name, rows[-1]["accuracy"])
    write_csv(args.out, pd.DataFrame(rows))


# --------------------------------------------------------------------------- notebooks and report


def cmd_notebook(args) -> None:
    import os

    import papermill

    # The kernel inherits these: notebooks are light, and two kernels with two threads each
    # on two cores slow everything down by orders of magnitude (OpenMP threads spin).
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(args.threads)
    parameters = {key: value for text in args.parameters or () for key, value in json.loads(text).items()}
    # Every parameter must come from the rule, except optional ones (default None): a default
    # output name would silently write into the working directory.
    declared = papermill.inspect_notebook(str(args.notebook))
    required = {name for name, spec in declared.items() if spec["default"] != "None"}
    if missing := sorted(required - set(parameters)):
        raise SystemExit(f"{args.notebook}: the rule does not give the notebook parameters {', '.join(missing)}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(args.notebook), str(args.output), parameters=parameters, kernel_name="python3", progress_bar=False)


def cmd_report_build(args) -> None:
    from posym.pipeline import report, study
    from posym.data.files import sha256_file, write_json

    config = json.loads(args.config)
    version, path = report.build(
        Path(args.reports),
        config=config,
        plan=[study.load(study_id).plan(config) for study_id in config["studies"]],
        repo=Path(args.repo),
        history=Path(args.history),
        data=args.data,
        checkpoints=args.checkpoints,
        benchmarks=args.benchmarks,
        performance=args.performance,
        models=args.models,
    )
    write_json(args.receipt, {"version": version, "index": str(path), "manifest_sha256": sha256_file(path.parent / "manifest.json")})
    log.info("report: %s", path)


def cmd_report_diff(args) -> None:
    from posym.pipeline import changes

    folders = []
    for version in (args.before, args.after):
        folder = Path(version) if Path(version).is_dir() else args.reports / version
        if not (folder / "manifest.json").is_file():
            raise SystemExit(f"no report version {version}: {folder / 'manifest.json'} does not exist")
        folders.append(folder)
    print(changes.text(changes.compare(*folders)), end="")


def cmd_committed_verdicts(args) -> None:
    from posym.pipeline import committed

    changed = committed.write_readme(args.readme, args.reports)
    log.info("%s: the committed reports' verdicts %s", args.readme, "rewritten" if changed else "unchanged")
    for page in committed.write_pages(args.docs, args.reports):
        log.info("%s: its study's verdicts rewritten", page)


# --------------------------------------------------------------------------- pretrained models


def cmd_convert_model(args) -> None:
    from posym.lm.pretrained import convert

    convert(args.source, args.out, dtype=args.dtype)  # it logs what it wrote


# --------------------------------------------------------------------------- parser


def parser() -> argparse.ArgumentParser:
    from posym.lm import pretrained
    from posym.pipeline import study
    from posym.data import tasks

    p = argparse.ArgumentParser(prog="posym", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    task_names = sorted(tasks.names())

    s = sub.add_parser("data", help="generate and store one split of a task")
    s.add_argument("--task", choices=task_names, required=True)
    s.add_argument("--split", choices=["train", "val", "test"], required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, required=True, help="dataset seed (paper A's splits add their own offsets, spec §A2)")
    s.add_argument("--options", help="JSON of the task's generator options (its subsection of the study's data section)")
    s.add_argument("--out", type=Path, required=True, help="the .safetensors file; metadata goes beside it as .json")
    s.set_defaults(func=cmd_data)

    s = sub.add_parser(
        "export-samples",
        help="print the first N samples of a split as JSON lines, in dataset order",
        description="Samples are those of the stored split: the split of --split-size samples (default: the"
        " configured size) generated from dataset seed --seed (default: the study's data.seed_offset).",
    )
    s.add_argument("--task", choices=task_names, required=True)
    s.add_argument("--split", choices=["train", "val", "test"], required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, help="dataset seed (the pipeline's run seed s uses data.seed_offset + s)")
    s.add_argument("--split-size", type=int, help="size of the split the samples come from")
    add_settings_arguments(s)
    s.set_defaults(func=cmd_export_samples)

    s = sub.add_parser(
        "train",
        help="train a task's seeds (several packed into one model), writing OUT/checkpoints/step-NNNNNN/ and the tables of each",
    )
    s.add_argument("--task", choices=task_names, required=True)
    s.add_argument("--seed", type=int, nargs="+", required=True, help="one seed, or several to train packed")
    s.add_argument("--out", type=Path, nargs="+", required=True, help="each seed's folder, in the order of --seed")
    s.add_argument("--train-data", type=Path, nargs="+", help="stored train splits, one per seed (default: generate from the config)")
    s.add_argument("--test-data", type=Path, nargs="+", help="stored test splits, one per seed")
    s.add_argument("--record", type=Path, help="write the pack record here instead of the tables (the workflow's train-outputs job writes those)")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("train-outputs", help="one seed's tables (checkpoints.json, metrics.csv, train_log.csv) from a pack record")
    s.add_argument("--record", type=Path, required=True, help="the training job's pack record")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--out", type=Path, required=True, help="where the tables go (default: the seed's folder, --run)")
    s.add_argument("--run", type=Path, help="the seed's folder, where its checkpoints/ are (default: --out)")
    s.add_argument("--final", default="last", help="the checkpoint the analyses read: last or best_validation")
    s.add_argument("--validation-every", type=int, help="best_validation: steps between compared checkpoints")
    s.add_argument("--validation-data", type=Path, help="best_validation: the stored validation split")
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_train_outputs)

    jobs.add_commands(sub, jobs.CORE)  # the core commands rules run through the jobs tables (posym evaluate)

    s = sub.add_parser("notebook", help="execute a notebook with papermill")
    s.add_argument("notebook", type=Path)
    s.add_argument("output", type=Path)
    s.add_argument("--parameters", action="append", help="JSON object of notebook parameters (several are merged)")
    s.add_argument("--threads", type=int, default=1, help="CPU threads of the notebook's kernel")
    s.set_defaults(func=cmd_notebook)

    s = sub.add_parser("committed-verdicts", help="write the committed reports' verdicts into the README's table and the study pages of docs/")
    s.add_argument("--reports", type=Path, default=Path("reports"), help="the committed reports (reports/<version>/)")
    s.add_argument("--readme", type=Path, default=Path("README.md"))
    s.add_argument("--docs", type=Path, default=Path("docs"), help="pages with a study's block (posym.pipeline.committed.study_markers)")
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_committed_verdicts)

    reports = sub.add_parser("report", help="the versioned reports: build one, or compare two").add_subparsers(
        dest="report_command", required=True
    )
    s = reports.add_parser("build", help="assemble the report version of the code and config (reused if it exists for the same inputs)")
    s.add_argument("--reports", type=Path, default=Path("reports"), help="the folder of the report versions")
    s.add_argument("--history", type=Path, required=True, help="the results folder's list of the versions it made")
    s.add_argument("--config", required=True, help="the validated config as JSON; its studies' tables say what the report shows")
    s.add_argument("--repo", default=".")
    s.add_argument("--receipt", required=True, help="JSON naming the report written (the rule's declared output)")
    for name in ("data", "checkpoints", "benchmarks", "performance", "models"):
        s.add_argument(f"--{name}", nargs="*", default=[])
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_report_build)
    s = reports.add_parser("diff", help="what changed from report version BEFORE to AFTER: verdicts, tables, items, code, config")
    s.add_argument("before", help="a version (a folder under --reports) or a version's folder")
    s.add_argument("after")
    s.add_argument("--reports", type=Path, default=Path("reports"))
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_report_diff)

    s = sub.add_parser(
        "convert-model",
        help="turn a model source into a verified Hugging Face model directory (safetensors, manifest, checksums)",
    )
    s.add_argument("--source", required=True, help="a model directory, a .gguf file, or package:<distribution>")
    s.add_argument("--out", type=Path, required=True, help="the model directory to write (replaced if it exists)")
    s.add_argument("--dtype", choices=pretrained.DTYPES, default="float32", help="the saved weights' dtype")
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_convert_model)

    for study_id in registry.known():  # a study's own commands, when it has any (its jobs.py)
        table = registry.study_module(study_id, "jobs")
        if table is None:
            continue
        commands = sub.add_parser(study_id, help=f"{study.load(study_id).name}'s data and analyses (posym {study_id} --help)")
        jobs.add_commands(commands.add_subparsers(dest="study_command", required=True), table.JOBS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _setup(getattr(args, "threads", None))
    from posym.pipeline.config import ConfigError
    from posym.data.files import IntegrityError
    from posym.lm.pretrained import ModelSourceError
    from posym.pipeline.report import ReportExists
    from posym.training.trainer import TrainingDiverged

    try:
        args.func(args)
    except (ConfigError, IntegrityError, ModelSourceError, ReportExists, TrainingDiverged) as err:
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
