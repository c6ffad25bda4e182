"""Time the scores of one paper-size run: every checkpoint × every layer, loading included.

Target: the ~136 checkpoints (every 50 of 6750 steps) × 12 layers of one paper-config model
(12 layers, d_model 128, one head; spec §A3) in ≤ 5 min on 2 CPU cores.

The script writes that many checkpoints of a paper-config model into a temporary run directory
(the weights drift from step to step as in training; only their shapes matter for the time), plus
a full-size test split, and times ``posym.studies.a.head_scores.score_run`` end to end: index verification,
checkpoint loading, the forward pass and the scores. In the same process it times the authors'
procedure (permute the block input, rerun the block, once per swap) on one checkpoint, checks the
two give the same scores, and extrapolates it to all checkpoints. It writes the timings as JSON.

Thread counts are timed separately because the scores are many small tensor operations: on a
machine whose cores are busy with other jobs, two intra-op threads wait on each other at every
operation and can be several times slower than one (the JSON records the load average).

    .venv/bin/python benchmarks/score_speed.py [--checkpoints 136] [--threads 1 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from benchmark_report import write_report
from posym.training import checkpoints
from posym.pipeline import config
from posym.data import datasets
from posym.training.checkpoints import load_index
from posym.data.files import write_json
from posym.nn.gptj import ModelConfig, PosymModel
from posym.studies.a import head_scores as scores
from posym.studies.a.tasks import get

PAPER_A = config.study_defaults("a")  # the paper's model, test split and score settings

HERE = Path(__file__).resolve().parent
BUDGET_SECONDS = 300
LITERAL_CHUNK = 10  # samples per literal block call: 10 × 121 permuted inputs


def write_paper_run(root: Path, n_checkpoints: int, test_samples: int) -> tuple[Path, Path]:
    """A run directory like ``posym train`` leaves: checkpoints every 50 steps, checkpoints.json, a test split."""
    vocab = list(get("number").vocabulary.tokens)
    model = PosymModel(ModelConfig(vocab_size=len(vocab), **PAPER_A["model"])).initialise([0])
    entries = []
    for k in range(n_checkpoints):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1e-3 * torch.randn_like(parameter))
        directory = checkpoints.write_checkpoint(root / "checkpoints", 50 * k, model, 0, vocab, {"eval": [], "log": []})
        entries.append(
            {
                "step": 50 * k,
                "path": str(directory.relative_to(root)),
                "sha256": checkpoints.verify(directory)["model.safetensors"],
            }
        )
    write_json(root / "checkpoints.json", {"checkpoints": entries})
    datasets.save_split(root / "test", get("number").generate_split("test", 42, test_samples), {"split": "test"})
    return root / "checkpoints.json", root / "test.safetensors"


def time_loading(index: Path) -> float:
    """Seconds to verify the index and load every checkpoint, without scoring."""
    start = time.perf_counter()
    for entry in load_index(index)["checkpoints"]:
        checkpoints.load_model(index.parent / entry["path"])
    return time.perf_counter() - start


def literal_checkpoint_scores(model: PosymModel, ids: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Seconds and (layer, [s_POS, s_SYM]) of the authors' per-swap procedure on one model."""
    swaps = scores.key_swaps(ids.shape[1] - 1)
    start = time.perf_counter()
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(model.config.n_layer)]
    cache = model.run_with_cache(ids, names)
    result = []
    for layer, name in enumerate(names):
        per_sample = []
        for chunk in cache[name].split(LITERAL_CHUNK, dim=1):
            unpermuted, permuted = scores.literal_swapped_attention(model, layer, chunk, swaps)
            per_sample.append(torch.stack(scores.swap_scores(unpermuted, permuted, swaps, PAPER_A["scores"]["tau"]), dim=-1))
        result.append(torch.cat(per_sample).mean(0)[0])
    return time.perf_counter() - start, torch.stack(result)


def time_one_pass(index: Path, data: Path, samples: int, threads: int):
    """Seconds and scores of ``posym.studies.a.head_scores.score_run`` with ``threads`` torch threads."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    result = scores.score_run(index, data, samples=samples, tau=PAPER_A["scores"]["tau"])
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--checkpoints", type=int, default=136, help="checkpoints in the run (paper: 6750 / 50 + 1 = 136)"
    )
    parser.add_argument("--samples", type=int, default=PAPER_A["scores"]["samples"], help="scored samples per checkpoint")
    parser.add_argument(
        "--test-samples", type=int, default=PAPER_A["data"]["test_samples"], help="size of the loaded test split"
    )
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1, 2],
        help="torch thread counts to time the one-pass scores with; the first also times loading and the literal procedure",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "score_speed.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        index, data = write_paper_run(Path(tmp), args.checkpoints, args.test_samples)
        setup = time.perf_counter() - start

        one_pass, fast = {}, None
        for threads in args.threads:
            seconds, fast = time_one_pass(index, data, args.samples, threads)
            one_pass[str(threads)] = {
                "total_seconds": round(seconds, 2),
                "per_checkpoint_seconds": round(seconds / args.checkpoints, 4),
            }
        torch.set_num_threads(args.threads[0])
        loading_seconds = time_loading(index)

        last = load_index(index)["checkpoints"][-1]
        model, _ = checkpoints.load_model(index.parent / last["path"])
        ids = torch.as_tensor(datasets.load_split(data).tokens[: args.samples], dtype=torch.long)
        literal_seconds, literal = literal_checkpoint_scores(model, ids)

    reference = one_pass[str(args.threads[0])]["total_seconds"]
    fast_last = torch.tensor(fast[fast["step"] == last["step"]][["positional", "symbolic"]].to_numpy())
    literal_total = literal_seconds * args.checkpoints
    result = {
        "checkpoints": args.checkpoints,
        "layers": model.config.n_layer,
        "samples": args.samples,
        "setup_seconds": round(setup, 2),
        "one_pass_by_threads": one_pass,
        "loading_seconds": round(loading_seconds, 2),
        "literal_per_swap": {
            "threads": args.threads[0],
            "checkpoints_timed": 1,
            "per_checkpoint_seconds": round(literal_seconds, 2),
            "extrapolated_total_seconds": round(literal_total, 1),
        },
        "speedup": round(literal_total / reference, 1),
        "max_score_difference": float((fast_last - literal).abs().max()),
        "budget_seconds": BUDGET_SECONDS,
        "within_budget": {threads: timing["total_seconds"] <= BUDGET_SECONDS for threads, timing in one_pass.items()},
        "load_average_1min": round(os.getloadavg()[0], 2),
        "summary": {
            f"scores of {args.checkpoints} checkpoints x {model.config.n_layer} layers, {threads} thread(s)": f"{timing['total_seconds']:.0f} s"
            for threads, timing in one_pass.items()
        }
        | {
            "speed-up over the literal per-swap procedure": f"{literal_total / reference:.0f}x",
            "largest score difference between the two": f"{float((fast_last - literal).abs().max()):.1e}",
            "budget": f"{BUDGET_SECONDS} s",
        },
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
        },
    }
    write_report(result, args.out)


if __name__ == "__main__":
    main()
