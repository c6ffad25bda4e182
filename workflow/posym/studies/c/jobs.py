"""Paper C's commands (``posym c <command>``), one per job of its rules: the table their parsers and the rules'
command lines come from (:mod:`posym.pipeline.jobs`). The functions are in ``cli.py``."""

from posym.pipeline.jobs import File, Job, Value

CLI = "posym.studies.c.cli"
#: The tables ``posym c published`` writes (--out-<name>).
PUBLISHED = ("table1", "table2", "table3", "fig2a", "permutation", "ablation", "fig1", "fig2b")
#: The tables ``posym c real-model`` writes per model (--out-<name>), each with a ``model`` column.
REAL_MODEL = ("heads", "summary", "correlations", "kcomp")
#: The tables ``posym c train`` writes per arm, and what they hold.
ARM = {
    "runs": "one row per seed: formation, stop, final values, prev head",
    "curves": "the evaluations",
    "heads": "every head's final features",
}
TABLE = "the table to write (.csv)"
TASK = Value("the run's task (a column of the table)")
SEED = Value("the run's seed (a column of the table)", type=int)

JOBS = (
    Job(
        "train",
        "one arm of the constrained training, its seeds packed (spec §C6, claim C-4)",
        f"{CLI}:cmd_train",
        outputs={
            name: f"the table to write (.csv): {what}; seeds' checkpoints go beside it" for name, what in ARM.items()
        },
        values={"arm": Value("the arm (a name of training.arms)")},
        settings=("training",),
    ),
    Job(
        "formation",
        "Table 4, the contrasts and claim C-4's checks from every arm's tables",
        f"{CLI}:cmd_formation",
        inputs={name: File(f"every arm's {name} table (posym c train)", several=True) for name in ARM},
        outputs={
            name: f"the {name} table to write (.csv)"
            for name in ("runs", "curves", "heads", "table4", "contrasts", "claims")
        },
        settings=("training",),
    ),
    Job(
        "real-model",
        "paper C's detectors, ablations and statistics on one converted language model (spec §C2-§C4)",
        f"{CLI}:cmd_real_model",
        inputs={"model": File("a model directory converted by posym convert-model (results/models/<name>)")},
        outputs={name: f"the {name} table to write (.csv)" for name in REAL_MODEL},
        settings=("real_models",),
        extras={"name": Value("the model's label in the tables (default: its directory's name)", optional=True)},
    ),
    Job(
        "real-models-gather",
        "the per-model tables of `posym c real-model` in one of each",
        f"{CLI}:cmd_real_models_gather",
        inputs={name: File(f"the per-model {name} tables", several=True) for name in REAL_MODEL},
        outputs={name: f"the {name} table of every model (.csv)" for name in REAL_MODEL},
    ),
    Job(
        "published",
        "paper C's tables regenerated from the authors' per-head cache (spec §C6, claim C-5)",
        f"{CLI}:cmd_published",
        inputs={
            "checksums": File("the cache's checksums.json (its folder holds the tables)"),
            # listed so that the rule reruns when a table changes; the command finds them beside the checksums
            "tables": File("the cache's tables", several=True, optional=True),
        },
        outputs={name: f"the {name} table to write (.csv)" for name in PUBLISHED},
        settings=("published",),
    ),
    Job(
        "checks",
        "claims C-1 … C-3 on random heads (spec §C7.1-§C7.3)",
        f"{CLI}:cmd_checks",
        out="the measurements to write (.csv)",
        settings=("checks",),
    ),
    Job(
        "our-heads",
        "the QK fingerprint of every head of one paper-A run at every checkpoint, beside its scores (posym's own)",
        f"{CLI}:cmd_our_heads",
        inputs={
            "index": File("the run's checkpoints.json (paper A's training)"),
            "scores": File("the run's scores.csv (posym a scores)"),
            "purity": File("the run's purity.csv (posym a scores): paper A's head classes"),
            "data": File("the run's test split; its first our_heads.check_samples check the folding"),
        },
        out="the table to write (.csv): one row per checkpoint x layer x head",
        values={"task": TASK, "seed": SEED},
        settings=("our_heads",),
    ),
    Job(
        "our-heads-b",
        "the QK fingerprint of every head of one paper-B run beside its ablation drop (posym's own)",
        f"{CLI}:cmd_our_heads_b",
        inputs={
            "index": File("the run's checkpoints.json (paper B's training)"),
            "ablation": File("the run's heads.csv (posym b ablation)"),
        },
        out="the table to write (.csv): one row per layer x head",
        values={"variant": Value("the run's variant (a column of the table)"), "task": TASK, "seed": SEED},
        settings=("our_heads",),
    ),
    Job(
        "our-heads-gather",
        "the per-run tables of `posym c our-heads` in one",
        f"{CLI}:cmd_our_heads_gather",
        inputs={"tables": File("the per-run tables, in order", several=True)},
        out=TABLE,
    ),
)
