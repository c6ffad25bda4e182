"""Paper A's commands (``posym a <command>``), one per job of its rules: the table their parsers and the rules'
command lines come from (:mod:`posym.pipeline.jobs`). The functions are in ``cli.py``."""

from posym.pipeline.jobs import File, Job, Value

from .tasks import PAPER_ORDER

CLI = "posym.studies.a.cli"
INDEX = File("the run's checkpoints.json")
TEST = File("the test split")

JOBS = (
    Job(
        "length-data",
        "length-extended test sets (prepend protocol, spec §A10.1)",
        f"{CLI}:cmd_length_data",
        values={
            "task": Value("the task", choices=PAPER_ORDER),
            "seed": Value("dataset seed (data.seed_offset + run seed)", type=int),
        },
        out="the sets (.safetensors; their record beside it, .json)",
        settings=("length",),
    ),
    Job(
        "length-protocol",
        "Fig 5B under each filler rule of length_protocol.fillers: a run's final checkpoint on Fig 5B's base samples",
        f"{CLI}:cmd_length_protocol",
        inputs={"index": INDEX},
        values={
            "task": Value("the run's task", choices=PAPER_ORDER),
            "seed": Value("dataset seed (data.seed_offset + run seed): the base samples and filler streams of Fig 5B's", type=int),
        },
        out="CSV: filler, extra_tokens, length, hop, accuracy, n, step",
        settings=("length_protocol",),
    ),
    Job(
        "scores",
        "positional / symbolic scores, entropy and purity of every head at every checkpoint of a run (spec §A6)",
        f"{CLI}:cmd_scores",
        inputs={"index": INDEX, "data": File("the run's test split; its first scores.samples samples are scored")},
        outputs={
            "scores": "CSV: step, layer, head, positional, symbolic, entropy, entropy_norm",
            "purity": "CSV: step, gamma, kind, count, heads",
        },
        settings=("scores",),
    ),
    Job(
        "flow",
        "information-flow grid of a run's final checkpoint on one input (spec §A8, Fig 3A/B)",
        f"{CLI}:cmd_flow",
        inputs={"index": INDEX},
        outputs={
            "grid": "CSV: depth, position, token, changed, attended, step",
            "summary": "JSON: input, answer, prediction, where the answer arrives in which layer",
        },
        values={"task": Value("the run's task", choices=PAPER_ORDER)},
        extras={"input": Value("space-separated tokens, the query last (default: the paper's Fig 3 example)", optional=True)},
    ),
    Job(
        "frequency",
        "RoPE frequency use per layer of a run's final checkpoint (spec §A7)",
        f"{CLI}:cmd_frequency",
        inputs={"index": INDEX, "data": TEST},
        out="the table to write (.csv)",
        settings=("frequency",),
    ),
    Job(
        "geometry",
        "queries and keys on a layer's dominant RoPE plane (Fig 4B)",
        f"{CLI}:cmd_geometry",
        inputs={"index": INDEX, "data": TEST, "frequency": File("the run's frequency-use table (posym a frequency)")},
        out="the table to write (.csv)",
        settings=("geometry",),
    ),
    Job(
        "discrepancy",
        "logit gap of trained heads on the length-extended sets (spec §A9)",
        f"{CLI}:cmd_discrepancy",
        inputs={"index": INDEX, "data": File("the length-extended sets (posym a length-data)")},
        out="the table to write (.csv)",
        settings=("discrepancy",),
    ),
    Job(
        "theory",
        "Thm 3.1 constructions and Thm 3.2 discrepancy (spec §A9, Fig 5A)",
        f"{CLI}:cmd_theory",
        outputs={
            "discrepancy": "CSV: bound and measured Δ per curve and n",
            "exactness": "CSV: constructions vs Listing 1 on random inputs",
        },
        settings=("theory",),
    ),
    Job(
        "llm-probe",
        "the 1-hop LLM probes on a local model or an endpoint (spec §A10.2; settings llm.*)",
        f"{CLI}:cmd_llm_probe",
        # the endpoint's job has no model directory
        inputs={
            "model": File("a local Hugging Face model directory (default: llm.model when it names one)", optional=True)
        },
        outputs={
            "probe_items": "CSV: one row per item and its answers",
            "probe_summary": "CSV: accuracy per model, task, window and method",
        },
        values={"llm": Value("label of a local model in the outputs (default: its directory's name)", optional=True)},
        settings=("tasks", "llm"),
    ),
    Job(
        "llm-gather",
        "the LLM probes' items of every model in one table, and its summary",
        f"{CLI}:cmd_llm_gather",
        inputs={"probe_items": File("items CSVs of posym a llm-probe", several=True)},
        outputs={"probe_items": "CSV: every model's items", "probe_summary": "CSV: their summary"},
    ),
)
