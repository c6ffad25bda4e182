"""Paper A's published numbers, each with its source in the spec (``shared/spec/papers.md``).

These values only ever appear in "paper" columns beside posym's own measurements; nothing in
the pipeline computes a result from them.
"""

from __future__ import annotations

import pandas as pd

from posym.pipeline.scale import Scale

#: The paper's models (spec §A3): 12 layers of one head, 17-token inputs, one epoch of 432,000 at batch 64 (6750
#: steps, spec §A3's reading of Fig 2), one training seed (42, spec §A2).
SCALE = Scale(layers=12, heads=1, positions=17, steps=6750, batch=64, seeds=1)

# §A5 [FIG, Fig. 2A]: first step at which each accuracy curve reaches the threshold.
HOP_CROSSINGS = pd.DataFrame(
    [
        {"task": "number", "curve": "hop 1 ≥ 0.9", "step": 2050},
        {"task": "number", "curve": "hop 2 ≥ 0.9", "step": 2750},
        {"task": "number", "curve": "hop 3 ≥ 0.9", "step": 3250},
        {"task": "number", "curve": "hop 4 ≥ 0.9", "step": 3400},
        {"task": "number", "curve": "all ≥ 0.99", "step": 4050},
        {"task": "letter", "curve": "hop 1 ≥ 0.9", "step": 2700},
        {"task": "letter", "curve": "hop 2 ≥ 0.9", "step": 2750},
        {"task": "letter", "curve": "hop 3 ≥ 0.9", "step": 2750},
        {"task": "letter", "curve": "hop 4 ≥ 0.9", "step": 2750},
        {"task": "letter", "curve": "all ≥ 0.99", "step": 2950},
    ]
)

# §A5: the dashed "max accuracy" line of Fig. 2A.
MAX_ACCURACY_STEP = {"number": 4800, "letter": 3400}

# §A10.1 [FIG, Fig. 5B digitised]: accuracy after prepending x filler tokens.
# Below x = 40 the Number curve is ≥ 0.996 and the Letter curve 0.999; the grid below lists the
# digitised points only.
_LENGTH_X = [0, 10, 20, 30, 40, 50, 60, 80, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1500, 2000, 3000, 4000, 5000]
_LENGTH_NUMBER = [0.996, 0.996, 0.996, 0.996, 0.94, 0.88, 0.84, 0.80, 0.74, 0.64, 0.47, 0.36, 0.31, 0.30, 0.29, 0.25, 0.23, 0.20, 0.15, 0.10, 0.06, 0.04, 0.04]
_LENGTH_LETTER = [0.999] * 8 + [0.998, 0.99, 0.99, 0.97, 0.96, 0.94, 0.91, 0.89, 0.88, 0.87, 0.79, 0.74, 0.63, 0.55, 0.48]
LENGTH_CURVE = pd.concat(
    [
        pd.DataFrame({"task": "number", "extra_tokens": _LENGTH_X, "accuracy": _LENGTH_NUMBER}),
        pd.DataFrame({"task": "letter", "extra_tokens": _LENGTH_X, "accuracy": _LENGTH_LETTER}),
    ],
    ignore_index=True,
)

# §A11: every table and figure of paper A. Report files whose name starts with ``key + "_"`` render it.
ITEMS = [
    {"id": "Fig 1", "content": "Task schematics", "key": "fig1"},
    {"id": "Fig 2A", "content": "Test accuracy per hop over training, both tasks", "key": "fig2a"},
    {"id": "Fig 2B", "content": "Positional / symbolic score and entropy, layers 1, 5, 11", "key": "fig2b"},
    {"id": "Fig 2C", "content": "Cumulative pure-head counts", "key": "fig2c"},
    {"id": "Fig 3A/B", "content": "Information-flow grids of the trained models", "key": "fig3ab"},
    {"id": "Fig 3C/D", "content": "Idealised Index/Reflexive and Retrieval/Reflexive flows", "key": "fig3cd"},
    {"id": "Fig 4A", "content": "Geometry of the Index construction", "key": "fig4a"},
    {"id": "Fig 4B", "content": "Layer-1 queries and keys in the dominant RoPE plane", "key": "fig4b"},
    {"id": "Fig 4C", "content": "Max logit per frequency at layer 1", "key": "fig4c"},
    {"id": "Fig 5A", "content": "Theoretical discrepancy bounds", "key": "fig5a"},
    {"id": "Fig 5B", "content": "GPT-J length extrapolation", "key": "fig5b"},
    {"id": "Fig 5C", "content": "LLM probes: GPT 5.4 / 5.5", "key": "fig5c"},
    {"id": "Fig 5D", "content": "LLM probes: Claude Sonnet 3.7", "key": "fig5d"},
    {"id": "Fig 6", "content": "Scores and entropy, all layers", "key": "fig6"},
    {"id": "Fig 7", "content": "Purity counts for γ = 0.1 and 0.05", "key": "fig7"},
    {"id": "Fig 8", "content": "Frequency use per layer", "key": "fig8"},
    {"id": "Table 1", "content": "Weighted-average frequency ID per layer", "key": "table1"},
    {"id": "Table 2", "content": "LLM prompts", "key": "table2"},
    {"id": "Table 3", "content": "LLM accuracy", "key": "table3"},
    {"id": "Table 4", "content": "Compute resources", "key": "table4"},
    {"id": "Listing 1", "content": "Index / Retrieval / Reflexive pseudocode", "key": "listing1"},
]

# ------------------------------------------------------------------------- scores and purity (§A5)

# §A5 [FIG, Fig. 2B]: final positional / symbolic score and normalised entropy of the plotted layers
# ("→ 0" read as 0), and what the paper says about when they converge.
SCORES_FINAL = pd.DataFrame(
    [
        {"task": "number", "layer": 1, "positional": 0.99, "symbolic": 0.00, "entropy_norm": 0.00, "note": "symbolic drops at ~1.8–2.75k"},
        {"task": "number", "layer": 5, "positional": 0.00, "symbolic": 0.99, "entropy_norm": 0.02, "note": ""},
        {"task": "number", "layer": 11, "positional": 0.00, "symbolic": 0.99, "entropy_norm": 0.00, "note": ""},
        {"task": "letter", "layer": 1, "positional": 0.00, "symbolic": 0.99, "entropy_norm": 0.00, "note": "positional collapses at ~1.3–1.8k"},
        {"task": "letter", "layer": 5, "positional": 0.00, "symbolic": 0.99, "entropy_norm": 0.00, "note": ""},
        {"task": "letter", "layer": 11, "positional": 0.03, "symbolic": 0.99, "entropy_norm": 0.00, "note": "symbolic dips to ≈0.2 around 1–2k, then 0.99 by ≈3.6k"},
    ]
)

# §A5: at initialisation every layer has positional ≈ symbolic ≈ 0.98–0.99 and normalised entropy ≈ 1.
SCORES_INITIAL = {"low": 0.98, "high": 0.99, "entropy_norm": 1.0}

# §A5 [FIG, Fig. 2C; its γ is not stated]: first step at which the cumulative count of pure heads
# reaches ``count``. ``layer`` is the head the spec lists for that count (Number positional: L1, L0,
# L2, L3 in that order); the spec gives no per-count layers for the symbolic curves.
PURITY_STEPS = pd.DataFrame(
    [
        {"task": "number", "kind": "positional", "count": 1, "step": 2450, "layer": 1},
        {"task": "number", "kind": "positional", "count": 2, "step": 2600, "layer": 0},
        {"task": "number", "kind": "positional", "count": 3, "step": 3250, "layer": 2},
        {"task": "number", "kind": "positional", "count": 4, "step": 4500, "layer": 3},
        {"task": "number", "kind": "symbolic", "count": 1, "step": 2750, "layer": None},
        {"task": "number", "kind": "symbolic", "count": 7, "step": 2950, "layer": None},
        {"task": "number", "kind": "symbolic", "count": 8, "step": 3000, "layer": None},
        {"task": "letter", "kind": "symbolic", "count": 1, "step": 1550, "layer": None},
        {"task": "letter", "kind": "symbolic", "count": 11, "step": 2850, "layer": None},
    ]
).astype({"layer": "Int64"})

# §A5 [FIG, Fig. 2C and Fig. 7]: the pure heads at the end of training (space-separated layer ids).
# Number: L0–L3 positional, L4–L11 symbolic. Letter: none positional, L1–L11 symbolic (L0 never pure).
PURITY_FINAL = pd.DataFrame(
    [
        {"task": "number", "kind": "positional", "count": 4, "heads": "0 1 2 3"},
        {"task": "number", "kind": "symbolic", "count": 8, "heads": " ".join(map(str, range(4, 12)))},
        {"task": "letter", "kind": "positional", "count": 0, "heads": ""},
        {"task": "letter", "kind": "symbolic", "count": 11, "heads": " ".join(map(str, range(1, 12)))},
    ]
)

# ------------------------------------------------------------------ RoPE frequency use and theory (§A7, §A9)

# §A7 [PAPER, Table 1]: softmax-weighted frequency ID (1-indexed) and its frequency, per layer 0..11.
_TABLE1 = {
    "number": [(1, 1.0000), (2, 0.8660), (2, 0.8660), (2, 0.8660), (10, 0.2738), (39, 0.0042),
               (38, 0.0049), (38, 0.0049), (38, 0.0049), (37, 0.0056), (37, 0.0056), (38, 0.0049)],
    "letter": [(18, 0.0866), (32, 0.0115), (42, 0.0027), (37, 0.0056), (40, 0.0037), (38, 0.0049),
               (41, 0.0032), (38, 0.0049), (41, 0.0032), (39, 0.0042), (38, 0.0049), (40, 0.0037)],
}  # fmt: skip
TABLE1 = pd.DataFrame(
    [
        {"task": task, "layer": layer, "id": id_, "frequency": frequency}
        for task, rows in _TABLE1.items()
        for layer, (id_, frequency) in enumerate(rows)
    ]
)

# §A9 [FIG, Fig. 5A, verified]: the plotted discrepancy bounds. Index, θ = 0.8: the 1 − cos θ plateau (0.303) up to
# n = 8, then 2π²/n² (0.2437 at n = 9). Retrieval, θ = θ_42 = 0.0027, |ALPH| = 8: 0.291 at n = 1 falling to 0.131 at n = 99.
FIG5A = pd.DataFrame(
    [{"function": "index", "theta": 0.8, "n": n, "value": 0.303} for n in range(1, 9)]
    + [
        {"function": "index", "theta": 0.8, "n": 9, "value": 0.2437},
        {"function": "retrieval", "theta": 0.0027, "n": 1, "value": 0.291},
        {"function": "retrieval", "theta": 0.0027, "n": 99, "value": 0.131},
    ]
)

# ------------------------------------------------------------------ frontier-LLM probes and compute (§A10.2, §0)

# §A10.2 [PAPER, Table 3]: accuracy of the 1-hop probes, mean (sd) over 5 runs, per target-window size W. Table 3
# omits W = 150; those points are read from Fig. 5C [FIG] and have no sd. Fig. 5D has no Claude point at 150.
LLM_MODELS = ("GPT 5.4", "GPT 5.5", "Claude Sonnet 3.7")
_TABLE3 = [  # W, then (mean, sd) for GPT 5.4 number, letter; GPT 5.5 number, letter; Claude Sonnet 3.7 number, letter
    (12, (.98, .01), (.96, .01), (.55, .02), (.87, .02), (.40, .02), (.92, .03)),
    (16, (.87, .01), (.98, .01), (.56, .03), (.95, .01), (.34, .03), (.89, .02)),
    (24, (.73, .03), (1.0, .01), (.42, .03), (.96, .02), (.22, .02), (.88, .03)),
    (32, (.45, .03), (.99, .00), (.23, .01), (.96, .01), (.15, .02), (.88, .02)),
    (48, (.17, .03), (.99, .01), (.21, .03), (.77, .01), (.11, .01), (.80, .02)),
    (64, (.14, .03), (.98, .01), (.12, .02), (.84, .02), (.08, .03), (.87, .02)),
    (80, (.10, .02), (.96, .01), (.10, .02), (.75, .01), (.06, .01), (.89, .02)),
    (100, (.08, .02), (.85, .05), (.07, .02), (.66, .04), (.06, .02), (.86, .03)),
    (150, (.06, None), (.61, None), (.07, None), (.56, None), None, None),
    (200, (.08, .01), (.52, .03), (.06, .01), (.55, .01), (.05, .01), (.77, .02)),
    (300, (.06, .01), (.40, .06), (.04, .01), (.50, .03), (.05, .01), (.80, .05)),
]  # fmt: skip
LLM_ACCURACY = pd.DataFrame(
    [
        {
            "model": model,
            "task": task,
            "window": window,
            "accuracy": cell[0],
            "sd": float("nan") if cell[1] is None else cell[1],
            "source": "Fig 5C" if window == 150 else "Table 3",
        }
        for window, *cells in _TABLE3
        for (model, task), cell in zip([(m, t) for m in LLM_MODELS for t in ("number", "letter")], cells)
        if cell is not None
    ]
)
# §A11: which models each LLM figure shows.
LLM_FIGURES = {"fig5c": ("GPT 5.4", "GPT 5.5"), "fig5d": ("Claude Sonnet 3.7",)}

# §0 Corrections 1 [PAPER, App. I, Table 4]: training took 55 min for both tasks together, not per task; the scores
# cost 5 GPU-h (attention weights) plus 8.5 CPU-h (metrics) per model.
COMPUTE_HARDWARE = "3× RTX A5000 24 GB + AMD EPYC 7282"
COMPUTE = pd.DataFrame(
    [
        {"stage": "training", "task": "number", "duration": "28 min 30 s", "seconds": 28 * 60 + 30},
        {"stage": "training", "task": "letter", "duration": "26 min 29 s", "seconds": 26 * 60 + 29},
        {"stage": "scores: attention weights", "task": "per model", "duration": "5 GPU-h", "seconds": 5 * 3600},
        {"stage": "scores: metrics", "task": "per model", "duration": "8.5 CPU-h", "seconds": int(8.5 * 3600)},
    ]
)
