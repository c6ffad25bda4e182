"""Paper A's published numbers, each with its source in the spec (``shared/spec/papers.md``).

These values only ever appear in "paper" columns beside posym's own measurements; nothing in
the pipeline computes a result from them.
"""

from __future__ import annotations

import pandas as pd

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
