"""Paper B's commands (``posym b <command>``), one per job of its rules: the table their parsers and the rules'
command lines come from (:mod:`posym.pipeline.jobs`). The functions are in ``cli.py``."""

from posym.pipeline.jobs import File, Job

CLI = "posym.studies.b.cli"
INDEX = File("the run's checkpoints.json")
TEST = File("stored samples (the test split)")
TABLE = "the table to write (.csv)"

JOBS = (
    Job(
        "ablation",
        "per-head ablation of a run's final model (spec §B4)",
        f"{CLI}:cmd_ablation",
        inputs={
            "index": INDEX,
            "train_data": File("the run's stored train split"),
            "test_data": File("the run's stored test split"),
        },
        out=TABLE,
        settings=("ablation",),
    ),
    Job(
        "toeplitz",
        "layer 0's logits rebuilt from the Toeplitz decomposition (spec §B1)",
        f"{CLI}:cmd_toeplitz",
        inputs={"index": INDEX, "data": TEST},
        out=TABLE,
        settings=("toeplitz",),
    ),
    Job(
        "probe",
        "linear probe of absolute position after each layer (spec §B6)",
        f"{CLI}:cmd_probe",
        inputs={"index": INDEX, "data": TEST},
        out=TABLE,
        settings=("probe",),
    ),
)
