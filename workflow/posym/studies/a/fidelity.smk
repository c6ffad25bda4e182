# Paper A's fidelity study (a.fidelity; posym.studies.a.fidelity): every training recipe (embedding dropout x
# batch size) of every task x fidelity seed, and for each final-checkpoint choice its tables and the analyses
# claims A-2 to A-5 read. Paper A's data and length sets are reused; the rules are the core's and paper A's with
# a recipe (and choice) level in their paths. The notebook comes from study.yaml.

F = f"{A}/fidelity"
F_TRAINED = f"{F}/{{recipe}}/train/{{task}}/seed{{seed}}"
F_PACK = f"{F}/{{recipe}}/train/{{task}}/packs/{{pack}}.json"
F_RUN = f"{F}/{{recipe}}/{{choice}}/{{task}}/seed{{seed}}"
F_INDEX = f"{F_RUN}/checkpoints.json"


F_VALIDATION = f"{A}/data/{{task}}/seed{{seed}}/val.safetensors"


if config["a"]["fidelity"]:
    from posym.studies.a import (
        fidelity,
    )  # imports torch: only when the study is configured

    wildcard_constraints:
        recipe="|".join(map(re.escape, fidelity.recipes(config["a"]))),
        choice="|".join(config["a"]["fidelity"]["final_checkpoint"]),

    use rule train as a_fidelity_train with:
        input:
            train=pack_files(f"{A}/data/{{task}}/seed{{seed}}/train.safetensors"),
            test=pack_files(f"{A}/data/{{task}}/seed{{seed}}/test.safetensors"),
        output:
            F_PACK,
        log:
            "logs/a/fidelity/{recipe}/train/{task}/packs/{pack}.log",
        benchmark:
            f"{F}/benchmarks/train/{{recipe}}-{{task}}-{{pack}}.tsv"
        resources:
            **job_resources(mem_mb=4000, minutes=240),
            gpu=by_wildcard("recipe", fidelity.recipe_gpus, config["a"]),
            cpus_per_gpu=cpus_per_gpu,
        params:
            settings=by_wildcard("recipe", fidelity.recipe_settings, config["a"]),
            seeds=pack_seed_words,
            out=pack_files(F_TRAINED),

    use rule train_outputs as a_fidelity_train_outputs with:
        input:
            record=trained_in(
                F_PACK,
                train=by_wildcard("recipe", fidelity.recipe_train, config["a"]),
                seeds=config["a"]["fidelity"]["seeds"],
            ),
            validation=fidelity.validation_input(F_VALIDATION),
        output:
            index=F_INDEX,
            metrics=f"{F_RUN}/metrics.csv",
            losses=f"{F_RUN}/train_log.csv",
        log:
            "logs/a/fidelity/{recipe}/{choice}/{task}/seed{seed}.log",
        localrule: True
        params:
            pack_log=training_log,
            run=F_TRAINED,
            out=output_dir,
            final=fidelity.final_options(config["a"], F_VALIDATION),

    use rule a_scores as a_fidelity_scores with:
        input:
            index=F_INDEX,
            data=A_TEST,
        output:
            scores=f"{F_RUN}/scores.csv",
            purity=f"{F_RUN}/purity.csv",
        log:
            "logs/a/fidelity/{recipe}/{choice}/{task}/seed{seed}/scores.log",
        benchmark:
            f"{F}/benchmarks/scores/{{recipe}}-{{choice}}-{{task}}-seed{{seed}}.tsv"

    use rule a_frequency as a_fidelity_frequency with:
        input:
            index=F_INDEX,
            data=A_TEST,
        output:
            f"{F_RUN}/frequency.csv",
        log:
            "logs/a/fidelity/{recipe}/{choice}/{task}/seed{seed}/frequency.log",
        benchmark:
            f"{F}/benchmarks/frequency/{{recipe}}-{{choice}}-{{task}}-seed{{seed}}.tsv"

    use rule a_evaluate_length as a_fidelity_length with:
        input:
            index=F_INDEX,
            data=A_LENGTH,
        output:
            f"{F_RUN}/length.csv",
        log:
            "logs/a/fidelity/{recipe}/{choice}/{task}/seed{seed}/length.log",
        benchmark:
            f"{F}/benchmarks/length/{{recipe}}-{{choice}}-{{task}}-seed{{seed}}.tsv"
