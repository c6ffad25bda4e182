"""Paper C's commands (``posym c <command>``), one per job of the study's rules.

Each reads its settings from the ``c`` section of the configuration: the rules pass them with ``--settings``,
people with ``--config`` / ``--set`` (``posym c published ... --set published.bootstrap_draws=200``); the schema's
defaults fill the rest. ``our-heads`` reads paper A's checkpoints and head scores (posym's own question).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from posym.pipeline.config import add_settings_arguments, command_settings
from posym.data.files import write_csv

log = logging.getLogger("posym.c")

STUDY = "c"
#: The tables ``posym c published`` writes, by option (--out-<name>).
PUBLISHED = ("table1", "table2", "table3", "fig2a", "permutation", "ablation")
#: The tables ``posym c real-model`` writes per model (--out-<name>), each with a ``model`` column.
REAL_MODEL = ("heads", "summary", "correlations", "kcomp")


def cmd_published(args) -> None:
    from . import published

    section = command_settings(args, STUDY, "published")["published"]
    cache = args.checksums.parent  # the tables are checked against it on every load
    frames = published.load_all(cache)
    table2 = published.table2(frames, section["bootstrap_draws"], section["seed"], section["top_k"])
    tables = {
        "table1": published.table1(frames["gpt2"]),
        "table2": table2,
        "table3": published.table3(frames),
        "fig2a": published.fig2a(table2),
        "permutation": published.permutation(frames),
        "ablation": published.ablation(frames),
    }
    for name, table in tables.items():
        write_csv(getattr(args, f"out_{name}"), table)
    main = tables["permutation"].iloc[0]
    log.info("top-5 percentiles %s; permutation p %.6f", " ".join(f"{v:.3f}" for v in table2["top5_percentile"]), main["p"])


def cmd_checks(args) -> None:
    from . import checks

    section = command_settings(args, STUDY, "checks")["checks"]
    table = checks.measure(section)
    write_csv(args.out, table)
    log.info("%d checks measured", len(table))


def cmd_our_heads(args) -> None:
    from . import our_heads

    section = command_settings(args, STUDY, "our_heads")["our_heads"]
    table = our_heads.fingerprint_run(args.index, args.scores, args.purity, args.data, section, args.task, args.seed)
    write_csv(args.out, table)
    final = table[table["final"].astype(bool)]
    log.info("%d heads x %d checkpoints; at convergence: %s", len(final), table["step"].nunique(), final["kind"].value_counts().to_dict())


def cmd_our_heads_b(args) -> None:
    from . import our_heads

    section = command_settings(args, STUDY, "our_heads")["our_heads"]
    table = our_heads.fingerprint_b_run(args.index, args.ablation, section, args.variant, args.task, args.seed)
    write_csv(args.out, table)
    deposit = table[table["role"] == "deposit"]
    log.info("%d heads; deposit head: %s", len(table), " ".join(f"L{r.layer} H{r.head}" for r in deposit.itertuples()) or "none")


def gathered(paths):
    """The per-job tables ``paths`` in one, in order."""
    import pandas as pd

    return pd.concat([pd.read_csv(path) for path in paths], ignore_index=True)


def cmd_our_heads_gather(args) -> None:
    write_csv(args.out, gathered(args.tables))
    log.info("%d runs gathered", len(args.tables))


def cmd_train(args) -> None:
    from . import training

    section = command_settings(args, STUDY, "training")["training"]
    if args.arm not in section["arms"]:
        raise SystemExit(f"posym c train: no arm {args.arm!r} in training.arms ({', '.join(section['arms'])})")
    seeds = section["seeds"]
    # Each seed's checkpoints beside the arm's tables (not declared outputs: an interrupted job resumes from them).
    outs = [args.out_runs.parent / f"seed{seed}" for seed in seeds]
    training.train_arm(section, args.arm, seeds, outs)
    runs, curves, heads = training.arm_outputs(section, args.arm, seeds, outs)
    write_csv(args.out_runs, runs)
    write_csv(args.out_curves, curves)
    write_csv(args.out_heads, heads)
    log.info("arm %s: formation steps %s", args.arm, " ".join(f"{s:.0f}" for s in runs["formation_step"]))


def cmd_formation(args) -> None:
    from . import formation

    section = command_settings(args, STUDY, "training")["training"]
    tables = {name: gathered(getattr(args, name)) for name in ("runs", "curves", "heads")}
    write_csv(args.out_runs, tables["runs"])
    write_csv(args.out_curves, tables["curves"])
    write_csv(args.out_heads, tables["heads"])
    write_csv(args.out_table4, formation.table4(tables["runs"], section))
    write_csv(args.out_contrasts, formation.contrasts(tables["runs"], section))
    measured = formation.measure(tables["runs"], section)
    write_csv(args.out_claims, measured)
    judged = measured["passed"].dropna()
    log.info("C-4: %d of %d checks judged pass (%d not judged)", int(judged.astype(bool).sum()), len(judged), len(measured) - len(judged))


def cmd_real_model(args) -> None:
    from . import real_models

    from posym.nn.precision import resolve_device

    section = command_settings(args, STUDY, "real_models")["real_models"]
    tables = real_models.run(args.model, args.name or args.model.name, section, resolve_device(section["device"]))
    for name, table in tables.items():
        write_csv(getattr(args, f"out_{name}"), table)
    row = tables["summary"].iloc[0]
    log.info("%s: rho(dir_frac, prev) %+.3f, top-%d percentile %.3f, Im-ablation head %s (prev rank %s) CE %.3f -> %.3f",
             row["model"], row["rho_dir"], row["top_k"], row["top_k_percentile"], row.get("im_head"), row.get("im_prev_rank"),
             row.get("im_ce_before", float("nan")), row.get("im_ce_after", float("nan")))  # fmt: skip


def cmd_real_models_gather(args) -> None:
    for name in REAL_MODEL:
        write_csv(getattr(args, f"out_{name}"), gathered(getattr(args, name)))
    log.info("%d models gathered", len(args.summary))


def _add_real_model_commands(sub) -> None:
    s = sub.add_parser("real-model", help="paper C's detectors, ablations and statistics on one converted language model (spec §C2-§C4)")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="torch CPU threads")
    s.add_argument("--model", type=Path, required=True, help="a model directory converted by posym convert-model (results/models/<name>)")
    s.add_argument("--name", help="the model's label in the tables (default: its directory's name)")
    for name in REAL_MODEL:
        s.add_argument(f"--out-{name}", type=Path, required=True, help=f"the {name} table to write (.csv)")
    s.set_defaults(func=cmd_real_model)

    s = sub.add_parser("real-models-gather", help="the per-model tables of `posym c real-model` in one of each")
    s.add_argument("--threads", type=int, help="unused")
    for name in REAL_MODEL:
        s.add_argument(f"--{name}", type=Path, nargs="+", required=True, help=f"the per-model {name} tables")
        s.add_argument(f"--out-{name}", type=Path, required=True, help=f"the {name} table of every model (.csv)")
    s.set_defaults(func=cmd_real_models_gather)


def _add_training_commands(sub) -> None:
    s = sub.add_parser("train", help="one arm of the constrained training, its seeds packed (spec §C6, claim C-4)")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="torch CPU threads")
    s.add_argument("--arm", required=True, help="the arm (a name of training.arms)")
    for name, what in (("runs", "one row per seed: formation, stop, final values, prev head"), ("curves", "the evaluations"), ("heads", "every head's final features")):
        s.add_argument(f"--out-{name}", type=Path, required=True, help=f"the table to write (.csv): {what}; seeds' checkpoints go beside it")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("formation", help="Table 4, the contrasts and claim C-4's checks from every arm's tables")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="unused")
    for name in ("runs", "curves", "heads"):
        s.add_argument(f"--{name}", type=Path, nargs="+", required=True, help=f"every arm's {name} table (posym c train)")
    for name in ("runs", "curves", "heads", "table4", "contrasts", "claims"):
        s.add_argument(f"--out-{name}", type=Path, required=True, help=f"the {name} table to write (.csv)")
    s.set_defaults(func=cmd_formation)


def add_commands(sub) -> None:
    _add_training_commands(sub)
    _add_real_model_commands(sub)
    s = sub.add_parser("published", help="paper C's tables regenerated from the authors' per-head cache (spec §C6, claim C-5)")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="CPU threads (unused: the statistics are single-threaded)")
    s.add_argument("--checksums", type=Path, required=True, help="the cache's checksums.json (its folder holds the tables)")
    s.add_argument("--tables", type=Path, nargs="*", default=[], help="the cache's tables (listed so that the rule reruns when they change)")
    for name in PUBLISHED:
        s.add_argument(f"--out-{name}", type=Path, required=True, help=f"the {name} table to write (.csv)")
    s.set_defaults(func=cmd_published)

    s = sub.add_parser("checks", help="claims C-1 … C-3 on random heads (spec §C7.1-§C7.3)")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="CPU threads")
    s.add_argument("--out", type=Path, required=True, help="the measurements to write (.csv)")
    s.set_defaults(func=cmd_checks)

    help = "the QK fingerprint of every head of one paper-A run at every checkpoint, beside its scores (posym's own)"
    s = sub.add_parser("our-heads", help=help)
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="CPU threads")
    s.add_argument("--index", type=Path, required=True, help="the run's checkpoints.json (paper A's training)")
    s.add_argument("--scores", type=Path, required=True, help="the run's scores.csv (posym a scores)")
    s.add_argument("--purity", type=Path, required=True, help="the run's purity.csv (posym a scores): paper A's head classes")
    s.add_argument("--data", type=Path, required=True, help="the run's test split; its first our_heads.check_samples check the folding")
    s.add_argument("--task", required=True, help="the run's task (a column of the table)")
    s.add_argument("--seed", type=int, required=True, help="the run's seed (a column of the table)")
    s.add_argument("--out", type=Path, required=True, help="the table to write (.csv): one row per checkpoint x layer x head")
    s.set_defaults(func=cmd_our_heads)

    s = sub.add_parser("our-heads-b", help="the QK fingerprint of every head of one paper-B run beside its ablation drop (posym's own)")
    add_settings_arguments(s)
    s.add_argument("--threads", type=int, help="CPU threads")
    s.add_argument("--index", type=Path, required=True, help="the run's checkpoints.json (paper B's training)")
    s.add_argument("--ablation", type=Path, required=True, help="the run's heads.csv (posym b ablation)")
    s.add_argument("--variant", required=True, help="the run's variant (a column of the table)")
    s.add_argument("--task", required=True, help="the run's task (a column of the table)")
    s.add_argument("--seed", type=int, required=True, help="the run's seed (a column of the table)")
    s.add_argument("--out", type=Path, required=True, help="the table to write (.csv): one row per layer x head")
    s.set_defaults(func=cmd_our_heads_b)

    s = sub.add_parser("our-heads-gather", help="the per-run tables of `posym c our-heads` in one")
    s.add_argument("--threads", type=int, help="unused")
    s.add_argument("--tables", type=Path, nargs="+", required=True, help="the per-run tables, in order")
    s.add_argument("--out", type=Path, required=True, help="the table to write (.csv)")
    s.set_defaults(func=cmd_our_heads_gather)
