# Paper C on real pretrained language models (spec §C2-§C4; the substitute for claim C-6): one job per name of
# c.real_models.models, on the model rule convert_model made of the top-level `models` entry, then one table of
# each kind for the notebook real_models. The settings leave out the list of models: adding a model runs that
# model's job only.
C_REAL_MODELS = config["c"]["real_models"]["models"] or []
C_REAL_MODELS_UNKNOWN = sorted(set(C_REAL_MODELS) - set(config["models"]))
if C_REAL_MODELS_UNKNOWN:
    raise WorkflowError(
        f"config key 'c.real_models.models': {C_REAL_MODELS_UNKNOWN} are not names of the top-level "
        f"models section ({sorted(config['models'])})"
    )
C_REAL = f"{C}/real_models"
C_REAL_TABLES = ("heads", "summary", "correlations", "kcomp")


rule c_real_model:
    input:
        model="results/models/{model}",
    output:
        **{name: f"{C_REAL}/{{model}}/{name}.csv" for name in C_REAL_TABLES},
    log:
        "logs/c/real_models/{model}.log",
    benchmark:
        f"{C}/benchmarks/real_models/{{model}}.tsv"
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=16000, minutes=240),
        gpu=int(config["c"]["real_models"]["device"] != "cpu"),
        cpus_per_gpu=cpus_per_gpu,
    params:
        **posym("c real-model", omit=("models",)),
    shell:
        code("c real-model") + JOB


rule c_real_models_gather:
    input:
        **{
            name: expand(f"{C_REAL}/{{model}}/{name}.csv", model=C_REAL_MODELS)
            for name in C_REAL_TABLES
        },
    output:
        **{name: f"{C_REAL}/{name}.csv" for name in C_REAL_TABLES},
    log:
        "logs/c/real_models/gather.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    threads: 1
    params:
        **posym("c real-models-gather"),
    shell:
        code("c real-models-gather") + JOB
