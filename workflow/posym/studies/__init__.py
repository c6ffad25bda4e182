"""The studies: one folder per paper (``a`` = paper A, ...), each on the shared core of posym.

A study folder holds its tasks (``tasks/``), analyses, published values (``paper.py``), its table of report items
and claims (``study.yaml``), the schema of its config section (``schema.yaml``), its rules (``rules.smk``), its
notebooks and its captions. The core finds studies by their folders (:mod:`posym.pipeline.study`); no study imports another.
"""
