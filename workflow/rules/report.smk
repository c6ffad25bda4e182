# Notebooks (papermill) that render the paper's figures and tables, and the versioned report.
# A notebook's parameters are its named inputs and outputs (see notebook_parameters).


rule notebook_training:
    input:
        notebook=notebook("training.ipynb"),
        metrics=runs("results/train/{task}/seed{seed}/metrics.csv"),
        final=runs("results/eval/{task}/seed{seed}/test.csv"),
    output:
        notebook="results/notebooks/training.ipynb",
        figure_png=report(
            "results/figures/fig2a_accuracy.png",
            caption="../report/fig2a_accuracy.rst",
            category="Training",
            labels={"item": "Fig 2A"},
        ),
        figure_svg="results/figures/fig2a_accuracy.svg",
        table_csv=report(
            "results/tables/fig2a_crossings.csv",
            caption="../report/fig2a_crossings.rst",
            category="Training",
            labels={"item": "Fig 2A crossings"},
        ),
        table_md="results/tables/fig2a_crossings.md",
        final_csv=report(
            "results/tables/fig2a_final_accuracy.csv",
            caption="../report/fig2a_final_accuracy.rst",
            category="Training",
            labels={"item": "Final test accuracy"},
        ),
        final_md="results/tables/fig2a_final_accuracy.md",
        claims_csv=report(
            "results/tables/claims_A1.csv",
            caption="../report/claims_A1.rst",
            category="Training",
            labels={"item": "Claim A-1"},
        ),
        claims_md="results/tables/claims_A1.md",
    log:
        "logs/notebooks/training.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_training.output)


rule notebook_length:
    input:
        notebook=notebook("length.ipynb"),
        length=runs("results/eval/{task}/seed{seed}/length.csv"),
    output:
        notebook="results/notebooks/length.ipynb",
        figure_png=report(
            "results/figures/fig5b_length.png",
            caption="../report/fig5b_length.rst",
            category="Length generalisation",
            labels={"item": "Fig 5B"},
        ),
        figure_svg="results/figures/fig5b_length.svg",
        table_csv=report(
            "results/tables/fig5b_length.csv",
            caption="../report/fig5b_length_table.rst",
            category="Length generalisation",
            labels={"item": "Fig 5B values"},
        ),
        table_md="results/tables/fig5b_length.md",
    log:
        "logs/notebooks/length.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_length.output)


rule notebook_compute:
    input:
        notebook=notebook("compute.ipynb"),
        benchmarks=REPORT_FILES["benchmarks"],
        checkpoints=runs("results/train/{task}/seed{seed}/checkpoints.json"),
    output:
        notebook="results/notebooks/compute.ipynb",
        table_csv=report(
            "results/tables/table4_compute.csv",
            caption="../report/table4_compute.rst",
            category="Compute",
            labels={"item": "Table 4"},
        ),
        table_md="results/tables/table4_compute.md",
    log:
        "logs/notebooks/compute.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_compute.output)


rule report:
    input:
        notebooks=REPORT_FILES["notebooks"],
        figures=REPORT_FILES["figures"],
        tables=REPORT_FILES["tables"],
        data=runs("results/data/{task}/seed{seed}/train.json")
        + runs("results/data/{task}/seed{seed}/test.json")
        + runs("results/data/{task}/seed{seed}/length.json"),
        checkpoints=runs("results/train/{task}/seed{seed}/checkpoints.json"),
        benchmarks=REPORT_FILES["benchmarks"],
        performance=PERFORMANCE,
    output:
        # A receipt, not the report's own files: Snakemake deletes a job's outputs before it reruns
        # it, and a report version must never be deleted or overwritten (posym report refuses).
        receipt=f"results/reports/{VERSION}.json",
    log:
        "logs/report.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        out=REPORT_DIR,
        version=VERSION,
        config=json.dumps(config, sort_keys=True),
        captions=os.path.join(REPO, "workflow", "report"),
        repo=REPO,
    shell:
        "posym report --out {params.out:q} --version {params.version:q} --config {params.config:q}"
        " --repo {params.repo:q} --captions {params.captions:q}"
        " --notebooks {input.notebooks:q} --figures {input.figures:q} --tables {input.tables:q}"
        " --data {input.data:q} --checkpoints {input.checkpoints:q}"
        " --benchmarks {input.benchmarks:q} --performance {input.performance:q}"
        " --receipt {output.receipt:q} > {log} 2>&1"
