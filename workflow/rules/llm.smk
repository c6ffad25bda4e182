# Paper A's task schematics and LLM prompts (Fig 1, Table 2) and its frontier-LLM probes (spec §A10.2: Fig 5C/D,
# Table 3, claim A-7). The closed APIs of the paper cannot be rerun; `llm_probe` runs the same prompts on a local
# Hugging Face model directory (llm.model) or an OpenAI-compatible endpoint (llm.endpoint_model, URL and key from
# environment variables) and exists only when one of them is configured. The notebooks always run: they draw the
# paper's published values, beside the probe's results when there are any.


# The `posym llm-probe` arguments naming the model; empty when none is configured (the probe then does not exist).
if config["llm"]["model"] and config["llm"]["endpoint_model"]:
    raise WorkflowError("config llm: set model or endpoint_model, not both")
elif config["llm"]["model"]:
    LLM_SOURCE = ["--model", config["llm"]["model"]]
elif config["llm"]["endpoint_model"]:
    LLM_SOURCE = [
        "--endpoint-model",
        config["llm"]["endpoint_model"],
        "--url-env",
        config["llm"]["url_env"],
        "--key-env",
        config["llm"]["key_env"],
    ]
else:
    LLM_SOURCE = []
LLM_PROBE = {
    "probe_items": "results/llm/items.csv",
    "probe_summary": "results/llm/summary.csv",
}


if LLM_SOURCE:

    rule llm_probe:
        input:
            config["llm"]["model"] or [],  # a wrong directory stops the DAG before any job runs
        output:
            **LLM_PROBE,
        log:
            "logs/llm/probe.log",
        benchmark:
            "results/benchmarks/llm_probe.tsv"
        conda:
            "../../envs/training.yaml"
        threads: config["threads"]
        resources:
            gpu=llm_gpus,
            cpus_per_gpu=cpus_per_gpu,
            mem_mb=by_attempt(32000),
            runtime=by_attempt(240),
        params:
            source=LLM_SOURCE,
            tasks=config["tasks"],
            windows=config["llm"]["windows"],
            runs=config["llm"]["runs"],
            n_items=config["llm"]["items"],
            max_new_tokens=config["llm"]["max_new_tokens"],
            device=config["llm"]["device"],
            dtype=config["llm"]["dtype"],
            chat_template=config["llm"]["chat_template"],
        shell:
            "posym llm-probe {params.source:q} --tasks {params.tasks:q} --windows {params.windows}"
            " --runs {params.runs} --items {params.n_items} --max-new-tokens {params.max_new_tokens}"
            " --device {params.device:q} --dtype {params.dtype:q} --chat-template {params.chat_template:q}"
            " --out-items {output.probe_items} --out-summary {output.probe_summary} --threads {threads} > {log} 2>&1"

    REPORT_FILES["benchmarks"].append(str(rules.llm_probe.benchmark))


rule notebook_llm:
    input:
        **(LLM_PROBE if LLM_SOURCE else {}),
        notebook=notebook("llm.ipynb"),
    output:
        notebook="results/notebooks/llm.ipynb",
        fig5c_png=report(
            "results/figures/fig5c_llm.png",
            caption="../report/fig5c_llm.rst",
            category="LLM probes",
            labels={"item": "Fig 5C"},
        ),
        fig5c_svg="results/figures/fig5c_llm.svg",
        fig5d_png=report(
            "results/figures/fig5d_llm.png",
            caption="../report/fig5d_llm.rst",
            category="LLM probes",
            labels={"item": "Fig 5D"},
        ),
        fig5d_svg="results/figures/fig5d_llm.svg",
        table_csv=report(
            "results/tables/table3_llm.csv",
            caption="../report/table3_llm.rst",
            category="LLM probes",
            labels={"item": "Table 3"},
        ),
        table_md="results/tables/table3_llm.md",
        claims_csv=report(
            "results/tables/claims_A7.csv",
            caption="../report/claims_A7.rst",
            category="LLM probes",
            labels={"item": "Claim A-7"},
        ),
        claims_md="results/tables/claims_A7.md",
    log:
        "logs/notebooks/llm.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_llm.output)


rule notebook_tasks:
    input:
        notebook=notebook("tasks.ipynb"),
    output:
        notebook="results/notebooks/tasks.ipynb",
        figure_png=report(
            "results/figures/fig1_tasks.png",
            caption="../report/fig1_tasks.rst",
            category="Tasks and prompts",
            labels={"item": "Fig 1"},
        ),
        figure_svg="results/figures/fig1_tasks.svg",
        table_csv=report(
            "results/tables/table2_prompts.csv",
            caption="../report/table2_prompts.rst",
            category="Tasks and prompts",
            labels={"item": "Table 2"},
        ),
        table_md="results/tables/table2_prompts.md",
    log:
        "logs/notebooks/tasks.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        parameters=notebook_parameters(data_seed=config["data"]["seed_offset"]),
    shell:
        "posym notebook {input.notebook} {output.notebook} --parameters {params.parameters:q} > {log} 2>&1"


register_report_outputs(rules.notebook_tasks.output)
