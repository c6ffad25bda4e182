"""The ``posym`` command: the pipeline's rules and people call the same code through it."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

import yaml

log = logging.getLogger("posym")

# Analysis modules that add their own subcommands through ``add_cli(subparsers)``.
EXTENSIONS: tuple[str, ...] = (
    "posym.scores",
    "posym.flow",
    "posym.theory",
    "posym.frequency",
    "posym.geometry",
    "posym.discrepancy",
    "posym.llm",
)


def _setup(threads: int | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if threads:
        import torch

        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- data


def cmd_data(args) -> None:
    from . import datasets, tasks

    data = tasks.generate_split(args.task, args.split, base_seed=args.seed, size=args.n)
    tasks.validate(data)
    seed = tasks.split_seed(args.split, args.seed)
    datasets.save_split(args.out, data, {"split": args.split, "n": args.n, "base_seed": args.seed, "seed": seed})
    log.info("%s %s: %d samples, seed %d -> %s", args.task, args.split, args.n, seed, args.out)


def cmd_length_data(args) -> None:
    from . import datasets, tasks

    import numpy as np

    # Each length draws its fillers from its own stream; the base samples are shared by all lengths.
    filler_seed = {x: int(np.random.SeedSequence([args.seed, x]).generate_state(1)[0]) for x in args.extra}
    sets = {f"extra{x}": tasks.length_extension_set(args.task, args.samples, x, filler_seed[x], base_seed=args.seed) for x in args.extra}
    datasets.save_splits(args.out, sets, {"samples": args.samples, "seed": args.seed, "extra_tokens": list(args.extra)})
    log.info("%s: %d length-extended sets of %d samples -> %s", args.task, len(sets), args.samples, args.out)


def cmd_export_samples(args) -> None:
    from . import tasks

    size = args.split_size if args.split_size is not None else tasks.SPLITS[args.split][0]
    if args.n > size:
        raise SystemExit(f"--n {args.n} exceeds the {args.split} split's {size} samples")
    data = tasks.generate_rows(args.task, size, tasks.split_seed(args.split, args.seed), range(args.n))
    vocab = tasks.vocabulary(args.task)
    for tokens, label, hops in zip(data.tokens, data.labels, data.hops):
        print(json.dumps({"tokens": [vocab.tokens[t] for t in tokens], "label": vocab.tokens[label], "hops": int(hops)}))


# --------------------------------------------------------------------------- training


def _parse_value(text: str):
    """A --set value as YAML, except that 3e-3 is a number (YAML 1.1 wants 3.0e-3)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def training_settings(args) -> tuple[dict, dict, dict]:
    """(model, train, whole config): schema defaults < --config files < --settings JSON < --set."""
    from . import config as cfg

    merged: dict = {}
    for path in args.config or []:
        merged = cfg.deep_merge(merged, yaml.safe_load(Path(path).read_text()) or {})
    if args.settings:
        merged = cfg.deep_merge(merged, json.loads(args.settings))
    for assignment in args.set or []:
        key, sep, value = assignment.partition("=")
        if not sep:
            raise SystemExit(f"--set {assignment!r}: expected KEY=VALUE, e.g. train.steps=300")
        node = merged
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _parse_value(value)
    full = cfg.validate(merged, sections=("data", "model", "train"))
    return full["model"], full["train"], full


def cmd_train(args) -> None:
    from . import datasets, tasks
    from .model import ModelConfig
    from .train import Run, TrainConfig, train

    model_settings, train_settings, full = training_settings(args)
    if args.train_data:
        train_data, test_data = datasets.load_split(args.train_data), datasets.load_split(args.test_data)
        meta = {"task": args.task, "train_data": str(args.train_data), "test_data": str(args.test_data)}
    else:
        base = full["data"]["seed_offset"] + args.seed
        train_data = tasks.generate_split(args.task, "train", base_seed=base, size=full["data"]["train_samples"])
        test_data = tasks.generate_split(args.task, "test", base_seed=base, size=full["data"]["test_samples"])
        meta = {"task": args.task, "data_seed": base}
    vocab = tasks.vocabulary(args.task)
    model_config = ModelConfig(vocab_size=len(vocab), **model_settings)
    run = Run(seed=args.seed, train=train_data, test=test_data, out=Path(args.out), meta=meta)
    train([run], model_config, TrainConfig.from_dict(train_settings), list(vocab.tokens))


# --------------------------------------------------------------------------- evaluation


def cmd_evaluate(args) -> None:
    import pandas as pd

    from . import datasets
    from .evaluate import accuracy_by_hop, predict
    from .files import read_json, write_csv
    from .train import load_final_model

    model, _, final = load_final_model(args.index)
    # A model is evaluated at the precision it was trained at, as HF Trainer evaluates.
    precision = read_json(args.index)["train"].get("precision", "fp32")
    rows = []
    for name, data in datasets.load_splits(args.data).items():
        extra = int(name.removeprefix("extra")) if name.startswith("extra") else 0
        predictions = predict(model, data.tokens, precision=precision)
        rows += [{"step": final["step"], "extra_tokens": extra, "length": data.tokens.shape[1], **r} for r in accuracy_by_hop(predictions, data.labels, data.hops)]
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
    parameters = json.loads(args.parameters) if args.parameters else {}
    # Every parameter must come from the rule, except optional ones (default None): a default
    # output name would silently write into the working directory.
    declared = papermill.inspect_notebook(str(args.notebook))
    required = {name for name, spec in declared.items() if spec["default"] != "None"}
    if missing := sorted(required - set(parameters)):
        raise SystemExit(f"{args.notebook}: the rule does not give the notebook parameters {', '.join(missing)}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(args.notebook), str(args.output), parameters=parameters, kernel_name="python3", progress_bar=False)


def cmd_report(args) -> None:
    from . import report
    from .files import sha256_file, write_json

    config = json.loads(args.config)
    path = report.build(
        Path(args.out),
        version=args.version,
        title=config.get("report", {}).get("title", "posym report"),
        config=config,
        repo=Path(args.repo),
        figures=args.figures,
        tables=args.tables,
        notebooks=args.notebooks,
        data=args.data,
        checkpoints=args.checkpoints,
        benchmarks=args.benchmarks,
        performance=args.performance,
        captions=Path(args.captions) if args.captions else None,
    )
    write_json(args.receipt, {"version": args.version, "index": str(path), "manifest_sha256": sha256_file(path.parent / "manifest.json")})
    log.info("report written: %s", path)


# --------------------------------------------------------------------------- parser


def parser() -> argparse.ArgumentParser:
    from .tasks import TASKS

    p = argparse.ArgumentParser(prog="posym", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("data", help="generate and store one split of a task")
    s.add_argument("--task", choices=TASKS, required=True)
    s.add_argument("--split", choices=["train", "val", "test"], required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, required=True, help="dataset seed; the split adds its own offset (spec §A2)")
    s.add_argument("--out", type=Path, required=True, help="the .safetensors file; metadata goes beside it as .json")
    s.set_defaults(func=cmd_data)

    s = sub.add_parser("length-data", help="length-extended test sets (prepend protocol, spec §A10.1)")
    s.add_argument("--task", choices=TASKS, required=True)
    s.add_argument("--seed", type=int, required=True, help="dataset seed")
    s.add_argument("--samples", type=int, required=True)
    s.add_argument("--extra", type=int, nargs="+", required=True)
    s.add_argument("--out", type=Path, required=True)
    s.set_defaults(func=cmd_length_data)

    s = sub.add_parser(
        "export-samples",
        help="print the first N samples of a split as JSON lines, in dataset order",
        description="Samples are those of the stored split: the split of --split-size samples (default: the"
        " paper's size) generated from dataset seed --seed plus the split's offset (spec §A2).",
    )
    s.add_argument("--task", choices=TASKS, required=True)
    s.add_argument("--split", choices=["train", "val", "test"], required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, default=42, help="dataset seed (default 42, the authors'; the pipeline uses 42 + run seed)")
    s.add_argument("--split-size", type=int, help="size of the split the samples come from (default: the paper's)")
    s.set_defaults(func=cmd_export_samples)

    s = sub.add_parser("train", help="train one task x seed, writing OUT/checkpoints/step-NNNNNN/ and the metrics")
    s.add_argument("--task", choices=TASKS, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--train-data", type=Path, help="stored train split (default: generate from the config)")
    s.add_argument("--test-data", type=Path, help="stored test split")
    s.add_argument("--config", type=Path, action="append", help="YAML config file(s) in the pipeline's format")
    s.add_argument("--settings", help="JSON {model: {...}, train: {...}} overriding the config")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one key, e.g. train.steps=300")
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("evaluate", help="accuracy by hop of a run's final checkpoint on stored sets")
    s.add_argument("--index", type=Path, required=True, help="the run's checkpoints.json")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("notebook", help="execute a notebook with papermill")
    s.add_argument("notebook", type=Path)
    s.add_argument("output", type=Path)
    s.add_argument("--parameters", help="JSON object of notebook parameters")
    s.add_argument("--threads", type=int, default=1, help="CPU threads of the notebook's kernel")
    s.set_defaults(func=cmd_notebook)

    s = sub.add_parser("report", help="assemble a versioned report directory")
    s.add_argument("--out", required=True)
    s.add_argument("--version", required=True)
    s.add_argument("--config", required=True, help="the validated config as JSON")
    s.add_argument("--repo", default=".")
    s.add_argument("--captions")
    s.add_argument("--receipt", required=True, help="JSON naming the report written (the rule's declared output)")
    for name in ("notebooks", "figures", "tables", "data", "checkpoints", "benchmarks", "performance"):
        s.add_argument(f"--{name}", nargs="*", default=[])
    s.set_defaults(func=cmd_report)

    for module in EXTENSIONS:
        importlib.import_module(module).add_cli(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _setup(getattr(args, "threads", None))
    from .config import ConfigError
    from .files import IntegrityError
    from .report import ReportExists

    try:
        args.func(args)
    except (ConfigError, IntegrityError, ReportExists) as err:
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
