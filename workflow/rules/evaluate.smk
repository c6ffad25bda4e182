# Accuracy of the final checkpoints: on the whole test split (spec §A4) and on the
# length-extended sets (spec §A10.1).


rule evaluate_test:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/test.safetensors",
    output:
        "results/eval/{task}/seed{seed}/test.csv",
    threads: config["threads"]
    log:
        "logs/eval/{task}/seed{seed}/test.log",
    benchmark:
        "results/benchmarks/evaluate_test/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    shell:
        "posym evaluate --index {input.index} --data {input.data} --out {output}"
        " --threads {threads} > {log} 2>&1"


rule evaluate_length:
    input:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        data="results/data/{task}/seed{seed}/length.safetensors",
    output:
        "results/eval/{task}/seed{seed}/length.csv",
    threads: config["threads"]
    log:
        "logs/eval/{task}/seed{seed}/length.log",
    benchmark:
        "results/benchmarks/evaluate_length/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    shell:
        "posym evaluate --index {input.index} --data {input.data} --out {output}"
        " --threads {threads} > {log} 2>&1"
