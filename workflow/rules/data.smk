# Task datasets: one split of one task per job (paper A: spec §A2). Sizes, generator options and the dataset seed
# come from the study's data section (a task's own subsection, data.<task>, overrides it): dataset seed =
# data.seed_offset + run seed.


rule split:
    output:
        tensors="results/{study}/data/{task}/seed{seed}/{split}.safetensors",
        meta="results/{study}/data/{task}/seed{seed}/{split}.json",
    log:
        "logs/{study}/data/{task}/seed{seed}/{split}.log",
    conda:
        TRAINING_ENV
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        n=split_size,
        seed=data_seed(),
        options=generator_options,
    shell:
        "posym data --task {wildcards.task} --split {wildcards.split} --n {params.n}"
        " --seed {params.seed} {params.options} --out {output.tensors} > {log} 2>&1"
