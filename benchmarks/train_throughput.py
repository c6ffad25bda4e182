"""Training throughput of paper A's configuration: posym against HF GPTJForCausalLM + AdamW.

Both train the same model (12 layers, one 128-dim head, vocabulary 137, batch 64, 17 input
tokens plus the label) with the same optimiser settings, in blocks that alternate within one
run, so that a busy or throttled machine slows both alike; the result is their ratio. posym is
also measured with several seeds packed into one model. The share of the fp32 matmul peak uses
the peak measured in the same run and the FLOPs of the HF formulation (all 18 positions), so
that both implementations are charged the same work.

    python benchmarks/train_throughput.py [--rounds 5] [--steps 8] [--packed 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from posym import tasks
from posym.model import ModelConfig
from posym.train import Run, TrainConfig, Trainer

HERE = Path(__file__).resolve().parent
BATCH, TOKENS = 64, 18  # 17 inputs + the label, as HF sees them


def peak_gflops(repeats: int = 20) -> dict[str, float]:
    """fp32 matmul throughput for a large square product and for the model's MLP shape."""
    shapes = {"2048x2048x2048": (2048, 2048, 2048), "mlp 1152x128x512": (BATCH * TOKENS, 128, 512)}
    out = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        out[name] = 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9
    return out


def flops_per_sample(c: ModelConfig) -> float:
    """Training FLOPs of one sample in the HF formulation: 3 x forward (matmuls and attention)."""
    d, f, v, L = c.d_model, c.mlp_dim, c.vocab_size, c.n_layer
    forward = 2 * TOKENS * (L * (4 * d * d + 2 * d * f) + d * v) + L * 4 * TOKENS * TOKENS * d
    return 3.0 * forward


def posym_trainer(members: int, model: ModelConfig, train: TrainConfig, data, test, tmp: Path) -> Trainer:
    runs = [Run(seed=m, train=data, test=test, out=tmp / f"m{m}") for m in range(members)]
    return Trainer(runs, model, train, tasks.vocabulary("number").tokens)


def hf_stepper(model: ModelConfig, train: TrainConfig, data):
    """GPTJForCausalLM with torch AdamW, clipping and the LR schedule, as HF Trainer runs it."""
    from transformers import GPTJConfig, GPTJForCausalLM, get_linear_schedule_with_warmup

    config = GPTJConfig(
        vocab_size=model.vocab_size, n_positions=128, n_embd=model.d_model, n_layer=model.n_layer, n_head=model.n_head,
        rotary_dim=model.head_dim, n_inner=None, activation_function="gelu", resid_pdrop=0.1, embd_pdrop=0.1,
        attn_pdrop=0.1, layer_norm_epsilon=1e-5, initializer_range=0.02, use_cache=False, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = GPTJForCausalLM(config).train()
    decay = [p for n, p in hf.named_parameters() if not (n.endswith("bias") or "ln_" in n)]
    rest = [p for n, p in hf.named_parameters() if n.endswith("bias") or "ln_" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=train.learning_rate, betas=train.betas,
    )  # fmt: skip
    schedule = get_linear_schedule_with_warmup(optimizer, train.warmup_steps, train.steps)
    tokens = torch.as_tensor(data.tokens, dtype=torch.long)
    labels = torch.as_tensor(data.labels, dtype=torch.long)
    generator = torch.Generator().manual_seed(0)

    def step(_: int) -> None:
        index = torch.randint(0, len(labels), (BATCH,), generator=generator)
        ids = torch.cat([tokens[index], labels[index, None]], dim=1)
        target = torch.full_like(ids, -100)
        target[:, -1] = ids[:, -1]
        hf(input_ids=ids, labels=target).loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def timed(step, first: int, count: int) -> float:
    start = time.perf_counter()
    for k in range(first, first + count):
        step(k)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8, help="steps per timed block")
    parser.add_argument("--packed", type=int, default=4, help="seeds packed into one posym model (0: skip)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "train_throughput.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import tempfile

    model = ModelConfig(vocab_size=len(tasks.vocabulary("number")))
    train = TrainConfig(device=args.device)
    data = tasks.generate("number", 20_000, 42)
    test = tasks.generate("number", 256, 7)
    with tempfile.TemporaryDirectory() as tmp:
        contenders = {
            "posym": (posym_trainer(1, model, train, data, test, Path(tmp)).step, 1),
            "hf_gptj": (hf_stepper(model, train, data), 1),
        }
        if args.packed > 1:
            contenders[f"posym_packed{args.packed}"] = (posym_trainer(args.packed, model, train, data, test, Path(tmp)).step, args.packed)
        for step, _ in contenders.values():  # warm up allocators and caches
            timed(step, 0, 3)
        seconds = {name: [] for name in contenders}
        peaks = []
        for round_ in range(args.rounds):
            peaks.append(peak_gflops())
            for name, (step, _) in contenders.items():
                seconds[name].append(timed(step, 3 + round_ * args.steps, args.steps))
    peak = max(max(p.values()) for p in peaks)
    work = flops_per_sample(model)
    results = {}
    for name, (_, members) in contenders.items():
        step_s = statistics.median(seconds[name])
        rate = BATCH * members / step_s
        results[name] = {
            "step_seconds_median": step_s,
            "step_seconds": seconds[name],
            "samples_per_second": rate,
            "share_of_fp32_peak": rate * work / (peak * 1e9),
            "minutes_per_paper_task_seed": 432_000 / rate / 60,  # amortised over packed seeds
        }
    report = {
        "benchmark": "train_throughput",
        "what": "paper A config, batch 64 per seed, fp32; blocks of steps alternate between contenders",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "threads": torch.get_num_threads()},
        "torch": torch.__version__,
        "device": args.device,
        "rounds": args.rounds,
        "steps_per_block": args.steps,
        "flops_per_sample": work,
        "fp32_peak_gflops": peak,
        "peak_measurements": peaks,
        "results": results,
        "ratio_posym_over_hf": results["posym"]["samples_per_second"] / results["hf_gptj"]["samples_per_second"],
    }
    report["summary"] = {
        f"{name} samples/s (share of fp32 peak)": f"{r['samples_per_second']:.0f} ({100 * r['share_of_fp32_peak']:.0f} %)" for name, r in results.items()
    } | {"posym / HF": f"{report['ratio_posym_over_hf']:.2f}", "fp32 matmul peak": f"{peak:.0f} GFLOP/s"}
    if args.packed > 1:
        report["summary"][f"{args.packed} packed seeds / HF"] = f"{results[f'posym_packed{args.packed}']['samples_per_second'] / results['hf_gptj']['samples_per_second']:.2f}"
        report["ratio_packed_over_hf"] = results[f"posym_packed{args.packed}"]["samples_per_second"] / results["hf_gptj"]["samples_per_second"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in results.items():
        print(f"{name:>16}: {r['samples_per_second']:7.1f} samples/s  {100 * r['share_of_fp32_peak']:5.1f} % of peak")
    print(f"posym / HF = {report['ratio_posym_over_hf']:.2f}" + (f", packed / HF = {report['ratio_packed_over_hf']:.2f}" if args.packed > 1 else ""))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
