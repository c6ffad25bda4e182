"""Training throughput of paper C's toy model: posym against a plain PyTorch attention-only transformer + AdamW.

The reference is TransformerLens's ``HookedTransformer(attn_only=True, normalization_type="LN")`` as plain
PyTorch writes it: ``nn.Embedding`` plus a learned absolute position table, per layer LayerNorm, one
``nn.Linear`` for q, k, v, the attention written out (scores, causal mask, softmax, pattern × values, as
TransformerLens computes it) and an output ``nn.Linear``, a final LayerNorm and an unembedding ``nn.Linear``;
cross-entropy over every position, ``torch.optim.AdamW`` on every parameter, gradient clipping at 1.0 and
paper C's warmup. posym trains the ``ape_free`` arm (the same function: the JSON records the largest logit
difference with the same weights) through its own ``Trainer`` and objective (``posym.studies.c.training``):

* ``posym``: its eager step (``train.compile: false``); ``posym_compiled``: its compiled step (``train.compile:
  true``), as the workflow trains paper C (``compile: auto`` compiles its 6000 steps);
* ``posym_packed<N>``: N seeds packed into one compiled model, as paper C trains an arm's seeds;
* ``posym_rope_sym``: the ``rope_sym`` arm (rotate-half RoPE and the symmetry penalty, which the reference
  does not compute), compiled: for information.

``--no-compiled`` leaves out ``posym_compiled`` and trains the others eagerly.

Every contender draws its batch each step from paper C's training stream (``random_map_stream`` on the
device), so that the data cost the same; the rates are samples (sequences) per second, every seed's counted,
and shares of this machine's matmul peak in their precision, measured in the same run (a square product and the
model's q, k, v product, the faster; FLOPs: 3 × the forward's matmuls and attention products, causal attention
counted whole). The JSON records the CPU's model and its bf16 units (AVX-512 BF16, AMX), and whether each posym
contender ran its compiled or its eager step (a compiled step that fails to compile goes on eagerly). Blocks of
steps alternate between the contenders within one run, so that a busy machine slows all alike. Issue 28's target:
the compiled step at least twice the reference at each precision. ``--size min`` trains a tiny model on short
sequences, to check the script in seconds.

    python benchmarks/toy_throughput.py [--rounds 4] [--steps 2] [--packed 5] [--no-compiled] [--precisions fp32 bf16] [--size paper|min] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmark_report import PEAK_DTYPES, PEAK_SIDE, best_peak, machine, machine_line, peak_gflops, peak_shapes, rates_summary, timed, write_report
from posym.nn.precision import autocast
from posym.pipeline import config
from posym.studies.c import training
from posym.studies.c.architecture import AttentionOnlyConfig, model_config
from posym.training.trainer import Trainer

HERE = Path(__file__).resolve().parent
#: Paper C's own sizes (the schema's defaults: 2 layers of 4 heads, d_model 128, 64 sequences of 256 tokens).
PAPER_C = config.study_defaults("c")["training"]
#: --size min: a model and batch that check the script in seconds.
MIN_SIZE = {"model": {"d_model": 32, "n_head": 2, "rotary_dim": 16}, "task": {"length": 32}, "train": {"batch_size": 8}, "peak_side": 256}
ARM = "ape_free"
#: Issue 28's target: posym's compiled toy model at least this many times the reference's rate at each precision.
TARGET = 2.0


class Plain(nn.Module):
    """The attention-only transformer with learned positions, in plain PyTorch (TransformerLens's computation)."""

    def __init__(self, c: AttentionOnlyConfig):
        super().__init__()
        d = c.d_model
        self.c = c
        self.wte = nn.Embedding(c.vocab_size, d)
        self.wpe = nn.Parameter(torch.randn(c.max_len, d) * c.init_std)
        self.ln = nn.ModuleList(nn.LayerNorm(d, eps=c.layer_norm_epsilon) for _ in range(c.n_layer))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(c.n_layer))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(d, eps=c.layer_norm_epsilon)
        self.unembed = nn.Linear(d, c.vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        c, (B, T) = self.c, ids.shape
        x = self.wte(ids) + self.wpe[:T]
        future = torch.ones(T, T, dtype=torch.bool, device=ids.device).triu(1)
        for ln, qkv, out in zip(self.ln, self.qkv, self.out):
            q, k, v = qkv(ln(x)).view(B, T, 3, c.n_head, c.head_dim).unbind(2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            scores = (q @ k.transpose(-1, -2) / math.sqrt(c.head_dim)).masked_fill(future, float("-inf"))
            z = scores.softmax(-1) @ v
            x = x + out(z.transpose(1, 2).reshape(B, T, c.d_model))
        return self.unembed(self.ln_f(x))

    @torch.no_grad()
    def load_posym(self, model, m: int = 0) -> "Plain":
        """Copy member m of a posym AttentionOnly model with learned positions."""
        self.wte.weight.copy_(model.wte[m])
        self.wpe.copy_(model.position.table[m])
        for layer, block in enumerate(model.blocks):
            self.ln[layer].weight.copy_(block.ln_weight[m])
            self.ln[layer].bias.copy_(block.ln_bias[m])
            self.qkv[layer].weight.copy_(block.qkv_weight[m])
            self.qkv[layer].bias.copy_(block.qkv_bias[m])
            self.out[layer].weight.copy_(block.out_weight[m])
            self.out[layer].bias.copy_(block.out_bias[m])
        self.ln_f.weight.copy_(model.ln_f_weight[m])
        self.ln_f.bias.copy_(model.ln_f_bias[m])
        self.unembed.weight.copy_(model.unembed_weight[m])
        self.unembed.bias.copy_(model.unembed_bias[m])
        return self


def flops_per_sample(c: AttentionOnlyConfig, tokens: int) -> float:
    """Training FLOPs of one sequence of ``tokens`` inputs: 3 × (q, k, v, out and unembedding matmuls per token,
    scores and pattern × values over every query-key pair)."""
    d = c.d_model
    forward = 2 * tokens * (c.n_layer * 4 * d * d + d * c.vocab_size) + c.n_layer * 4 * tokens * tokens * d
    return 3.0 * forward


def plain_stepper(section: dict, precision: str):
    """The reference trained as paper C's objective trains (CE over every next token, AdamW, clipping, warmup)."""
    c = model_config(section["task"]["vocab_size"], training.arm_model_settings(section, ARM))
    torch.manual_seed(0)
    plain = Plain(c).train()
    train, task = section["train"], section["task"]
    optimizer = torch.optim.AdamW(plain.parameters(), lr=train["learning_rate"], betas=tuple(train["betas"]), weight_decay=train["weight_decay"])

    def step(k: int) -> None:
        keys = training.stream_keys([[section["data_seed"], 0, k]], torch.device("cpu"))
        ids = training.random_map_stream(train["batch_size"], task["length"], task["vocab_size"], task["map_probability"], keys)["tokens"][0]
        for group in optimizer.param_groups:
            group["lr"] = training.learning_rate(k, train)
        with autocast("cpu", precision):
            logits = plain(ids[:, :-1])
        F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten()).backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), train["max_grad_norm"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def same_function_difference(section: dict) -> float:
    """Largest |logit difference| between posym's ape_free model and the reference holding its weights."""
    c = model_config(section["task"]["vocab_size"], training.arm_model_settings(section, ARM))
    model = c.build(1).initialise([0]).eval()
    ids = torch.randint(0, c.vocab_size, (4, section["task"]["length"] - 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return float((model(ids) - Plain(c).load_posym(model)(ids)).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="steps per timed block")
    parser.add_argument("--packed", type=int, default=5, help="seeds packed into one posym model (0: skip)")
    parser.add_argument("--no-compiled", dest="compiled", action="store_false", help="posym's eager step only (train.compile: false)")
    parser.add_argument("--precisions", nargs="+", default=list(PEAK_DTYPES), choices=list(PEAK_DTYPES))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--size", default="paper", choices=["paper", "min"], help="paper C's toy model, or a tiny one that checks the script in seconds")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "toy_throughput.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    began, about = time.perf_counter(), machine("cpu")
    minimal = args.size == "min"
    overrides = MIN_SIZE if minimal else {}
    section = config.deep_merge(PAPER_C, {key: overrides[key] for key in ("model", "task", "train") if key in overrides})
    section["train"]["device"] = "cpu"
    c = model_config(section["task"]["vocab_size"], training.arm_model_settings(section, ARM))
    batch, tokens = section["train"]["batch_size"], section["task"]["length"] - 1
    side = MIN_SIZE["peak_side"] if minimal else PEAK_SIDE["cpu"]
    shapes = peak_shapes(side, "qkv", (batch * tokens, c.d_model, 3 * c.d_model))
    difference = same_function_difference(section)

    with tempfile.TemporaryDirectory() as tmp:
        contenders, trainers = {}, {}  # name -> (step, members, precision); name -> posym's trainer

        def posym(name: str, arm: str, members: int, precision: str, compile: bool) -> None:
            arm_section = {**section, "train": {**section["train"], "precision": precision, "compile": compile}}
            seeds = list(range(members))
            trainer = Trainer(training.ArmObjective(arm_section, arm, seeds, [Path(tmp) / name / f"seed{s}" for s in seeds]))
            contenders[name], trainers[name] = (trainer.step, members, precision), trainer

        for precision in args.precisions:
            suffix = "" if precision == "fp32" else f"_{precision}"
            posym(f"posym{suffix}", ARM, 1, precision, False)
            if args.compiled:
                posym(f"posym_compiled{suffix}", ARM, 1, precision, True)
            contenders[f"plain{suffix}"] = (plain_stepper(section, precision), 1, precision)
            if args.packed > 1:  # as the workflow trains an arm's seeds (compile: auto compiles its 6000 steps)
                posym(f"posym_packed{args.packed}{suffix}", ARM, args.packed, precision, args.compiled)
            posym(f"posym_rope_sym{suffix}", "rope_sym", 1, precision, args.compiled)
        first_steps = {}
        for name, (step, _, _) in contenders.items():  # warm up allocators and caches; a compiled step compiles
            first_steps[name] = timed(step, 0, 2) * 2
            print(f"first 2 steps of {name}: {first_steps[name]:.1f} s", flush=True)
        seconds = {name: [] for name in contenders}
        peaks = {precision: [] for precision in args.precisions}
        for round_ in range(args.rounds):
            for precision in args.precisions:
                peaks[precision].append(peak_gflops(PEAK_DTYPES[precision], torch.device("cpu"), shapes))
            for name, (step, _, _) in contenders.items():
                seconds[name].append(timed(step, 2 + round_ * args.steps, args.steps))
            print(f"round {round_ + 1}/{args.rounds}: " + "  ".join(f"{n} {s[-1]:.3f}s" for n, s in seconds.items()), flush=True)
        # Read after the timed steps: a compiled step that failed to compile went on eagerly and was timed so.
        steps = {name: "torch" if name not in trainers else "compiled" if trainers[name].compiled is not None else "eager" for name in contenders}

    peak = best_peak(peaks)
    work = flops_per_sample(c, tokens)
    results = {}
    for name, (_, members, precision) in contenders.items():
        rates = [batch * members / s for s in seconds[name]]
        rate = statistics.median(rates)
        results[name] = {
            "precision": precision,
            "step": steps[name],  # posym's compiled or eager step, or torch's
            "members": members,
            "batch_per_member": batch,
            "step_seconds_median": statistics.median(seconds[name]),
            "step_seconds": seconds[name],
            "samples_per_second": rate,  # every seed's sequences
            "samples_per_second_per_block": rates,
            "share_of_peak": rate * work / (peak[precision] * 1e9),  # of the matmul peak in its precision
            "first_2_steps_seconds": first_steps[name],  # a compiled step compiles in them
        }
    ratios = {}
    for name, r in results.items():
        if name.startswith("plain"):
            continue
        reference = "plain" + ("" if r["precision"] == "fp32" else f"_{r['precision']}")
        # the median over rounds of the ratio of the two contenders' blocks in the same round
        each = [a / b for a, b in zip(r["samples_per_second_per_block"], results[reference]["samples_per_second_per_block"])]
        ratios[f"{name} / plain at {r['precision']}"] = statistics.median(each)
    held = "posym_compiled" if args.compiled else "posym"
    target = {p: ratios[f"{held}{'' if p == 'fp32' else '_' + p} / plain at {p}"] for p in args.precisions}
    met = all(value >= TARGET for value in target.values())
    minutes = (time.perf_counter() - began) / 60
    report = {
        "benchmark": "toy_throughput",
        "what": ("paper C toy model" if not minimal else "tiny toy model (--size min)")
        + f" ({c.n_layer} layers x {c.n_head} heads, d_model {c.d_model}), batch {batch} x {tokens} tokens per seed, arm {ARM}; blocks of steps alternate between contenders",
        "size": args.size,
        "machine": {**about, "load_average_at_end": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "device": "cpu",
        "rounds": args.rounds,
        "steps_per_block": args.steps,
        "minutes": minutes,
        "flops_per_sample": work,
        "peak_gflops": peak,
        "peak_measurements": peaks,
        "same_function_max_logit_difference": difference,
        "results": results,
        "ratios": ratios,
        "target": f"{held}: posym's toy model at least {TARGET:g}x the plain reference at each precision (issue 28)",
        "target_met": met,
    }
    report["summary"] = (
        rates_summary(results, ratios, peak)
        | {
            f"target: {held} / plain >= {TARGET:g}": ("met" if met else "not met") + " (" + ", ".join(f"{v:.2f} at {p}" for p, v in target.items()) + ")",
            "largest logit difference, same weights": f"{difference:.1e}",
            "machine": machine_line(about),
            "steps": ", ".join(f"{n} {s}" for n, s in steps.items() if s != "torch"),
            "first 2 steps (compiling included)": ", ".join(f"{n} {s:.0f} s" for n, s in first_steps.items()),
            "wall time": f"{minutes:.1f} min",
        }
    )
    write_report(report, args.out)


if __name__ == "__main__":
    main()
