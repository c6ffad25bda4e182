# Accuracy of each run's final checkpoint on the whole test split (paper A: spec §A4).


rule evaluate_test:
    input:
        index=paths.CHECKPOINTS,
        data=paths.of(paths.SPLIT, split="test"),
    output:
        paths.TEST_ACCURACY,
    log:
        paths.log(paths.TEST_ACCURACY),
    benchmark:
        "results/{study}/benchmarks/evaluate_test/{variant}/{task}-seed{seed}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("evaluate"),
    shell:
        code("evaluate") + JOB
