# Paper B's jobs: training of every variant (position encoding) × task × seed of the grid (b.runs), the test
# evaluation, the per-head ablation (spec §B4), the Toeplitz check of layer 0 (§B1) and the position probe (§B6).
# Data are the core's split rule (results/b/data/); training and evaluation reuse the core's rules with a
# {variant} level in their paths and the variant's settings (b.model / b.train under its overrides) as params,
# so editing a variant reruns only its jobs. The notebooks come from study.yaml.

from posym.studies.b.variants import variant_gpus, variant_json, variant_train

B = "results/b"
B_RUN = "{variant}/{task}/seed{seed}"
B_DATA = f"{B}/data/{{task}}/seed{{seed}}"
B_INDEX = f"{B}/train/{B_RUN}/checkpoints.json"
B_PACK = f"{B}/train/{{variant}}/{{task}}/packs/{{pack}}.json"


wildcard_constraints:
    variant="|".join(config["b"]["variants"]),


use rule train as b_train with:
    input:
        train=pack_files(f"{B_DATA}/train.safetensors"),
        test=pack_files(f"{B_DATA}/test.safetensors"),
    output:
        B_PACK,
    log:
        "logs/b/train/{variant}/{task}/packs/{pack}.log",
    benchmark:
        f"{B}/benchmarks/train/{{variant}}-{{task}}-{{pack}}.tsv"
    resources:
        **job_resources(mem_mb=8000, minutes=720),
        gpu=by_wildcard("variant", variant_gpus, config["b"]),
        cpus_per_gpu=cpus_per_gpu,
    params:
        settings=by_wildcard("variant", variant_json, config["b"]),
        seeds=pack_seed_words,
        out=pack_files(f"{B}/train/{B_RUN}"),


use rule train_outputs as b_train_outputs with:
    input:
        record=trained_in(
            B_PACK,
            train=by_wildcard("variant", variant_train, config["b"]),
            seeds=config["b"]["seeds"],
        ),
    output:
        index=B_INDEX,
        metrics=f"{B}/train/{B_RUN}/metrics.csv",
        losses=f"{B}/train/{B_RUN}/train_log.csv",
    log:
        "logs/b/train/{variant}/{task}/seed{seed}.log",
    localrule: True  # `use rule` does not carry it over


use rule evaluate_test as b_evaluate with:
    input:
        index=B_INDEX,
        data=f"{B_DATA}/test.safetensors",
    output:
        f"{B}/eval/{B_RUN}/test.csv",
    log:
        "logs/b/eval/{variant}/{task}/seed{seed}/test.log",
    benchmark:
        f"{B}/benchmarks/evaluate_test/{{variant}}-{{task}}-seed{{seed}}.tsv"


rule b_ablation:
    input:
        index=B_INDEX,
        train_data=f"{B_DATA}/train.safetensors",
        test_data=f"{B_DATA}/test.safetensors",
    output:
        f"{B}/ablation/{B_RUN}/heads.csv",
    log:
        "logs/b/ablation/{variant}/{task}/seed{seed}.log",
    benchmark:
        f"{B}/benchmarks/ablation/{{variant}}-{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=4000, minutes=240),
    params:
        **posym("b ablation", settings=("b", "ablation")),
    shell:
        JOB


rule b_toeplitz:
    input:
        index=B_INDEX,
        data=f"{B_DATA}/test.safetensors",
    output:
        f"{B}/analysis/{B_RUN}/toeplitz.csv",
    log:
        "logs/b/analysis/{variant}/{task}/seed{seed}/toeplitz.log",
    benchmark:
        f"{B}/benchmarks/toeplitz/{{variant}}-{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("b toeplitz", settings=("b", "toeplitz")),
    shell:
        JOB


rule b_probe:
    input:
        index=B_INDEX,
        data=f"{B_DATA}/test.safetensors",
    output:
        f"{B}/analysis/{B_RUN}/probe.csv",
    log:
        "logs/b/analysis/{variant}/{task}/seed{seed}/probe.log",
    benchmark:
        f"{B}/benchmarks/probe/{{variant}}-{{task}}-seed{{seed}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=2000, minutes=30),
    params:
        **posym("b probe", settings=("b", "probe")),
    shell:
        JOB
