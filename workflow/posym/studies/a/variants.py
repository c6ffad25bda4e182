"""Paper A's run grid: the plain run (``main``), and with ``a.fidelity`` set, the factor grid of the fidelity study
(posym.studies.a.fidelity): every recipe (embedding dropout × batch size) under each final-checkpoint choice, a
variant each, trained once per recipe (the choices differ only after training). Light: the workflow reads it."""

from __future__ import annotations

from posym.pipeline import variants
from posym.pipeline.scale import Scale

#: Tokens of a training input (spec §A1, correction 4: 8 target window + 8 pre-target + the query).
TRAIN_TOKENS = 17


def trained_scale(section: dict) -> Scale:
    """The size of the plain runs that claims A-1 … A-5 judge."""
    model, train = section["model"], section["train"]
    return Scale(model["n_layer"], model["n_head"], TRAIN_TOKENS, train["steps"], train["batch_size"], len(section["seeds"]))

#: The run set of the fidelity notebook.
FIDELITY = "fidelity"


def recipe_name(embd_pdrop: float, batch_size: int) -> str:
    return f"pdrop{embd_pdrop:g}-batch{batch_size}"


def variant_name(levels: dict) -> str:
    return f"{recipe_name(levels['embd_pdrop'], levels['batch_size'])}-{levels['choice']}"


def run_grid(section: dict) -> variants.RunGrid:
    grid = variants.plain(section)
    fidelity = section.get("fidelity")
    if not fidelity:
        return grid
    factors = {
        "model.embd_pdrop": fidelity["embd_pdrop"],
        "train.batch_size": fidelity["batch_size"],
        "final_checkpoint.choice": fidelity["final_checkpoint"],
    }
    recipes = variants.factor_grid(factors, variant_name)
    rows = [
        {
            "variant": name,
            "task": task,
            "seed": seed,
            "recipe": recipe_name(overrides["model"]["embd_pdrop"], overrides["train"]["batch_size"]),
            "choice": overrides["final_checkpoint"]["choice"],
        }
        for name, overrides in recipes.items()
        for task in section["tasks"]
        for seed in fidelity["seeds"]
    ]
    return variants.RunGrid({**grid.variants, **recipes}, {**grid.sets, FIDELITY: rows})
