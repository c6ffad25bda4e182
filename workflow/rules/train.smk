# Training of every task x seed of a study (paper A: spec §A3). A training job trains a *pack*: one seed, or every
# seed of the task packed into one model where train.pack_seeds says so (the pack's name lists its seeds:
# seed0, seed0+1+2). It writes each seed's checkpoints and a pack record; a small local job per seed then writes
# that seed's tables from its checkpoints, so every later rule reads one seed's files whichever way it trained.
# That job also names the checkpoint the analyses read (the study's final_checkpoint section: the last, or the
# best on the validation split), so changing the choice reruns the analyses but never the training.
# Checkpoints live under checkpoints/ beside the declared outputs, not among them: Snakemake deletes declared
# outputs before a rerun, and an interrupted job must find its checkpoints to resume from.


rule train:
    input:
        train=pack_files("results/{study}/data/{task}/seed{seed}/train.safetensors"),
        test=pack_files("results/{study}/data/{task}/seed{seed}/test.safetensors"),
    output:
        "results/{study}/train/{task}/packs/{pack}.json",
    log:
        "logs/{study}/train/{task}/packs/{pack}.log",
    benchmark:
        "results/{study}/benchmarks/train/{task}-{pack}.tsv"
    conda:
        TRAINING_ENV
    threads: pack_threads
    resources:
        **job_resources(mem_mb=4000, minutes=240),
        gpu=training_gpus,
        cpus_per_gpu=cpus_per_gpu,
    params:
        settings=study_settings("model", "train"),
        seeds=pack_seed_words,
        out=pack_files("results/{study}/train/{task}/seed{seed}"),
    shell:
        "posym train --task {wildcards.task} --seed {params.seeds} --train-data {input.train}"
        " --test-data {input.test} --out {params.out} --record {output} --settings {params.settings:q}"
        " --threads {threads} > {log} 2>&1"


rule train_outputs:
    input:
        record=trained_in("results/{study}/train/{task}/packs/{pack}.json"),
        validation=validation_split,
    output:
        index="results/{study}/train/{task}/seed{seed}/checkpoints.json",
        metrics="results/{study}/train/{task}/seed{seed}/metrics.csv",
        losses="results/{study}/train/{task}/seed{seed}/train_log.csv",
    log:
        "logs/{study}/train/{task}/seed{seed}.log",
    localrule: True
    conda:
        TRAINING_ENV
    resources:
        **job_resources(mem_mb=1000, minutes=30),
    params:
        pack_log=training_log,
        run=output_dir,
        out=output_dir,
        final=final_checkpoint_options,
    shell:
        "(cat {params.pack_log:q}; posym train-outputs --record {input.record} --seed {wildcards.seed}"
        " --run {params.run} --out {params.out} {params.final}) > {log} 2>&1"
