# Training of every task x seed of a study (paper A: spec §A3). Checkpoints live under checkpoints/ beside the
# declared outputs, not among them: Snakemake deletes declared outputs before a rerun, and an interrupted job
# must find its checkpoints to resume from.


rule train:
    input:
        train="results/{study}/data/{task}/seed{seed}/train.safetensors",
        test="results/{study}/data/{task}/seed{seed}/test.safetensors",
    output:
        index="results/{study}/train/{task}/seed{seed}/checkpoints.json",
        metrics="results/{study}/train/{task}/seed{seed}/metrics.csv",
        losses="results/{study}/train/{task}/seed{seed}/train_log.csv",
    log:
        "logs/{study}/train/{task}/seed{seed}.log",
    benchmark:
        "results/{study}/benchmarks/train/{task}-seed{seed}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=240),
        gpu=training_gpus,
        cpus_per_gpu=cpus_per_gpu,
    params:
        settings=study_settings("model", "train"),
        out=output_dir,
    shell:
        "posym train --task {wildcards.task} --seed {wildcards.seed} --train-data {input.train}"
        " --test-data {input.test} --out {params.out} --settings {params.settings:q}"
        " --threads {threads} > {log} 2>&1"
