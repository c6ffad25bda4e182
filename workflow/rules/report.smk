# The versioned report of every study that runs: the studies' plans (posym.pipeline.study.Study.plan, made by `posym report`
# from the config) say what it shows. The job names its version when it runs (posym.pipeline.provenance.report_version:
# the code and the configuration), so that only what reruns the report's inputs, its params or its code makes a new
# version; one that exists for identical inputs is reused. Its params hold no absolute path and only the sections of
# the studies that run, so a moved checkout is up to date and editing a study that is off reruns nothing.


rule report:
    input:
        unpack(report_inputs),
    output:
        # A receipt, not the report's own files: Snakemake deletes a job's outputs before it reruns
        # it, and a report version must never be deleted or overwritten (posym report refuses).
        receipt=REPORT_RECEIPT,
    log:
        "logs/report.log",
    conda:
        ANALYSIS_ENV
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        reports="reports",
        history=REPORT_HISTORY,
        config=json.dumps(posym_config.canonical(config), sort_keys=True),
        repo=os.path.relpath(REPO),
    shell:
        code("report build")
        + "posym report build --reports {params.reports:q} --history {params.history:q}"
        " --config {params.config:q} --repo {params.repo:q} --data {input.data:q} --checkpoints {input.checkpoints:q}"
        " --benchmarks {input.benchmarks:q} --performance {input.performance:q} --models {input.models:q}"
        " --receipt {output.receipt:q} > {log} 2>&1"
