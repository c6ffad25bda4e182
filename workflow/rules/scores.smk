# Positional / symbolic scores, entropy and head purity at every checkpoint (spec §A6; Fig 2B/C,
# 6, 7; claims A-2, A-3), and the information-flow grids of the final models (spec §A8; Fig 3).
# Include before report.smk: the report collects what these rules register.


rule scores:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/test.safetensors",
    output:
        scores="results/scores/{task}/seed{seed}/scores.csv",
        purity="results/scores/{task}/seed{seed}/purity.csv",
    log:
        "logs/scores/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/scores/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        mem_mb=by_attempt(4000),
        runtime=by_attempt(120),
    params:
        samples=config["scores"]["samples"],
        tau=config["scores"]["tau"],
        gammas=config["scores"]["gammas"],
    shell:
        "posym scores --index {input.index} --data {input.data} --samples {params.samples:q}"
        " --tau {params.tau:q} --gammas {params.gammas:q} --out-scores {output.scores}"
        " --out-purity {output.purity} --threads {threads} > {log} 2>&1"


register_benchmarks(rules.scores.benchmark)


rule flow:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
    output:
        grid="results/flow/{task}/seed{seed}/flow.csv",
        summary="results/flow/{task}/seed{seed}/flow.json",
    log:
        "logs/flow/{task}/seed{seed}.log",
    conda:
        "../../envs/training.yaml"
    threads: 1
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(60),
    shell:
        "posym flow --index {input.index} --task {wildcards.task} --out-grid {output.grid}"
        " --out-summary {output.summary} --threads {threads} > {log} 2>&1"


rule notebook_scores:
    input:
        notebook=notebook("scores.ipynb"),
        scores=runs("results/scores/{task}/seed{seed}/scores.csv"),
        purity=runs("results/scores/{task}/seed{seed}/purity.csv"),
        metrics=runs("results/train/{task}/seed{seed}/metrics.csv"),
    output:
        notebook="results/notebooks/scores.ipynb",
        fig2b_png=report(
            "results/figures/fig2b_scores.png",
            caption="../report/fig2b_scores.rst",
            category="Scores",
            labels={"item": "Fig 2B"},
        ),
        fig2b_svg="results/figures/fig2b_scores.svg",
        fig2b_csv=report(
            "results/tables/fig2b_scores_final.csv",
            caption="../report/fig2b_scores_final.rst",
            category="Scores",
            labels={"item": "Fig 2B final scores"},
        ),
        fig2b_md="results/tables/fig2b_scores_final.md",
        fig6_png=report(
            "results/figures/fig6_scores.png",
            caption="../report/fig6_scores.rst",
            category="Scores",
            labels={"item": "Fig 6"},
        ),
        fig6_svg="results/figures/fig6_scores.svg",
        fig6_csv=report(
            "results/tables/fig6_scores_initial_final.csv",
            caption="../report/fig6_scores_initial_final.rst",
            category="Scores",
            labels={"item": "Fig 6 initial and final scores"},
        ),
        fig6_md="results/tables/fig6_scores_initial_final.md",
        fig2c_png=report(
            "results/figures/fig2c_purity.png",
            caption="../report/fig2c_purity.rst",
            category="Scores",
            labels={"item": "Fig 2C"},
        ),
        fig2c_svg="results/figures/fig2c_purity.svg",
        fig2c_csv=report(
            "results/tables/fig2c_purity_steps.csv",
            caption="../report/fig2c_purity_steps.rst",
            category="Scores",
            labels={"item": "Fig 2C steps"},
        ),
        fig2c_md="results/tables/fig2c_purity_steps.md",
        fig7_png=report(
            "results/figures/fig7_purity.png",
            caption="../report/fig7_purity.rst",
            category="Scores",
            labels={"item": "Fig 7"},
        ),
        fig7_svg="results/figures/fig7_purity.svg",
        fig7_csv=report(
            "results/tables/fig7_purity_final.csv",
            caption="../report/fig7_purity_final.rst",
            category="Scores",
            labels={"item": "Fig 7 final pure heads"},
        ),
        fig7_md="results/tables/fig7_purity_final.md",
        claims_a2_csv=report(
            "results/tables/claims_A2.csv",
            caption="../report/claims_A2.rst",
            category="Claims",
            labels={"item": "Claim A-2"},
        ),
        claims_a2_md="results/tables/claims_A2.md",
        claims_a3_csv=report(
            "results/tables/claims_A3.csv",
            caption="../report/claims_A3.rst",
            category="Claims",
            labels={"item": "Claim A-3"},
        ),
        claims_a3_md="results/tables/claims_A3.md",
    log:
        "logs/notebooks/scores.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(gammas=config["scores"]["gammas"]),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_scores.output)


rule notebook_flow:
    input:
        notebook=notebook("flow.ipynb"),
        grids=runs("results/flow/{task}/seed{seed}/flow.csv"),
        summaries=runs("results/flow/{task}/seed{seed}/flow.json"),
    output:
        notebook="results/notebooks/flow.ipynb",
        fig3ab_png=report(
            "results/figures/fig3ab_flow.png",
            caption="../report/fig3ab_flow.rst",
            category="Information flow",
            labels={"item": "Fig 3A/B"},
        ),
        fig3ab_svg="results/figures/fig3ab_flow.svg",
        fig3ab_csv=report(
            "results/tables/fig3ab_flow_summary.csv",
            caption="../report/fig3ab_flow_summary.rst",
            category="Information flow",
            labels={"item": "Fig 3A/B summary"},
        ),
        fig3ab_md="results/tables/fig3ab_flow_summary.md",
        fig3cd_png=report(
            "results/figures/fig3cd_ideal_flow.png",
            caption="../report/fig3cd_ideal_flow.rst",
            category="Information flow",
            labels={"item": "Fig 3C/D"},
        ),
        fig3cd_svg="results/figures/fig3cd_ideal_flow.svg",
    log:
        "logs/notebooks/flow.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(n_layer=config["model"]["n_layer"]),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_flow.output)
