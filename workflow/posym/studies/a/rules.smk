# Paper A's own jobs: the length-extended test sets and their evaluation (spec §A10.1), positional / symbolic
# scores at every checkpoint (§A6), information flow (§A8), RoPE frequency use and geometry (§A7), the theory
# (§A9), the discrepancy of trained heads, and the LLM probes (§A10.2). Data, training and the test evaluation
# are the core's rules (workflow/rules/); the notebooks come from study.yaml. Every job reads the final checkpoint
# of a run of the study's grid ({variant}/{task}/seed{seed}: the plain run, main, and the fidelity study's
# variants) or nothing trained; its settings are params, and the fingerprint of the code it runs is in its shell
# command (code(...), compared by Snakemake's code rerun trigger).

from posym.studies.a import llm_probes

A = "results/a"
PAPER_A = posym_study.load("a")  # its named paths (study.yaml: paths)
A_INDEX = paths.of(paths.CHECKPOINTS, study="a")
A_TEST = paths.of(paths.SPLIT, study="a", split="test")
A_LENGTH = PAPER_A.path("length_sets")


rule a_length_sets:
    output:
        tensors=A_LENGTH,
        meta=PAPER_A.path("length_record"),
    log:
        "logs/a/data/{task}/seed{seed}/length.log",
    conda:
        TRAINING_ENV
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        seed=data_seed("a"),
        settings=posym_jobs.settings_json(config["a"], ["length"]),
    shell:
        code("a length-data")
        + "posym a length-data --task {wildcards.task} --seed {params.seed} --settings {params.settings:q}"
        " --out {output.tensors} > {log} 2>&1"


use rule evaluate_test as a_evaluate_length with:
    input:
        index=A_INDEX,
        data=A_LENGTH,
    output:
        PAPER_A.path("length_accuracy"),
    log:
        "logs/a/eval/{variant}/{task}/seed{seed}/length.log",
    benchmark:
        f"{A}/benchmarks/evaluate_length/{{variant}}/{{task}}-seed{{seed}}.tsv"
    resources:
        **job_resources(mem_mb=4000, minutes=60),


# Fig 5B under each filler rule (posym's length-protocol study): inference on the run's final checkpoint, its sets
# made in the job from the same seed as the run's length sets.
rule a_length_protocol:
    input:
        index=A_INDEX,
    output:
        PAPER_A.path("length_protocol"),
    log:
        "logs/a/analysis/{variant}/{task}/seed{seed}/length_protocol.log",
    benchmark:
        f"{A}/benchmarks/length_protocol/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=120),
    params:
        seed=data_seed("a"),
        settings=posym_jobs.settings_json(config["a"], ["length_protocol"]),
    shell:
        code("a length-protocol")
        + "posym a length-protocol --index {input.index} --task {wildcards.task} --seed {params.seed}"
        " --settings {params.settings:q} --out {output} --threads {threads} > {log} 2>&1"


# The analyses of a run's final checkpoint: each a posym job on the run's checkpoint index and a data split.
rule a_scores:
    input:
        index=A_INDEX,
        data=A_TEST,
    output:
        scores=PAPER_A.path("scores"),
        purity=PAPER_A.path("purity"),
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
        **posym("a scores"),
    shell:
        code("a scores") + JOB


rule a_frequency:
    input:
        index=A_INDEX,
        data=A_TEST,
    output:
        PAPER_A.path("frequency"),
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
        **posym("a frequency"),
    shell:
        code("a frequency") + JOB


rule a_discrepancy:
    input:
        index=A_INDEX,
        data=A_LENGTH,
    output:
        PAPER_A.path("discrepancy"),
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
        **posym("a discrepancy"),
    shell:
        code("a discrepancy") + JOB


rule a_geometry:
    input:
        index=paths.of(paths.CHECKPOINTS, study="a", task="number"),
        data=paths.of(paths.SPLIT, study="a", task="number", split="test"),
        frequency=paths.of(PAPER_A.path("frequency"), task="number"),
    output:
        PAPER_A.path("geometry"),
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
        **posym("a geometry"),
    shell:
        code("a geometry") + JOB


rule a_flow:
    input:
        index=A_INDEX,
    output:
        grid=PAPER_A.path("flow_grid"),
        summary=PAPER_A.path("flow_summary"),
    log:
        "logs/a/flow/{variant}/{task}/seed{seed}.log",
    conda:
        TRAINING_ENV
    threads: 1
    resources:
        **job_resources(mem_mb=2000, minutes=60),
    params:
        **posym("a flow"),
    shell:
        code("a flow") + JOB


rule a_theory:
    output:
        discrepancy=PAPER_A.path("theory_discrepancy"),
        exactness=PAPER_A.path("theory_exactness"),
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
        **posym("a theory"),
    shell:
        code("a theory") + JOB


try:
    A_LLM = llm_probes.probe_jobs(config["a"]["llm"], config["models"])
except ValueError as err:
    raise WorkflowError(str(err)) from None


# One job per model of llm.model (or the endpoint model).
A_LLM_ITEMS = f"{A}/llm/models/{{llm}}/items.csv"


rule a_llm_probe:
    input:
        model=by_wildcard("llm", llm_probes.probe_input, A_LLM),
    output:
        probe_items=A_LLM_ITEMS,
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
            omit=("model",),
        ),
    shell:
        code("a llm-probe") + JOB


# Exists only when llm.model or llm.endpoint_model is set; the notebook draws the paper's values either way.
rule a_llm_gather:
    input:
        probe_items=expand(A_LLM_ITEMS, llm=A_LLM),
    output:
        probe_items=PAPER_A.path("probe_items"),
        probe_summary=PAPER_A.path("probe_summary"),
    log:
        "logs/a/llm/gather.log",
    localrule: True
    conda:
        TRAINING_ENV
    threads: 1
    params:
        **posym("a llm-gather"),
    shell:
        code("a llm-gather") + JOB
