# RoPE frequency use and geometry of the trained heads (spec §A7), paper A's theory (§A9) and the discrepancy of
# trained heads on the length-extended sets (§A9 end, PROPOSED), with the verdicts of claims A-4, A-5 and A-6.
# Analysis jobs read each run's final checkpoint; their package sources are not inputs (edits to them do not
# rerun the jobs), their settings are params.


rule frequency:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/test.safetensors",
    output:
        "results/analysis/{task}/seed{seed}/frequency.csv",
    log:
        "logs/analysis/{task}/seed{seed}/frequency.log",
    benchmark:
        "results/benchmarks/frequency/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(60),
    params:
        samples=config["frequency"]["samples"],
    shell:
        "posym frequency --index {input.index} --data {input.data} --samples {params.samples}"
        " --out {output} --threads {threads} > {log} 2>&1"


rule geometry:
    input:
        index="results/train/number/seed{seed}/checkpoints.json",
        data="results/data/number/seed{seed}/test.safetensors",
        frequency="results/analysis/number/seed{seed}/frequency.csv",
    output:
        "results/analysis/number/seed{seed}/geometry.csv",
    log:
        "logs/analysis/number/seed{seed}/geometry.log",
    benchmark:
        "results/benchmarks/geometry/number-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(60),
    params:
        layer=config["geometry"]["layer"],
        samples=config["geometry"]["samples"],
    shell:
        "posym geometry --index {input.index} --data {input.data} --frequency {input.frequency}"
        " --layer {params.layer} --samples {params.samples} --out {output} --threads {threads} > {log} 2>&1"


rule discrepancy:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/length.safetensors",
    output:
        "results/analysis/{task}/seed{seed}/discrepancy.csv",
    log:
        "logs/analysis/{task}/seed{seed}/discrepancy.log",
    benchmark:
        "results/benchmarks/discrepancy/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        mem_mb=by_attempt(4000),
        runtime=by_attempt(120),
    params:
        samples=config["discrepancy"]["samples"],
    shell:
        "posym discrepancy --index {input.index} --data {input.data} --samples {params.samples}"
        " --out {output} --threads {threads} > {log} 2>&1"


rule theory:
    output:
        discrepancy="results/analysis/theory/discrepancy.csv",
        exactness="results/analysis/theory/exactness.csv",
    log:
        "logs/analysis/theory.log",
    benchmark:
        "results/benchmarks/theory.tsv"
    conda:
        "../../envs/training.yaml"
    threads: 1  # small tensors: more threads only contend
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(60),
    params:
        max_length=config["theory"]["max_length"],
        theta_index=config["theory"]["theta_index"],
        theta_index_construction=config["theory"]["theta_index_construction"],
        theta_retrieval=config["theory"]["theta_retrieval"],
        alphabet=config["theory"]["alphabet"],
        beta=config["theory"]["beta"],
        random_inputs=config["theory"]["random_inputs"],
        seed=config["theory"]["seed"],
    shell:
        "posym theory --discrepancy {output.discrepancy} --exactness {output.exactness}"
        " --max-length {params.max_length} --theta-index {params.theta_index}"
        " --theta-index-construction {params.theta_index_construction}"
        " --theta-retrieval {params.theta_retrieval} --alphabet {params.alphabet} --beta {params.beta}"
        " --random-inputs {params.random_inputs} --seed {params.seed} --threads {threads} > {log} 2>&1"


register_benchmarks(rules.frequency.benchmark)
register_benchmarks(rules.discrepancy.benchmark)
REPORT_FILES["benchmarks"].append(str(rules.theory.benchmark))


rule notebook_frequency:
    input:
        notebook=notebook("frequency.ipynb"),
        frequency=runs("results/analysis/{task}/seed{seed}/frequency.csv"),
    output:
        notebook="results/notebooks/frequency.ipynb",
        table_csv=report(
            "results/tables/table1_frequency.csv",
            caption="../report/table1_frequency.rst",
            category="RoPE frequency use",
            labels={"item": "Table 1"},
        ),
        table_md="results/tables/table1_frequency.md",
        fig8_png=report(
            "results/figures/fig8_frequency.png",
            caption="../report/fig8_frequency.rst",
            category="RoPE frequency use",
            labels={"item": "Fig 8"},
        ),
        fig8_svg="results/figures/fig8_frequency.svg",
        fig4c_png=report(
            "results/figures/fig4c_frequency.png",
            caption="../report/fig4c_frequency.rst",
            category="RoPE frequency use",
            labels={"item": "Fig 4C"},
        ),
        fig4c_svg="results/figures/fig4c_frequency.svg",
        claims_csv=report(
            "results/tables/claims_A4.csv",
            caption="../report/claims_A4.rst",
            category="RoPE frequency use",
            labels={"item": "Claim A-4"},
        ),
        claims_md="results/tables/claims_A4.md",
    log:
        "logs/notebooks/frequency.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(layer=config["geometry"]["layer"]),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_frequency.output)


if "number" in config["tasks"]:

    rule notebook_geometry:
        input:
            notebook=notebook("geometry.ipynb"),
            coordinates=expand(
                "results/analysis/number/seed{seed}/geometry.csv", seed=config["seeds"]
            ),
        output:
            notebook="results/notebooks/geometry.ipynb",
            fig4a_png=report(
                "results/figures/fig4a_index_construction.png",
                caption="../report/fig4a_index_construction.rst",
                category="RoPE geometry",
                labels={"item": "Fig 4A"},
            ),
            fig4a_svg="results/figures/fig4a_index_construction.svg",
            fig4b_png=report(
                "results/figures/fig4b_dominant_plane.png",
                caption="../report/fig4b_dominant_plane.rst",
                category="RoPE geometry",
                labels={"item": "Fig 4B"},
            ),
            fig4b_svg="results/figures/fig4b_dominant_plane.svg",
        log:
            "logs/notebooks/geometry.log",
        conda:
            "../../envs/analysis.yaml"
        resources:
            mem_mb=by_attempt(2000),
            runtime=by_attempt(30),
        params:
            parameters=notebook_parameters(),
        shell:
            "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"

    register_report_outputs(rules.notebook_geometry.output)
    REPORT_FILES["benchmarks"].extend(
        expand(rules.geometry.benchmark, seed=config["seeds"])
    )


rule notebook_theory:
    input:
        notebook=notebook("theory.ipynb"),
        discrepancy=rules.theory.output.discrepancy,
        exactness=rules.theory.output.exactness,
    output:
        notebook="results/notebooks/theory.ipynb",
        fig5a_png=report(
            "results/figures/fig5a_discrepancy.png",
            caption="../report/fig5a_discrepancy.rst",
            category="Theory",
            labels={"item": "Fig 5A"},
        ),
        fig5a_svg="results/figures/fig5a_discrepancy.svg",
        values_csv=report(
            "results/tables/fig5a_values.csv",
            caption="../report/fig5a_values.rst",
            category="Theory",
            labels={"item": "Fig 5A values"},
        ),
        values_md="results/tables/fig5a_values.md",
        index_csv=report(
            "results/tables/listing1_index.csv",
            caption="../report/listing1_index.rst",
            category="Theory",
            labels={"item": "Listing 1: Index"},
        ),
        index_md="results/tables/listing1_index.md",
        retrieval_csv=report(
            "results/tables/listing1_retrieval.csv",
            caption="../report/listing1_retrieval.rst",
            category="Theory",
            labels={"item": "Listing 1: Retrieval"},
        ),
        retrieval_md="results/tables/listing1_retrieval.md",
        claims_csv=report(
            "results/tables/claims_A6.csv",
            caption="../report/claims_A6.rst",
            category="Theory",
            labels={"item": "Claim A-6"},
        ),
        claims_md="results/tables/claims_A6.md",
    log:
        "logs/notebooks/theory.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_theory.output)


rule notebook_discrepancy:
    input:
        notebook=notebook("discrepancy.ipynb"),
        discrepancy=runs("results/analysis/{task}/seed{seed}/discrepancy.csv"),
        length=runs("results/eval/{task}/seed{seed}/length.csv"),
    output:
        notebook="results/notebooks/discrepancy.ipynb",
        figure_png=report(
            "results/figures/fig5a_trained_heads.png",
            caption="../report/fig5a_trained_heads.rst",
            category="Length generalisation",
            labels={"item": "Discrepancy of trained heads"},
        ),
        figure_svg="results/figures/fig5a_trained_heads.svg",
        table_csv=report(
            "results/tables/fig5a_trained_heads.csv",
            caption="../report/fig5a_trained_heads_table.rst",
            category="Length generalisation",
            labels={"item": "Discrepancy of trained heads, values"},
        ),
        table_md="results/tables/fig5a_trained_heads.md",
        claims_csv=report(
            "results/tables/claims_A5.csv",
            caption="../report/claims_A5.rst",
            category="Length generalisation",
            labels={"item": "Claim A-5"},
        ),
        claims_md="results/tables/claims_A5.md",
    log:
        "logs/notebooks/discrepancy.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_discrepancy.output)
