# The versioned report of every study that runs: the studies' plans (posym.pipeline.study.Study.plan, made by `posym report`
# from the config) say what it shows.


rule report:
    input:
        unpack(report_inputs),
    output:
        # A receipt, not the report's own files: Snakemake deletes a job's outputs before it reruns
        # it, and a report version must never be deleted or overwritten (posym report refuses).
        receipt=f"results/reports/{VERSION}.json",
    log:
        "logs/report.log",
    conda:
        ANALYSIS_ENV
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        out=REPORT_DIR,
        version=VERSION,
        config=json.dumps(config, sort_keys=True),
        repo=REPO,
    shell:
        "posym report --out {params.out:q} --version {params.version:q} --config {params.config:q}"
        " --repo {params.repo:q} --data {input.data:q} --checkpoints {input.checkpoints:q}"
        " --benchmarks {input.benchmarks:q} --performance {input.performance:q} --models {input.models:q}"
        " --receipt {output.receipt:q} > {log} 2>&1"
