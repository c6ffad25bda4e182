# Training of every run of a study's grid, variant x task x seed (paper A: spec §A3; the grid:
# posym.pipeline.variants). A training job trains a *pack*: one seed, or every seed of the task packed into one
# model where train.pack_seeds says so (the pack's name lists its seeds: seed0, seed0+1+2). It writes each seed's
# checkpoints and a pack record; a small local job per run then writes that run's tables from its checkpoints, so
# every later rule reads one run's files whichever way it trained. That job also names the checkpoint the analyses
# read (the variant's final_checkpoint: the last, or the best on the validation split), so changing the choice
# reruns the analyses but never the training, and variants that differ only in that choice train once (the first
# of them trains; posym.pipeline.variants.trainers).
# Checkpoints live under checkpoints/ beside the declared outputs, not among them: Snakemake deletes declared
# outputs before a rerun, and an interrupted job must find its checkpoints to resume from.


rule train:
    input:
        train=pack_files(paths.of(paths.SPLIT, split="train")),
        test=pack_files(paths.of(paths.SPLIT, split="test")),
    output:
        paths.PACK,
    log:
        paths.log(paths.PACK),
    benchmark:
        "results/{study}/benchmarks/train/{variant}/{task}-{pack}.tsv"
    conda:
        TRAINING_ENV
    threads: pack_threads
    resources:
        **job_resources(mem_mb=4000, minutes=240),
        gpu=training_gpus,
        cpus_per_gpu=cpus_per_gpu,
    params:
        settings=variant_settings("model", "train"),
        seeds=pack_seed_words,
        out=pack_files(paths.TRAINED),
    shell:
        code("train")
        + "posym train --task {wildcards.task} --seed {params.seeds} --train-data {input.train}"
        " --test-data {input.test} --out {params.out} --record {output} --settings {params.settings:q}"
        " --threads {threads} > {log} 2>&1"


rule train_outputs:
    input:
        record=trained_in,
        validation=validation_split,
    output:
        index=paths.CHECKPOINTS,
        metrics=paths.METRICS,
        losses=paths.LOSSES,
    log:
        paths.log(paths.TRAINED),
    localrule: True
    conda:
        TRAINING_ENV
    resources:
        **job_resources(mem_mb=1000, minutes=30),
    params:
        pack_log=training_log,
        training=training_identity,
        run=trained_folder,
        out=output_dir,
        final=final_checkpoint_options,
    shell:
        code("train-outputs")
        + "(cat {params.pack_log:q}; posym train-outputs --record {input.record} --seed {wildcards.seed}"
        " --run {params.run} --out {params.out} {params.final}) > {log} 2>&1"
