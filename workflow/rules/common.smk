# Configuration checks, the studies that run, and the small helpers rules use for their params and resources.
import functools
import glob
import json
import os
import shlex

from posym.pipeline import code as posym_code
from posym.pipeline import config as posym_config
from posym.pipeline import jobs as posym_jobs
from posym.pipeline import paths
from posym.pipeline import study as posym_study
from posym.pipeline import variants
from posym.training.packs import pack_members, seed_pack, train_outputs_options

try:
    config.update(posym_config.validate(config))
except (posym_config.ConfigError, posym_study.StudyError) as err:
    raise WorkflowError(str(err)) from None


REPO = workflow.basedir
# What the code fingerprints found of each module, kept for the next run (posym.pipeline.code.use_cache).
posym_code.use_cache(os.path.join(".snakemake", "posym-code.json"))
# The report job's receipt (the workflow's final target: the report this results folder made last) and the list
# of every report version it made, in order (posym.pipeline.changes: a new version says what changed since the last).
REPORT_RECEIPT = "results/reports/latest.json"
REPORT_HISTORY = "results/reports/history.json"
STUDIES = [posym_study.load(study_id) for study_id in config["studies"]]
# Each study's run grid (posym.pipeline.variants): its variants, and the runs of each run set.
GRIDS = {study.id: study.grid(config) for study in STUDIES}
# Each variant's training variant, by study (posym.pipeline.variants.trainers).
TRAINERS = {sid: variants.trainers(grid, config[sid]) for sid, grid in GRIDS.items()}
TRAINING_ENV = os.path.join(REPO, "envs", "training.yaml")
ANALYSIS_ENV = os.path.join(REPO, "envs", "analysis.yaml")
# Benchmark results committed with the code (benchmarks/results/*.json); the report shows them.
PERFORMANCE = sorted(
    os.path.relpath(p)
    for p in glob.glob(os.path.join(REPO, "benchmarks", "results", "*.json"))
)
# The pip sections of envs/*.yaml install posym from here (`-e ${POSYM_REPO}`): Snakemake copies an env
# file to .snakemake/conda/ before creating it, so a path relative to the file would point there.
os.environ.update(POSYM_REPO=REPO)


def variant_overrides(wildcards):
    """The overrides of the job's variant (wildcards ``study`` and ``variant``)."""
    return GRIDS[wildcards.study].variants[wildcards.variant]


def variant_settings(*parts):
    """A params function: the settings ``parts`` of the job's variant (its overrides over the study's section),
    as --settings JSON."""

    def settings(wildcards):
        return posym_jobs.settings_json(variant_section(wildcards), parts)

    return settings


def variant_section(wildcards):
    """The job's variant's effective settings (its study's section under its overrides)."""
    return variants.resolve(config[wildcards.study], variant_overrides(wildcards))


def training_variant(wildcards):
    """The variant whose training the job's variant reads (itself, unless an earlier variant trains the same)."""
    return TRAINERS[wildcards.study][wildcards.variant]


def output_dir(wildcards, output):
    """The folder of a job's first output, for commands that write several files there."""
    return os.path.dirname(output[0])


def posym(command, *, omit=()):
    """The params of a job that runs ``posym <command>`` (``JOB``), from the command's entry in its study's jobs
    table (posym.pipeline.jobs): for ``params: **posym("a scores")``. ``omit`` leaves out settings the job does
    not read (posym.pipeline.jobs.rule_params), so that editing them reruns none of its jobs.
    """
    return posym_jobs.rule_params(config, command, omit=omit)


JOB = "posym {params.job} {params.settings} --threads {threads} > {log} 2>&1"


def code(command, notebook=None):
    """The start of the shell command of the rules that run ``posym <command>``: a no-op carrying the fingerprint of
    the posym code the job runs (posym.pipeline.code; for ``posym notebook``, with the modules ``notebook``
    imports), so that Snakemake's ``code`` rerun trigger reruns the rule's jobs when that code changes:
    ``shell: code("a scores") + JOB``."""
    return posym_code.shell_mark(command, notebook)


def check_code_marks():
    """Refuse, when the workflow is read, a rule whose shell does not start with the code(...) of the command it
    runs (posym.pipeline.code.check_rule): the Snakefile calls this after its last rule.
    """
    # The loop variable is not named after the keyword: Snakemake's lint reads "rule", a space, text and a colon on
    # one line as a rule definition beside functions.
    for defined in workflow.rules:
        try:
            posym_code.check_rule(
                defined.name, defined.shellcmd, defined.params.get("job")
            )
        except posym_code.CodeError as err:
            raise WorkflowError(str(err)) from None


def runs(study, pattern, run_set=variants.OWN):
    """One path per run of a study's run set (its own by default), in its order."""
    return list(
        dict.fromkeys(pattern.format(**run) for run in GRIDS[study].runs(run_set))
    )


def data_seed(study=None):
    """A params function: a run's dataset seed, data.seed_offset + run seed, of ``study`` or the job's study."""

    def seed(wildcards):
        return config[study or wildcards.study]["data"]["seed_offset"] + int(
            wildcards.seed
        )

    return seed


def task_data(wildcards):
    """The study's data settings as a task sees them: its own subsection (``data.<task>``), when the study has
    one, over the study-wide ones."""
    data = config[wildcards.study]["data"]
    return {**data, **data.get(wildcards.task, {})}


def final_checkpoint(wildcards):
    """The final_checkpoint settings of the job's variant; a study without them analyses each run's last
    checkpoint."""
    return variant_section(wildcards).get("final_checkpoint", {"choice": "last"})


def validation_split(wildcards):
    """An input function: the run's validation split where its variant picks the best checkpoint on it."""
    if final_checkpoint(wildcards)["choice"] != "best_validation":
        return []
    return paths.SPLIT.format(**wildcards, split="val")


def final_checkpoint_options(wildcards):
    """``posym train-outputs`` options of the variant's final_checkpoint choice (a function of the wildcards
    only, so that Snakemake compares it between runs)."""
    final = final_checkpoint(wildcards)
    return train_outputs_options(
        final["choice"], final.get("validation_every"), validation_split(wildcards)
    )


def trained_folder(wildcards):
    """A params function: the folder of the run's checkpoints, under the variant that trained them."""
    return paths.TRAINED.format(
        **{**dict(wildcards.items()), "variant": training_variant(wildcards)}
    )


def split_size(wildcards):
    return task_data(wildcards)[f"{wildcards.split}_samples"]


def generator_options(wildcards):
    """The task's generator options (its data subsection without the sizes), as JSON; empty for none."""
    own = config[wildcards.study]["data"].get(wildcards.task, {})
    options = {k: v for k, v in own.items() if not k.endswith("_samples")}
    return (
        shlex.join(["--options", json.dumps(options, sort_keys=True)])
        if options
        else ""
    )


def pack_files(pattern):
    """An input (or params) function: ``pattern`` for each seed of the job's pack (wildcard ``pack``), in order."""

    def files(wildcards):
        values = {k: v for k, v in wildcards.items() if k != "pack"}
        return expand(pattern, **values, seed=pack_members(wildcards.pack))

    return files


def pack_seed_words(wildcards):
    """The seeds of the job's pack as ``posym train --seed`` takes them: "0 1 2"."""
    return " ".join(map(str, pack_members(wildcards.pack)))


def pack_threads(wildcards):
    """A training job's threads: the config's threads per seed it trains (Snakemake caps them at --cores)."""
    return config["threads"] * len(pack_members(wildcards.pack))


def trained_in(wildcards):
    """An input function: the record of the training job that trains the run: the pack of its seed among the
    seeds its training variant trains on its task."""
    study, task, seed = wildcards.study, wildcards.task, int(wildcards.seed)
    trainer = training_variant(wildcards)
    settings = variants.resolve(config[study], GRIDS[study].variants[trainer])["train"]
    seeds = variants.training_seeds(GRIDS[study], TRAINERS[study], trainer, task)
    pack = seed_pack(settings, seeds, seed)
    return paths.PACK.format(study=study, variant=trainer, task=task, pack=pack)


def training_identity(wildcards):
    """A params function of ``train_outputs``: what trains the run, the training job's code mark and settings.

    Snakemake deletes the outputs of a job it stops and never reruns a job whose missing output only up-to-date
    jobs read (snakemake/snakemake#1978). A training job stopped after an edit of its settings or code would leave
    its pack record missing and the run's tables of the old training in place, read as current by every later run.
    With the training's identity among ``train_outputs``' params, the edit reruns that job, which needs the record,
    which reruns the training (the trainer resumes only checkpoints of the same settings).
    """
    return training_code() + variant_settings("model", "train")(wildcards)


@functools.cache
def training_code():
    """The code mark of ``posym train`` (:func:`code`), computed once for every run's job."""
    return code("train")


def training_log(wildcards, input):
    """A params function: the log of the training job whose pack record is the job's input ``record``."""
    return paths.log(input.record)


def by_wildcard(name, function, *args):
    """An input, params or resources function: ``function(*args, <the job's wildcard name>)``, e.g. a setting of
    a pretrained model: ``by_wildcard("model", model_setting, "source")``."""

    def value(wildcards):
        return function(*args, getattr(wildcards, name))

    return value


def model_setting(key, model):
    """Setting ``key`` of pretrained model ``model`` (config ``models``)."""
    return config["models"][model][key]


def final_targets():
    return [REPORT_RECEIPT]


# What a job needs, for cluster executors; where it runs (partition, GPU model, account) is set in the
# profile (profiles/slurm), never here. Memory and time grow with each try: a failed job is resubmitted
# (the SLURM profile sets retries: 1) with attempt=2 and asks for twice as much.
# Locally these are only counted against --resources when that is given: `gpu` does not stop a job on a
# machine without a GPU.


def by_attempt(first):
    """A resources function: ``first`` on the first try, twice that on the second, and so on."""

    def scaled(wildcards, attempt):
        return first * attempt

    return scaled


def job_resources(mem_mb, minutes):
    """Memory and run time of a job, both doubling with each try."""
    return {"mem_mb": by_attempt(mem_mb), "runtime": by_attempt(minutes)}


def training_gpus(wildcards):
    """A training job asks for one GPU unless its variant trains on the CPU (train.device: cpu)."""
    return 0 if variant_section(wildcards)["train"]["device"] == "cpu" else 1


def cpus_per_gpu(wildcards, threads):
    """The CPU cores a GPU job asks for beside its GPU: its threads (sbatch --cpus-per-gpu)."""
    return threads


def wall_time_files(studies):
    """An input function: the benchmark files of the jobs that make the studies' notebook inputs.

    For each input, the benchmark file of the job that makes it (the producing rule's benchmark pattern, with the
    wildcards of the input); for a job without one, which only gathers another job's results (a seed's tables
    from its training pack), those of the jobs that make its inputs. Evaluated when the DAG is built, after every
    rules file is read, so no file needs to register its benchmarks and the order of the includes does not matter.
    """

    def benchmarks(path):
        for producer in workflow.rules:
            if producer.is_producer(path):
                wildcards = producer.get_wildcards(path)
                if producer.benchmark is not None:
                    return [producer.expand_benchmark(wildcards)]
                inputs = producer.expand_input(wildcards)[0]
                return [found for item in inputs for found in benchmarks(item)]
        return []

    def files(wildcards):
        found = []
        for study in studies:
            for path in study.analysis_files(config):
                found += benchmarks(path)
        return sorted(set(map(str, found)))

    return files


def report_inputs(wildcards):
    """Every file the report copies or records: the notebooks' outputs, executed notebooks, captions (an edited
    caption makes a new report), dataset records, checkpoint indexes, wall times and the converted models.
    """
    outputs, captions, data, checkpoints = [], [], [], []
    for study in STUDIES:
        for notebook in study.runnable(config):
            outputs.append(study.executed(notebook.name))
            outputs += [
                f for o in study.outputs(notebook.name) for f in o.files().values()
            ]
        captions += sorted({os.path.relpath(o.caption) for o in study.outputs()})
        data += study.provenance_files("datasets", config)
        checkpoints += study.provenance_files("checkpoints", config)
    return {
        "outputs": outputs,
        "captions": captions,
        "data": data,
        "checkpoints": checkpoints,
        "benchmarks": wall_time_files(STUDIES)(wildcards),
        "performance": PERFORMANCE,
        "models": [f"results/models/{name}" for name in config["models"]],
    }
