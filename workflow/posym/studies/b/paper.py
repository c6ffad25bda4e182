"""Paper B's published numbers (spec §B6), as the notes report them: what the study's tables set beside ours
("paper" columns).

The paper's own text and figures were not retrieved (spec §B); these are the only numbers available. They only
ever appear in "paper" columns beside posym's measurements; nothing in the pipeline computes a result from them.
"""

from __future__ import annotations

from posym.pipeline.scale import Scale

#: The paper's encoder (spec §B3): 6 layers of 16 heads over 128 positions, batch 512 for 100 epochs (13,700 steps:
#: the schema's b.train.steps), one seed (42).
SCALE = Scale(layers=6, heads=16, positions=128, steps=13700, batch=512, seeds=1)

#: Spec §B6: test accuracy (%) by (variant, task), as the notes report it; words where the notes give no number.
#: The variants are the study's default names (``rope`` = the paper's "RoPE", RoPE plus the additive sinusoid;
#: ``partial_rope_<k>`` = RoPE on k heads, ``partial_rope_all`` on all 16 of the paper's).
ACCURACY = {
    ("rope", "distance"): "92.64",
    ("rope", "count"): "69.43",
    ("mla", "distance"): "88.34",
    ("mla", "count"): "97.41",
    ("nope", "distance"): "fails",
    ("nope", "count"): "77.69",
    ("absolute", "distance"): "second best",
    ("absolute", "count"): "medium",
    ("alibi", "distance"): "fails",
    ("alibi", "count"): "worst",
    # spec §0.8: "all heads 92.64" is trans.py's RoPE with the additive sinusoid (the rope row), another model than
    # the partial-RoPE runs of "1 head ≈ 90", so the notes give no number for partial RoPE on all heads
    ("partial_rope_all", "distance"): "not reported (92.64 is RoPE + sinusoid: the rope row)",
    ("partial_rope_2", "distance"): "≈ 90+",
    ("partial_rope_1", "distance"): "≈ 90",
}
#: The "paper" cell of a variant × task the notes do not report (spec §B6: T5 and learned APE, any other variant).
NOT_REPORTED = "not reported"
