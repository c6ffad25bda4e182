"""Paper A: *Positional versus Symbolic Attention Heads: Learning Dynamics, RoPE Geometry, and Length
Generalization* (Urrutia et al., arXiv 2605.31558); implementation spec ``shared/spec/papers.md`` §A.

Modules: ``tasks/`` (Number, Letter), ``head_scores`` (positional / symbolic scores, §A6), ``head_dynamics``
(Fig 2B/2C/6/7, claim A-3), ``training_curves`` (Fig 2A, claims A-1, A-2), ``information_flow`` (Fig 3),
``rope_frequency`` and ``rope_geometry`` (§A7: Table 1, Fig 4B/C, Fig 8, claim A-4), ``theory`` (§A9: Listing 1,
Thm 3.1/3.2, Fig 4A, Fig 5A, claim A-6), ``length_generalisation`` (Fig 5B, discrepancy of trained heads, claim
A-5), ``llm_probes`` and ``language_models`` (Fig 5C/D, Table 3, claim A-7), ``task_figures`` (Fig 1, Table 2),
``compute`` and ``wall_times`` (Table 4), ``paper`` (the published values), ``variants`` (the run grid) and
``fidelity`` (the factor study of why our models differ), ``config_checks``, ``jobs`` and ``cli`` (``posym a ...``).

Claim A-k is judged by ``claim_ak`` of the module named with it, from its thresholds in the section's
``claims.ak`` (schema.yaml), which study.yaml hands to the notebook that judges it.
"""

