# Task datasets: one split of one task per job (paper A: spec §A2). Sizes, generator options and the dataset seed
# come from the study's data section (a task's own subsection, data.<task>, overrides it): dataset seed =
# data.seed_offset + run seed. The variants of a study share its data (a run's folder has no variant level).


rule split:
    output:
        tensors=paths.SPLIT,
        meta=paths.SPLIT_RECORD,
    log:
        paths.log(paths.SPLIT),
    conda:
        TRAINING_ENV
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        n=split_size,
        seed=data_seed(),
        options=generator_options,
    shell:
        code("data")
        + "posym data --task {wildcards.task} --split {wildcards.split} --n {params.n}"
        " --seed {params.seed} {params.options} --out {output.tensors} > {log} 2>&1"
