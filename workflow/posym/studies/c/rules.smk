# Paper C's jobs: the published tables regenerated from the authors' per-head cache (claim C-5, spec §C6) and
# the checks on random heads (C-1 … C-3, spec §C7). Neither needs model weights; both are small CPU jobs. The
# cache's tables are inputs, so replacing one reruns the statistics (and the loader checks its sha256). The
# notebooks come from study.yaml.
from posym.studies.c.paper import MODELS as C_MODELS

C = "results/c"
C_CACHE = os.path.relpath(
    os.path.join(REPO, "workflow", "posym", "studies", "c", "cache")
)


rule c_published:
    input:
        checksums=f"{C_CACHE}/checksums.json",
        tables=expand(f"{C_CACHE}/{{model}}.csv", model=C_MODELS),
    output:
        table1=f"{C}/published/table1.csv",
        table2=f"{C}/published/table2.csv",
        table3=f"{C}/published/table3.csv",
        fig2a=f"{C}/published/fig2a.csv",
        permutation=f"{C}/published/permutation.csv",
        ablation=f"{C}/published/ablation.csv",
        fig1=f"{C}/published/fig1.csv",
        fig2b=f"{C}/published/fig2b.csv",
    log:
        "logs/c/published.log",
    benchmark:
        f"{C}/benchmarks/published.tsv"
    conda:
        ANALYSIS_ENV
    threads: 1
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("c published"),
    shell:
        code("c published") + JOB


rule c_checks:
    output:
        f"{C}/checks/checks.csv",
    log:
        "logs/c/checks.log",
    benchmark:
        f"{C}/benchmarks/checks.tsv"
    conda:
        ANALYSIS_ENV
    threads: 1
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("c checks"),
    shell:
        code("c checks") + JOB


include: "training.smk"
# posym's own question on the heads of papers A and B: its jobs exist only where study a (or b) runs too.
include: "our_heads.smk"
# Paper C on real language models: jobs exist for the names c.real_models.models gives.
include: "real_models.smk"
