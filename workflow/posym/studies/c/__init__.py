"""Paper C: *Fingerprint, not blueprint: the QK spectral fingerprint* (arXiv 2607.06621; code and cached tables:
github.com/HengyuLi-Ozaki-lab/qk-spectral-fingerprint); implementation spec ``shared/spec/papers.md`` §C.

Modules: ``qk_fingerprint`` (the spectral metrics of a head's QK form and their null: §C1, §C2, §C4),
``qk_detectors`` (head scores, copying, K-composition and the ablations: §C3, §C4), ``published`` (Tables 1-3, Fig
2a, the permutation test and the Im(M_t) ablation's heads regenerated from the authors' per-head cache in
``cache/``: claim C-5), ``paper`` (the published numbers), ``checks`` (claims C-1 … C-3 on random heads),
``architecture``, ``training`` and ``formation`` (claim C-4: the constrained toy training, Table 4, the contrasts),
``real_models`` (claim C-6 on real language models that stand in for GPT-2 / Pythia, whose weights are not on disk
here: Fig 1, Tables 1-2, the Im(M_t) ablation and K-composition), ``our_heads`` (posym's own question on paper A's
and B's trained heads), ``config_checks``, ``variants`` (the arms), ``jobs`` and ``cli`` (``posym c ...``).

Claim C-k's verdict rows come from ``claim_ck`` of the module named with it, called by the claim's notebook
(study.yaml) on what the study's jobs measured. Thresholds set in the configuration are ``claims`` settings:
``training.claims`` for C-4 (compared by the job, ``formation.measure``), ``real_models.claims`` for C-6.
"""
