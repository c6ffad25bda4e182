# Configuration checks, target lists and the small helpers rules use for their params.
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


def output_dir(wildcards, output):
    """The folder of a job's first output, for commands that write several files there."""
    return os.path.dirname(output[0])


def notebook(name):
    """A notebook's source as an input, so that editing it reruns it."""
    return os.path.join(REPO, "workflow", "notebooks", name)


def runs(pattern):
    """One path per task x seed."""
    return expand(pattern, task=config["tasks"], seed=config["seeds"])


def data_seed(wildcards):
    return config["data"]["seed_offset"] + int(wildcards.seed)


def split_size(wildcards):
    return config["data"][f"{wildcards.split}_samples"]


def train_settings():
    """The model and optimisation settings a training job uses, as one JSON argument."""
    return json.dumps(
        {"model": config["model"], "train": config["train"]}, sort_keys=True
    )


def final_targets():
    return [f"{REPORT_DIR}/index.html"]


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
