# Paper C's constrained training (claim C-4, spec §C6): one job per arm of c.training.run (a variant of paper C's
# run grid, with its own objective, so not the core's split-backed train rule), which trains that arm's
# seeds packed into one model (each seed stops c.training.train.stop_after_formation steps after it forms), and
# one job that gathers every arm into Table 4, the pre-registered contrasts and C-4's checks. The seeds'
# checkpoints live beside the arm's tables, not among the declared outputs, so an interrupted job resumes.
# Imports nothing heavy: the training code (torch) loads in the job.
C_TRAINING = f"{C}/training"
C_ARMS = list(GRIDS["c"].variants)  # the arms run (posym.studies.c.variants)


wildcard_constraints:
    arm="|".join(C_ARMS),


rule c_train:
    output:
        runs=f"{C_TRAINING}/{{arm}}/runs.csv",
        curves=f"{C_TRAINING}/{{arm}}/curves.csv",
        heads=f"{C_TRAINING}/{{arm}}/heads.csv",
    log:
        "logs/c/training/{arm}.log",
    benchmark:
        f"{C}/benchmarks/training/{{arm}}.tsv"
    conda:
        TRAINING_ENV
    # One thread per job (config threads): at this size two single-threaded arms side by side beat one arm on
    # two threads (measured: 2 threads were slower than 1 for 3 packed seeds on 2 cores).
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=240),
        gpu=int(config["c"]["training"]["train"]["device"] != "cpu"),
        cpus_per_gpu=cpus_per_gpu,
    params:
        # an arm's job reads neither the list of arms run nor C-4's thresholds: editing them reruns only what does
        **posym(
            "c train",
            omit=("run", "claims"),
        ),
    shell:
        code("c train") + JOB


rule c_formation:
    input:
        runs=expand(f"{C_TRAINING}/{{arm}}/runs.csv", arm=C_ARMS),
        curves=expand(f"{C_TRAINING}/{{arm}}/curves.csv", arm=C_ARMS),
        heads=expand(f"{C_TRAINING}/{{arm}}/heads.csv", arm=C_ARMS),
    output:
        runs=f"{C_TRAINING}/runs.csv",
        curves=f"{C_TRAINING}/curves.csv",
        heads=f"{C_TRAINING}/heads.csv",
        table4=f"{C_TRAINING}/table4.csv",
        contrasts=f"{C_TRAINING}/contrasts.csv",
        claims=f"{C_TRAINING}/claims.csv",
    log:
        "logs/c/training/formation.log",
    benchmark:
        f"{C}/benchmarks/training/formation.tsv"
    conda:
        ANALYSIS_ENV
    threads: 1
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("c formation"),
    shell:
        code("c formation") + JOB
