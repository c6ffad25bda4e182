# Task datasets (spec §A2) and the length-extended test sets (spec §A10.1).


rule split:
    output:
        tensors="results/data/{task}/seed{seed}/{split}.safetensors",
        meta="results/data/{task}/seed{seed}/{split}.json",
    log:
        "logs/data/{task}/seed{seed}/{split}.log",
    conda:
        "../../envs/training.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        n=split_size,
        seed=data_seed,
    shell:
        "posym data --task {wildcards.task} --split {wildcards.split} --n {params.n}"
        " --seed {params.seed} --out {output.tensors} > {log} 2>&1"


rule length_sets:
    output:
        tensors="results/data/{task}/seed{seed}/length.safetensors",
        meta="results/data/{task}/seed{seed}/length.json",
    log:
        "logs/data/{task}/seed{seed}/length.log",
    conda:
        "../../envs/training.yaml"
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    params:
        seed=data_seed,
        extra=config["length"]["extra_tokens"],
        samples=config["length"]["samples"],
    shell:
        "posym length-data --task {wildcards.task} --seed {params.seed} --samples {params.samples}"
        " --extra {params.extra} --out {output.tensors} > {log} 2>&1"
