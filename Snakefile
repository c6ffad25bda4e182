# posym: paper A (arXiv 2605.31558) from task data to a versioned report.
#   snakemake --cores all                              # config.yaml: paper A exactly
#   snakemake --cores all --configfile configs/quick.yaml
# See README.md; every config key is documented in workflow/schemas/config.schema.yaml.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


wildcard_constraints:
    task="|".join(config["tasks"]),
    seed=r"\d+",
    split="train|val|test",


include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/scores.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/llm.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        final_targets(),
