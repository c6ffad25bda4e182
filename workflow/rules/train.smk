# Training of every task x seed (spec §A3). Checkpoints live under checkpoints/ beside the
# declared outputs, not among them: Snakemake deletes declared outputs before a rerun, and an
# interrupted job must find its checkpoints to resume from.


rule train:
    input:
        train="results/data/{task}/seed{seed}/train.safetensors",
        test="results/data/{task}/seed{seed}/test.safetensors",
    output:
        index="results/train/{task}/seed{seed}/checkpoints.json",
        metrics="results/train/{task}/seed{seed}/metrics.csv",
        losses="results/train/{task}/seed{seed}/train_log.csv",
    log:
        "logs/train/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{task}-seed{seed}.tsv"
    conda:
        "../../envs/training.yaml"
    threads: config["threads"]
    resources:
        gpu=training_gpus,
        cpus_per_gpu=cpus_per_gpu,
        mem_mb=by_attempt(4000),
        runtime=by_attempt(240),
    params:
        settings=train_settings(),
        out=output_dir,
    shell:
        "posym train --task {wildcards.task} --seed {wildcards.seed} --train-data {input.train}"
        " --test-data {input.test} --out {params.out} --settings {params.settings:q}"
        " --threads {threads} > {log} 2>&1"


register_benchmarks(rules.train.benchmark)
