"""Paper C: *Fingerprint, not blueprint: the QK spectral fingerprint* (arXiv 2607.06621; code and cached tables:
github.com/HengyuLi-Ozaki-lab/qk-spectral-fingerprint); implementation spec ``shared/spec/papers.md`` §C.

The spectral metrics themselves are the core's (``posym.studies.c.qk_fingerprint``). Modules: ``published`` (Tables 1-3,
Fig 2a, the permutation test and the Im(M_t) ablation's heads regenerated from the authors' per-head cache in
``cache/``: claim C-5), ``paper`` (the published numbers), ``checks`` (claims C-1 … C-3 on random heads), ``cli``
(``posym c ...``). ``architecture``, ``training``, ``formation`` (C-4: the constrained toy training, Table 4, the contrasts). Not built yet: C-6 (needs GPT-2 / Pythia weights).
"""
