"""Speed of the QK spectral fingerprint (posym.studies.c.qk_fingerprint, paper C §C2), each against a reference in the
same run:

* the random-orientation null of one GPT-2-sized head (d 768, k 64, R = 300 draws): posym's O(k³) draw of
  Q_2ᵀQ_1 against the spec's two QR'd Gaussian d×k frames per draw;
* the fingerprint (static metrics and RoPE features) of every head of every checkpoint of one paper-A model
  (136 checkpoints × 12 layers × one head of 128; weights of that shape, the cost does not depend on their
  values), where a head as wide as the model is solved on M itself, against the rank-k core path a narrow
  head takes (QR of both weights and an SVD first).

    python benchmarks/qk_fingerprint_speed.py [--repeats 3] [--model-repeats 1] [--checkpoints 136] [--out FILE]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from benchmark_report import write_report
from posym.studies.c import qk_fingerprint as qk
from posym.pipeline.provenance import cpu_name

HERE = Path(__file__).resolve().parent


def null_by_whole_frames(S: np.ndarray, d: int, draws: int, seed: int) -> dict[str, np.ndarray]:
    frames = qk.random_frames(d, len(S), 2 * draws, np.random.default_rng(seed))
    return qk.spectral_metrics(S[:, None] * (np.swapaxes(frames[1::2], -1, -2) @ frames[0::2]), float(np.sum(S**2)))


def low_rank_fingerprint(W_Q: np.ndarray, W_K: np.ndarray) -> dict[str, float]:
    """The same metrics through the rank-k core (QR of both weights, SVD of R_Q R_Kᵀ), as for a narrow head."""
    low = qk.LowRank.of(W_Q, W_K)
    eigenvalues, vectors = np.linalg.eig(low.core())
    metrics = qk.spectral_metrics(low.core(), float(np.sum(low.S**2)), eigenvalues)
    return {**metrics, "cond_eig": float(np.linalg.cond(vectors)), "content_pos_frac": qk.content_pos_frac(low)}


def timed(function, repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-repeats", type=int, default=1, help="repeats of the (longer) model part")
    parser.add_argument("--checkpoints", type=int, default=136)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "qk_fingerprint_speed.json")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    d, k, draws = 768, 64, 300
    W_Q, W_K = rng.standard_normal((d, k)), rng.standard_normal((d, k))
    S = qk.LowRank.of(W_Q, W_K).S
    null = {
        "posym": timed(lambda: qk.null_distribution(S, d, draws, seed=0), args.repeats),
        "two whole frames per draw": timed(lambda: null_by_whole_frames(S, d, draws, seed=0), args.repeats),
    }
    ours, reference = qk.null_distribution(S, d, draws, seed=0), null_by_whole_frames(S, d, draws, seed=1)

    layers, d_a, rotary = 12, 128, 128
    heads = [(rng.standard_normal((d_a, d_a)) / 11, rng.standard_normal((d_a, d_a)) / 11) for _ in range(layers)]

    def fingerprints():
        for _ in range(args.checkpoints):
            for W_q, W_k in heads:
                qk.head_fingerprint(W_q, W_k)
                qk.rope_features(W_q, W_k, rotary, "interleaved")

    def through_core():
        for _ in range(args.checkpoints):
            for W_q, W_k in heads:
                low_rank_fingerprint(W_q, W_k)
                qk.rope_features(W_q, W_k, rotary, "interleaved")

    model = {"posym": timed(fingerprints, args.model_repeats), "rank-k core": timed(through_core, args.model_repeats)}
    median = lambda runs: statistics.median(runs)
    report = {
        "benchmark": "qk_fingerprint_speed",
        "what": "paper C's null (d 768, k 64, R 300) and the fingerprint of every head of a paper-A model's checkpoints",
        "machine": {"platform": platform.platform(), "processor": cpu_name()},
        "numpy": np.__version__,
        "null_seconds": null,
        "null_means": {name: {m: float(v.mean()) for m, v in values.items()} for name, values in (("posym", ours), ("two whole frames per draw", reference))},
        "model_seconds": model,
        "heads": args.checkpoints * layers,
        "ratios": {
            "null: whole frames / posym": median(null["two whole frames per draw"]) / median(null["posym"]),
            "model: rank-k core / posym": median(model["rank-k core"]) / median(model["posym"]),
        },
    }
    report["summary"] = {
        "null of one 768-dim head, R = 300": f"{median(null['posym']):.2f} s (two whole frames per draw: {median(null['two whole frames per draw']):.2f} s)",
        "null means (posym / whole frames)": f"dir_frac {ours['dir_frac'].mean():.3f} / {reference['dir_frac'].mean():.3f}, "
        f"D_head {ours['D_head'].mean():.3f} / {reference['D_head'].mean():.3f} (paper: 0.707, 0.608)",
        f"fingerprint of {args.checkpoints} checkpoints x {layers} heads of 128": f"{median(model['posym']):.1f} s (through the rank-k core: {median(model['rank-k core']):.1f} s)",
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
