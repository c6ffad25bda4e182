# Accuracy of the final checkpoints: on the whole test split (spec §A4) and on the
# length-extended sets (spec §A10.1).


rule evaluate_test:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/test.safetensors",
    output:
        "results/eval/{task}/seed{seed}/test.csv",
    log:
        "logs/eval/{task}/seed{seed}/test.log",
    benchmark:
        "results/benchmarks/evaluate_test/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        mem_mb=by_attempt(2000),
        runtime=by_attempt(30),
    shell:
        "posym evaluate --index {input.index} --data {input.data} --out {output}"
        " --threads {threads} > {log} 2>&1"


rule evaluate_length:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/length.safetensors",
    output:
        "results/eval/{task}/seed{seed}/length.csv",
    log:
        "logs/eval/{task}/seed{seed}/length.log",
    benchmark:
        "results/benchmarks/evaluate_length/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        mem_mb=by_attempt(4000),
        runtime=by_attempt(60),
    shell:
        "posym evaluate --index {input.index} --data {input.data} --out {output}"
        " --threads {threads} > {log} 2>&1"


register_benchmarks(rules.evaluate_test.benchmark)
register_benchmarks(rules.evaluate_length.benchmark)
