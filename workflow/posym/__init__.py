"""posym: the studies of how RoPE carries position, as one workflow.

Layers, bottom to top (a module imports from its own layer or below; ``tests/core/test_layout.py`` enforces it):
:mod:`posym.registry` (where studies are), :mod:`posym.data`, :mod:`posym.nn`, :mod:`posym.training`,
:mod:`posym.lm`, :mod:`posym.pipeline`, the studies (:mod:`posym.studies`, one package each) and the command line
(:mod:`posym.cli`).
"""
