# Paper A's own jobs: the length-extended test sets and their evaluation (spec §A10.1), positional / symbolic
# scores at every checkpoint (§A6), information flow (§A8), RoPE frequency use and geometry (§A7), the theory
# (§A9), the discrepancy of trained heads, and the LLM probes (§A10.2). Data, training and the test evaluation
# are the core's rules (workflow/rules/); the notebooks come from study.yaml. Every job reads the final checkpoint
# of a run of the study's grid ({variant}/{task}/seed{seed}: the plain run, main, and the fidelity study's
# variants) or nothing trained; its settings are params, its package code is not an input (edits to it do not
# rerun it: use --forcerun).

from posym.studies.a import llm_probes

A = "results/a"
A_INDEX = paths.of(paths.CHECKPOINTS, study="a")
A_TEST = paths.of(paths.SPLIT, study="a", split="test")
A_LENGTH = f"{A}/data/{{task}}/seed{{seed}}/length.safetensors"


rule a_length_sets:
    output:
        tensors=A_LENGTH,
        meta=f"{A}/data/{{task}}/seed{{seed}}/length.json",
    log:
        "logs/a/data/{task}/seed{seed}/length.log",
    conda:
        TRAINING_ENV
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        seed=data_seed("a"),
        settings=section("a", "length"),
    shell:
        "posym a length-data --task {wildcards.task} --seed {params.seed} --settings {params.settings:q}"
        " --out {output.tensors} > {log} 2>&1"


use rule evaluate_test as a_evaluate_length with:
    input:
        index=A_INDEX,
        data=A_LENGTH,
    output:
        f"{A}/eval/{paths.RUN}/length.csv",
    log:
        "logs/a/eval/{variant}/{task}/seed{seed}/length.log",
    benchmark:
        f"{A}/benchmarks/evaluate_length/{{variant}}/{{task}}-seed{{seed}}.tsv"
    resources:
        **job_resources(mem_mb=4000, minutes=60),


# The analyses of a run's final checkpoint: each a posym job on the run's checkpoint index and a data split.
rule a_scores:
    input:
        index=A_INDEX,
        data=A_TEST,
    output:
        scores=f"{A}/scores/{paths.RUN}/scores.csv",
        purity=f"{A}/scores/{paths.RUN}/purity.csv",
    log:
        "logs/a/scores/{variant}/{task}/seed{seed}.log",
    benchmark:
        f"{A}/benchmarks/scores/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=120),
    params:
        **posym("a scores", settings=("a", "scores")),
    shell:
        JOB


rule a_frequency:
    input:
        index=A_INDEX,
        data=A_TEST,
    output:
        f"{A}/analysis/{paths.RUN}/frequency.csv",
    log:
        "logs/a/analysis/{variant}/{task}/seed{seed}/frequency.log",
    benchmark:
        f"{A}/benchmarks/frequency/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=60),
    params:
        **posym("a frequency", settings=("a", "frequency")),
    shell:
        JOB


rule a_discrepancy:
    input:
        index=A_INDEX,
        data=A_LENGTH,
    output:
        f"{A}/analysis/{paths.RUN}/discrepancy.csv",
    log:
        "logs/a/analysis/{variant}/{task}/seed{seed}/discrepancy.log",
    benchmark:
        f"{A}/benchmarks/discrepancy/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=120),
    params:
        **posym("a discrepancy", settings=("a", "discrepancy")),
    shell:
        JOB


rule a_geometry:
    input:
        index=paths.of(paths.CHECKPOINTS, study="a", task="number"),
        data=paths.of(paths.SPLIT, study="a", task="number", split="test"),
        frequency=f"{A}/analysis/{{variant}}/number/seed{{seed}}/frequency.csv",
    output:
        f"{A}/analysis/{{variant}}/number/seed{{seed}}/geometry.csv",
    log:
        "logs/a/analysis/{variant}/number/seed{seed}/geometry.log",
    benchmark:
        f"{A}/benchmarks/geometry/{{variant}}/number-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=60),
    params:
        **posym("a geometry", settings=("a", "geometry")),
    shell:
        JOB


rule a_flow:
    input:
        index=A_INDEX,
    output:
        grid=f"{A}/flow/{paths.RUN}/flow.csv",
        summary=f"{A}/flow/{paths.RUN}/flow.json",
    log:
        "logs/a/flow/{variant}/{task}/seed{seed}.log",
    conda:
        TRAINING_ENV
    threads: 1
    resources:
        **job_resources(mem_mb=2000, minutes=60),
    params:
        **posym("a flow", wildcards=("task",)),
    shell:
        JOB


rule a_theory:
    output:
        discrepancy=f"{A}/analysis/theory/discrepancy.csv",
        exactness=f"{A}/analysis/theory/exactness.csv",
    log:
        "logs/a/analysis/theory.log",
    benchmark:
        f"{A}/benchmarks/theory.tsv"
    conda:
        TRAINING_ENV
    threads: 1  # small tensors: more threads only contend
    resources:
        **job_resources(mem_mb=2000, minutes=60),
    params:
        **posym("a theory", settings=("a", "theory")),
    shell:
        JOB


try:
    A_LLM = llm_probes.probe_jobs(config["a"]["llm"], config["models"])
except ValueError as err:
    raise WorkflowError(str(err)) from None


# One job per model of llm.model (or the endpoint model).
rule a_llm_probe:
    input:
        model=by_wildcard("llm", llm_probes.probe_input, A_LLM),
    output:
        probe_items=f"{A}/llm/models/{{llm}}/items.csv",
        probe_summary=f"{A}/llm/models/{{llm}}/summary.csv",
    log:
        "logs/a/llm/{llm}.log",
    benchmark:
        f"{A}/benchmarks/llm_probe-{{llm}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=32000, minutes=240),
        gpu=by_wildcard("llm", llm_probes.probe_gpus, A_LLM, config["a"]["llm"]),
        cpus_per_gpu=cpus_per_gpu,
    params:
        # the probe's settings leave out the list of models: adding a model runs that model's job only
        **posym(
            "a llm-probe",
            settings=("a", "tasks", "llm"),
            wildcards=("llm",),
            omit=("model",),
        ),
    shell:
        JOB


# Exists only when llm.model or llm.endpoint_model is set; the notebook draws the paper's values either way.
rule a_llm_gather:
    input:
        probe_items=expand(f"{A}/llm/models/{{llm}}/items.csv", llm=A_LLM),
    output:
        probe_items=f"{A}/llm/items.csv",
        probe_summary=f"{A}/llm/summary.csv",
    log:
        "logs/a/llm/gather.log",
    localrule: True
    conda:
        TRAINING_ENV
    threads: 1
    params:
        **posym("a llm-gather"),
    shell:
        JOB
