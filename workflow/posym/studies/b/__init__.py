"""Paper B: *Deconstructing Positional Information* (arXiv 2505.13027; code: Qihuai27/Deposit-Pattern-Research):
how six position encodings and MLA carry position, and the single-head "deposit" pattern RoPE forms;
implementation spec ``shared/spec/papers.md`` §B.

Modules: ``tasks/`` (distance, count: §B2), ``architecture`` (the encoder with the authors' quirks and MLA: §B3;
its position schemes are the core's, ``posym.nn.positions``), ``variants`` and ``config_checks`` (the variants:
model and train settings over the baseline's), ``deposit`` (per-head ablation: §B4), ``toeplitz`` (the
decomposition of §B1, checked on layer 0), ``probe`` (position probe: §B6), ``results`` (tables, figures and claims
B-1 … B-5: §B7), ``paper`` (§B6's published numbers), ``variants`` (the run grid), ``jobs`` and ``cli`` (``posym b ...``).

Claim B-k is judged by ``results.claim_bk``, at the thresholds of spec §B7; the mechanism checks (B-3, B-4, B-5)
read only models at least as accurate as the section's ``claims.trained_accuracy`` (schema.yaml).
"""
