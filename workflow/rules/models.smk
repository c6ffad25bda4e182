# Pretrained language models (config `models`): each source converted once into a verified Hugging Face model
# directory, results/models/<name>/, with checksums.json and a manifest.json saying what it is.


rule convert_model:
    output:
        directory("results/models/{model}"),
    log:
        "logs/models/{model}.log",
    conda:
        TRAINING_ENV
    threads: config["threads"]
    resources:
        **job_resources(mem_mb=8000, minutes=60),
    params:
        source=by_wildcard("model", model_setting, "source"),
        dtype=by_wildcard("model", model_setting, "dtype"),
    shell:
        code("convert-model")
        + "posym convert-model --source {params.source:q} --dtype {params.dtype} --out {output} --threads {threads}"
        " > {log} 2>&1"
