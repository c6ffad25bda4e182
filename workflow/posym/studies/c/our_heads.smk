# posym's own question (no paper asks it): paper C's QK fingerprint of the heads posym trains for the other papers.
# With study a on too (studies: [a, c]): every head of every paper-A run at every checkpoint, beside its positional
# / symbolic score (one job per run, then one table for the notebook our_heads). With study b on too (studies:
# [b, c]): every head of every paper-B run of standard attention (MLA has no per-head W_Q W_K of its own) at its
# analysed checkpoint, beside its ablation drop, the deposit head marked (notebook our_heads_b).

C_OUR_HEADS = f"{C}/our_heads"


if "a" in config["studies"]:

    rule c_our_heads:
        input:
            index=paths.of(paths.CHECKPOINTS, study="a", variant=variants.MAIN),
            scores=paths.of(posym_study.load("a").path("scores"), variant=variants.MAIN),
            purity=paths.of(posym_study.load("a").path("purity"), variant=variants.MAIN),
            data=paths.of(paths.SPLIT, study="a", split="test"),
        output:
            f"{C_OUR_HEADS}/a/{{task}}/seed{{seed}}.csv",
        log:
            "logs/c/our_heads/a/{task}/seed{seed}.log",
        benchmark:
            f"{C}/benchmarks/our_heads/a/{{task}}-seed{{seed}}.tsv"
        conda:
            TRAINING_ENV
        threads: 1
        resources:
            **job_resources(mem_mb=2000, minutes=120),
        params:
            **posym("c our-heads"),
        shell:
            code("c our-heads") + JOB

    rule c_our_heads_gather:
        input:
            tables=runs("a", f"{C_OUR_HEADS}/a/{{task}}/seed{{seed}}.csv"),
        output:
            f"{C_OUR_HEADS}/our_heads.csv",
        log:
            "logs/c/our_heads/gather.log",
        localrule: True
        conda:
            ANALYSIS_ENV
        threads: 1
        params:
            **posym("c our-heads-gather"),
        shell:
            code("c our-heads-gather") + JOB


if "b" in config["studies"]:
    # paper B's runs of standard attention, in its study's order
    C_B_RUNS = [
        run
        for run in GRIDS["b"].runs()
        if variants.resolve(config["b"], GRIDS["b"].variants[run["variant"]])["model"][
            "attention"
        ]
        == "standard"
    ]

    rule c_our_heads_b:
        input:
            index=paths.of(paths.CHECKPOINTS, study="b"),
            ablation=posym_study.load("b").path("ablation"),
        output:
            f"{C_OUR_HEADS}/b/{{variant}}/{{task}}/seed{{seed}}.csv",
        log:
            "logs/c/our_heads/b/{variant}/{task}/seed{seed}.log",
        benchmark:
            f"{C}/benchmarks/our_heads/b/{{variant}}/{{task}}-seed{{seed}}.tsv"
        conda:
            TRAINING_ENV
        threads: 1
        resources:
            **job_resources(mem_mb=2000, minutes=60),
        params:
            **posym("c our-heads-b"),
        shell:
            code("c our-heads-b") + JOB

    rule c_our_heads_b_gather:
        input:
            tables=[
                f"{C_OUR_HEADS}/b/{run['variant']}/{run['task']}/seed{run['seed']}.csv"
                for run in C_B_RUNS
            ],
        output:
            f"{C_OUR_HEADS}/our_heads_b.csv",
        log:
            "logs/c/our_heads/gather_b.log",
        localrule: True
        conda:
            ANALYSIS_ENV
        threads: 1
        params:
            **posym("c our-heads-gather"),
        shell:
            code("c our-heads-gather") + JOB
