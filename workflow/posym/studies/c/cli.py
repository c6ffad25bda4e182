"""Paper C's commands (``posym c <command>``), one per job of the study's rules.

Each reads its settings from the ``c`` section of the configuration: the rules pass them with ``--settings``,
people with ``--config`` / ``--set`` (``posym c published ... --set published.bootstrap_draws=200``); the schema's
defaults fill the rest. Neither needs model weights.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from posym.cli import add_settings_arguments, settings
from posym.files import write_csv

log = logging.getLogger("posym.c")

STUDY = "c"
#: The tables ``posym c published`` writes, by option (--out-<name>).
PUBLISHED = ("table1", "table2", "table3", "fig2a", "permutation", "ablation")


def cmd_published(args) -> None:
    from . import published

    section = settings(args, STUDY, "published")["published"]
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

    section = settings(args, STUDY, "checks")["checks"]
    table = checks.measure(section)
    write_csv(args.out, table)
    log.info("%d checks measured", len(table))


def add_commands(sub) -> None:
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
