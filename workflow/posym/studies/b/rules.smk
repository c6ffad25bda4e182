# Paper B's own jobs on every run of its grid (posym.studies.b.variants: variant x task x seed of b.runs): the
# per-head ablation (spec §B4), the Toeplitz check of layer 0 (§B1) and the position probe (§B6). Data, training
# and the test evaluation are the core's rules, whose {variant} level takes the variant's settings (b.model /
# b.train under its overrides), so editing a variant reruns only its jobs. The notebooks come from study.yaml.

B = "results/b"
B_INDEX = paths.of(paths.CHECKPOINTS, study="b")
B_TRAIN = paths.of(paths.SPLIT, study="b", split="train")
B_TEST = paths.of(paths.SPLIT, study="b", split="test")
B_ABLATION = posym_study.load("b").path(
    "ablation"
)  # its named paths (study.yaml: paths)
B_TOEPLITZ = posym_study.load("b").path("toeplitz")
B_PROBE = posym_study.load("b").path("probe")


rule b_ablation:
    input:
        index=B_INDEX,
        train_data=B_TRAIN,
        test_data=B_TEST,
    output:
        B_ABLATION,
    log:
        paths.log(B_ABLATION),
    benchmark:
        f"{B}/benchmarks/ablation/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=240),
    params:
        **posym("b ablation"),
    shell:
        code("b ablation") + JOB


rule b_toeplitz:
    input:
        index=B_INDEX,
        data=B_TEST,
    output:
        B_TOEPLITZ,
    log:
        paths.log(B_TOEPLITZ),
    benchmark:
        f"{B}/benchmarks/toeplitz/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("b toeplitz"),
    shell:
        code("b toeplitz") + JOB


rule b_probe:
    input:
        index=B_INDEX,
        data=B_TEST,
    output:
        B_PROBE,
    log:
        paths.log(B_PROBE),
    benchmark:
        f"{B}/benchmarks/probe/{{variant}}/{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("b probe"),
    shell:
        code("b probe") + JOB
