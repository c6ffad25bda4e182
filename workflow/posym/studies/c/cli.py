"""Paper C's commands (``posym c <command>``), one per job of the study's rules; their flags are those of the
study's jobs table (``jobs.py``).

Each reads its settings from the ``c`` section of the configuration: the rules pass them with ``--settings``,
people with ``--config`` / ``--set`` (``posym c published ... --set published.bootstrap_draws=200``); the schema's
defaults fill the rest. ``our-heads`` reads paper A's checkpoints and head scores (posym's own question).
"""

from __future__ import annotations

import logging

from posym.pipeline.config import command_settings
from posym.data.files import write_csv

from .jobs import REAL_MODEL

log = logging.getLogger("posym.c")

STUDY = "c"


def cmd_published(args) -> None:
    from . import published

    section = command_settings(args, STUDY, "published")["published"]
    cache = args.checksums.parent  # the tables are checked against it on every load
    frames = published.load_all(cache)
    table2 = published.table2(frames, section["bootstrap_draws"], section["seed"], section["top_k"])
    table3 = published.table3(frames)
    tables = {
        "table1": published.table1(frames["gpt2"]),
        "table2": table2,
        "table3": table3,
        "fig2a": published.fig2a(table2),
        "permutation": published.permutation(frames),
        "ablation": published.ablation(frames),
        "fig1": published.fig1(frames["gpt2"]),
        "fig2b": published.fig2b(table3),
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
    from .training import random_imag_fracs

    section = command_settings(args, STUDY, "training")["training"]
    tables = {name: gathered(getattr(args, name)) for name in ("runs", "curves", "heads")}
    write_csv(args.out_runs, tables["runs"])
    write_csv(args.out_curves, tables["curves"])
    write_csv(args.out_heads, tables["heads"])
    write_csv(args.out_table4, formation.table4(tables["runs"], section))
    write_csv(args.out_contrasts, formation.contrasts(tables["runs"], section))
    claims = section["claims"]
    imag_null = random_imag_fracs(section, "rope_sym", claims["null_heads"], claims["null_seed"])
    measured = formation.measure(tables["runs"], section, imag_null)
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

