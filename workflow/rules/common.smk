# Configuration checks, target lists and the small helpers rules use for their params.
import glob
import json
import os

from posym import config as posym_config
from posym.provenance import report_version

try:
    config.update(posym_config.validate(config))
except posym_config.ConfigError as err:
    raise WorkflowError(str(err)) from None


REPO = workflow.basedir
VERSION = report_version(config, REPO)
REPORT_DIR = f"reports/{VERSION}"
# Benchmark results committed with the code (benchmarks/results/*.json); the report shows them.
PERFORMANCE = sorted(
    os.path.relpath(p)
    for p in glob.glob(os.path.join(REPO, "benchmarks", "results", "*.json"))
)
# The pip sections of envs/*.yaml install posym from here (`-e ${POSYM_REPO}`): Snakemake copies an env
# file to .snakemake/conda/ before creating it, so a path relative to the file would point there.
os.environ.update(POSYM_REPO=REPO)


def output_dir(wildcards, output):
    """The folder of a job's first output, for commands that write several files there."""
    return os.path.dirname(output[0])


def notebook(name):
    """A notebook's source as an input, so that editing it reruns it.

    Relative to the working directory, so that moving a repository together with its results
    does not make every notebook look changed.
    """
    return os.path.relpath(os.path.join(REPO, "workflow", "notebooks", name))


def runs(pattern):
    """One path per task x seed."""
    return expand(pattern, task=config["tasks"], seed=config["seeds"])


def data_seed(wildcards):
    return config["data"]["seed_offset"] + int(wildcards.seed)


def split_size(wildcards):
    return config["data"][f"{wildcards.split}_samples"]


# What a job needs, for cluster executors; where it runs (partition, GPU model, account) is set in the
# profile (profiles/slurm), never here. Memory and time grow with each try: a failed job is resubmitted
# (the SLURM profile sets retries: 1) with attempt=2 and asks for twice as much.
# Locally these are only counted against --resources when that is given: `gpu` does not stop a job on a
# machine without a GPU.


def by_attempt(first):
    """A resources function: ``first`` on the first try, twice that on the second, and so on."""

    def scaled(wildcards, attempt):
        return first * attempt

    return scaled


def training_gpus(wildcards):
    """A training job asks for one GPU unless the config trains on the CPU (train.device: cpu)."""
    return 0 if config["train"]["device"] == "cpu" else 1


def llm_gpus(wildcards):
    """The LLM probe asks for one GPU for a local model not set to run on the CPU; none for an endpoint."""
    return 1 if config["llm"]["model"] and config["llm"]["device"] != "cpu" else 0


def cpus_per_gpu(wildcards, threads):
    """The CPU cores a GPU job asks for beside its GPU: its threads (sbatch --cpus-per-gpu)."""
    return threads


def train_settings():
    """The model and optimisation settings a training job uses, as one JSON argument."""
    return json.dumps(
        {"model": config["model"], "train": config["train"]}, sort_keys=True
    )


def final_targets():
    return [f"results/reports/{VERSION}.json"]


def notebook_parameters(**extra):
    """A params function handing a notebook its named inputs and outputs plus ``extra`` (as JSON).

    Config values a notebook uses travel in ``extra``, so changing them reruns the notebook.
    """

    def parameters(wildcards, input, output):
        values = {"tasks": config["tasks"], "seeds": config["seeds"], **extra}
        for files in (input, output):
            for name, value in files.items():
                if name != "notebook":
                    values[name] = value if isinstance(value, str) else list(value)
        return json.dumps(values, sort_keys=True)

    return parameters


# Files the report collects, by kind; each topical rules file registers its notebooks' outputs.
REPORT_FILES = {"notebooks": [], "figures": [], "tables": [], "benchmarks": []}
_REPORT_KIND = {
    ".ipynb": "notebooks",
    ".png": "figures",
    ".svg": "figures",
    ".csv": "tables",
    ".md": "tables",
}


def register_report_outputs(output):
    """Add a notebook rule's outputs to the report, sorted by file type."""
    for path in output:
        REPORT_FILES[_REPORT_KIND[os.path.splitext(path)[1]]].append(path)


def register_benchmarks(pattern):
    """Record the wall times of a per-run benchmark file pattern in the manifest."""
    REPORT_FILES["benchmarks"].extend(runs(pattern))
