# The notebooks of every study that runs, generated from the study's table (study.yaml): one rule per notebook
# that applies to the configuration, its inputs and parameters as the table lists them, its figures and tables
# as outputs (the first file of each also in snakemake --report, with its caption, category and item).


def notebook_source(study, name):
    """A notebook's source as an input, so that editing it reruns it. Relative to the working directory, so
    that moving a repository together with its results does not make every notebook look changed.
    """
    return os.path.relpath(study.notebooks[name].source)


def notebook_outputs(study, name):
    outputs = {"notebook": study.executed(name)}
    for output, category, label in study.report_entries(name):
        for ext, path in output.files().items():
            if ext == posym_study.OUTPUT_FILES[output.kind][0]:
                labels = {"study": study.name, "item": label, "file": output.name}
                caption = os.path.relpath(
                    output.caption, os.path.join(REPO, "workflow", "rules")
                )
                path = report(path, caption=caption, category=category, labels=labels)
            outputs[f"{output.name}_{ext}"] = path
    return outputs


def notebook_values(study, name):
    """The notebook's parameters that come from the configuration and the table, as JSON: the config values the
    table names (with tasks and seeds) and its outputs (``outputs``: each output's files by extension). A param of
    its own: Snakemake compares it between runs, so changing one of them reruns the notebook.
    """
    values = study.notebook_parameters(name, config)
    values["outputs"] = {}
    for output in study.outputs(
        name
    ):  # a figure and a table may share a name: their extensions differ
        values["outputs"].setdefault(output.name, {}).update(output.files())
    return json.dumps(values, sort_keys=True)


def notebook_files(wildcards, input):
    """A params function: the notebook's inputs by name, as JSON parameters."""
    named = {
        k: v if isinstance(v, str) else list(v)
        for k, v in input.items()
        if k != "notebook"
    }
    return json.dumps(named, sort_keys=True)


for study in STUDIES:
    for notebook in study.runnable(config):

        rule:
            name:
                f"{study.id}_notebook_{notebook.name}"
            input:
                **study.notebook_inputs(notebook.name, config),
                **{
                    n: wall_time_files(STUDIES)
                    for n in study.workflow_inputs(notebook.name, "wall_times")
                },
                **{
                    n: PERFORMANCE
                    for n in study.workflow_inputs(notebook.name, "performance")
                },
                notebook=notebook_source(study, notebook.name),
            output:
                **notebook_outputs(study, notebook.name),
            log:
                f"logs/{study.id}/notebooks/{notebook.name}.log",
            conda:
                ANALYSIS_ENV
            resources:
                **job_resources(mem_mb=2000, minutes=30),
            params:
                values=notebook_values(study, notebook.name),
                files=notebook_files,
            shell:
                code("notebook", str(notebook.source))
                + "posym notebook {input.notebook} {output.notebook} --parameters {params.values:q}"
                " --parameters {params.files:q} > {log} 2>&1"
