# Accuracy of each run's final checkpoint on the whole test split (paper A: spec §A4).


rule evaluate_test:
    input:
        index="results/{study}/train/{task}/seed{seed}/checkpoints.json",
        data="results/{study}/data/{task}/seed{seed}/test.safetensors",
    output:
        "results/{study}/eval/{task}/seed{seed}/test.csv",
    log:
        "logs/{study}/eval/{task}/seed{seed}/test.log",
    benchmark:
        "results/{study}/benchmarks/evaluate_test/{task}-seed{seed}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("evaluate"),
    shell:
        JOB
