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
    params:
        parameters=notebook_parameters(),
    log:
        "logs/notebooks/training.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


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
    params:
        parameters=notebook_parameters(),
    log:
        "logs/notebooks/length.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


rule report:
    input:
        notebooks=[rules.notebook_training.output.notebook, rules.notebook_length.output.notebook],
        figures=[
            rules.notebook_training.output.figure_png,
            rules.notebook_training.output.figure_svg,
            rules.notebook_length.output.figure_png,
            rules.notebook_length.output.figure_svg,
        ],
        tables=[
            rules.notebook_training.output.table_csv,
            rules.notebook_training.output.table_md,
            rules.notebook_training.output.final_csv,
            rules.notebook_training.output.final_md,
            rules.notebook_length.output.table_csv,
            rules.notebook_length.output.table_md,
        ],
        data=runs("results/data/{task}/seed{seed}/train.json")
        + runs("results/data/{task}/seed{seed}/test.json")
        + runs("results/data/{task}/seed{seed}/length.json"),
        checkpoints=runs("results/train/{task}/seed{seed}/checkpoints.json"),
        benchmarks=runs("results/benchmarks/train/{task}-seed{seed}.tsv")
        + runs("results/benchmarks/evaluate_test/{task}-seed{seed}.tsv")
        + runs("results/benchmarks/evaluate_length/{task}-seed{seed}.tsv"),
    output:
        index=protected(f"{REPORT_DIR}/index.html"),
        manifest=protected(f"{REPORT_DIR}/manifest.json"),
    params:
        out=REPORT_DIR,
        version=VERSION,
        config=json.dumps(config, sort_keys=True),
        captions=os.path.join(REPO, "workflow", "report"),
        repo=REPO,
    log:
        "logs/report.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "posym report --out {params.out:q} --version {params.version:q} --config {params.config:q}"
        " --repo {params.repo:q} --captions {params.captions:q}"
        " --notebooks {input.notebooks:q} --figures {input.figures:q} --tables {input.tables:q}"
        " --data {input.data:q} --checkpoints {input.checkpoints:q}"
        " --benchmarks {input.benchmarks:q} > {log} 2>&1"
