# posym: the studies of workflow/posym/studies/ (config `studies`; a = paper A), from task data to one versioned
# report. Core rules (data, training, evaluation, notebooks, report) live in workflow/rules/, each study's own in
# its folder (rules.smk).
#   snakemake --cores all                              # config.yaml: paper A exactly
#   snakemake --cores all --configfile configs/quick.yaml
# See README.md; every config key is documented in workflow/schemas/config.schema.yaml and the studies' schema.yaml.
import os
import re
import sys

from snakemake.utils import min_version

min_version("9.0")

# The rules, the notebooks and every job run the posym package of this repository, even where another posym is
# installed (a second clone, a test's copy of the repository).
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        filter(
            None,
            [os.path.join(workflow.basedir, "workflow"), os.environ.get("PYTHONPATH")],
        )
    )
)


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


wildcard_constraints:
    study="|".join(config["studies"]),
    task="|".join(
        task for study in config["studies"] for task in config[study].get("tasks", [])
    ),
    variant="|".join(
        map(re.escape, sorted({v for grid in GRIDS.values() for v in grid.variants}))
    )
    or "(?!)",
    seed=r"\d+",
    pack=r"seed\d+(\+\d+)*",
    split="train|val|test",
    model="|".join(map(re.escape, config["models"])) or "(?!)",
    llm=r"[^/]+",


include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/models.smk"


for study in STUDIES:

    include: study.rules


include: "workflow/rules/notebooks.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        final_targets(),


# Every rule's shell carries the code fingerprint of the command it runs, so that its jobs rerun when that code
# changes (code(...), workflow/rules/common.smk).
check_code_marks()
