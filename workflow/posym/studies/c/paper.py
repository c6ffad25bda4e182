"""Paper C's published numbers (spec §C6), as printed: what the study's tables set beside ours ("paper" columns).

Values are the paper's own rounding; ``None`` where it prints a symbol rather than a number (Table 1's "ns").
"""

from __future__ import annotations

from posym.pipeline.scale import Scale

#: The constrained training's toy model (spec §C6): 2 attention-only layers of 4 heads over 256 positions, 6000
#: steps of 64 sequences, 5 seeds per arm.
SCALE = Scale(layers=2, heads=4, positions=256, steps=6000, batch=64, seeds=5)

#: The seven models of Table 2, in the paper's order: name in the authors' cache -> (label, d_k, positions, norm).
MODELS = {
    "gpt2": ("GPT-2", 64, "abs", "LN"),
    "opt-1.3b": ("OPT-1.3B", 64, "abs", "LN"),
    "gpt-neo-1.3b": ("GPT-Neo-1.3B", 128, "abs", "LN"),
    "bloom-1b1": ("BLOOM-1b1", 96, "ALiBi", "LN"),
    "pythia-410m": ("Pythia-410m", 64, "RoPE 25 %", "LN"),
    "pythia-1.4b": ("Pythia-1.4B", 128, "RoPE 25 %", "LN"),
    "llama-3-8b": ("Llama-3-8B", 128, "RoPE 100 %", "RMS"),
}
#: The models with rotary dims (the rest use absolute positions or ALiBi), and their rotary share.
ROPE_MODELS = ("pythia-410m", "pythia-1.4b", "llama-3-8b")
#: The share of each RoPE model's head dimensions that rotate (Table 3's "RoPE" column; Fig 2b's x axis).
ROPE_FRACTION = {"pythia-410m": 0.25, "pythia-1.4b": 0.25, "llama-3-8b": 1.0}

#: Table 1 (GPT-2): Spearman ρ of each metric with each head score; None = printed "ns" (not FDR-significant).
TABLE1 = {
    ("dir_frac", "prev"): 0.47,
    ("dir_frac", "dup"): -0.59,
    ("dir_frac", "ind"): -0.50,
    ("dir_frac", "copying"): 0.06,  # printed "0.06 (ns)"
    ("content_pos_frac", "prev"): -0.63,
    ("content_pos_frac", "dup"): 0.59,
    ("content_pos_frac", "ind"): 0.57,
    ("content_pos_frac", "copying"): None,
    ("imag_mass", "prev"): 0.56,
    ("imag_mass", "dup"): -0.65,
    ("imag_mass", "ind"): -0.61,
    ("imag_mass", "copying"): None,
}
#: Table 1's cells printed "ns" (every other cell is FDR-significant).
TABLE1_NS = {("dir_frac", "copying"), ("content_pos_frac", "copying"), ("imag_mass", "copying")}

#: Table 2 by model: ρ_dir, ρ_D, partial ρ(D_head, prev | dir_frac), its 95 % CI, the top-5 percentile.
TABLE2 = {
    "gpt2": (0.47, 0.29, -0.21, (-0.51, 0.08), 0.21),
    "opt-1.3b": (0.08, 0.28, 0.35, (0.19, 0.48), 0.23),
    "gpt-neo-1.3b": (0.35, 0.41, 0.20, (0.07, 0.33), 0.14),
    "bloom-1b1": (0.13, 0.25, 0.34, (0.22, 0.47), 0.26),
    "pythia-410m": (0.57, 0.62, 0.35, (0.21, 0.47), 0.89),
    "pythia-1.4b": (0.31, 0.60, 0.50, (0.38, 0.59), 0.85),
    "llama-3-8b": (0.32, 0.38, 0.33, (0.21, 0.45), 0.79),
}
#: The top-5 prev heads (layer.head) the spec lists (§C6).
TOP5_HEADS = {
    "gpt2": ["4.11", "6.8", "3.7", "2.2", "5.6"],
    "pythia-410m": ["5.2", "9.5", "3.1", "4.9", "5.9"],
    "llama-3-8b": ["0.2", "14.26", "14.8", "9.11", "21.7"],
}
#: The model-level exact permutation p (RoPE vs the rest on the top-5 percentile): 1/C(7,3), printed 0.029.
PERMUTATION_P = 0.029
#: The head-level Mann-Whitney p (descriptive only; the pooled heads are not named in the spec).
HEAD_LEVEL_P = 2.5e-5

#: Table 3 by RoPE model: partial, partial with phase controls, attenuation (hybrid, %), attenuation (rank, %).
TABLE3 = {
    "pythia-410m": (0.35, 0.14, 61, 47),
    "pythia-1.4b": (0.50, 0.31, 38, 10),
    "llama-3-8b": (0.33, 0.006, 98, 70),  # printed "~98 %"
}
#: Table 3's printed p of Llama's controlled partial (hybrid, .84) and its rank residual (+0.075, p = .016).
TABLE3_LLAMA = {"hybrid_p": 0.84, "rank_residual": 0.075, "rank_p": 0.016}
#: rope_imag_frac vs prev (Spearman), and Llama's high-frequency concentration (hi_freq_dir vs prev).
ROPE_IMAG_PREV = {"pythia-410m": 0.53, "pythia-1.4b": 0.42, "llama-3-8b": 0.50}
HI_FREQ_LLAMA = 0.68

#: The Im(M_t) ablation: the head with the largest induction effect, its prev rank, CE before -> after.
ABLATION = {
    "pythia-410m": ("5.2", 1, 0.52, 2.24),
    "pythia-1.4b": ("1.11", 1, 0.56, 1.11),
    "llama-3-8b": ("14.26", 2, 0.30, 0.91),
}
#: "For 92-99 % of heads, |ΔInd| < 0.01."
SMALL_EFFECT_SHARE = (0.92, 0.99)

#: The constrained training's steps per run (spec §C6): what "final" means in its end-of-training values.
TRAINING_STEPS = 6000
#: The floor of the formation threshold ½(ln V + floor) (spec §C6: 0.15, threshold 2.154 for V = 64).
FORMATION_FLOOR = 0.15
#: Table 4 / Fig 5 (constrained training, spec §C6): formation step mean ± sd over n seeds, by arm.
FORMATION = {
    "ape_free": (600, 0, 5),
    "rope_free": (940, 55, 5),
    "rope_imag": (1280, 164, 5),
    "rope_sym": (1560, 167, 5),
    "ape_sym": (1740, 241, 5),
    "rope_imag_l1": (1467, 208, 3),
}
#: The pre-registered contrasts (one-sided exact Mann-Whitney, BH over the four): id -> (larger arm, smaller arm,
#: p, q, shift), as printed.
CONTRASTS = {
    "P1": ("rope_free", "ape_free", 0.0040, 0.016, 300),
    "P2": ("rope_imag", "rope_free", 0.0079, 0.008, 400),
    "P3": ("ape_sym", "ape_free", 0.0040, 0.008, 1200),
    "P4": ("rope_sym", "rope_free", 0.0040, 0.005, 600),
}
#: APE sym over APE free, printed "2.9x"; the sym-RoPE prev head's rope_imag_frac and dir_frac.
APE_SYM_RATIO = 2.9
SYM_PREV_HEAD = {"rope_imag_frac": 0.52, "dir_frac": 0.005}
