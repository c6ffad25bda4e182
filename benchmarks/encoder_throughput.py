"""Training throughput of paper B's encoder: posym against torch.nn.TransformerEncoder + AdamW.

The reference is the authors' model as plain PyTorch writes it: nn.Embedding plus the fixed
sinusoidal encoding, nn.TransformerEncoder of pre-LN nn.TransformerEncoderLayer (ReLU, dropout,
batch_first), the mean over positions, an nn.Linear classifier, torch.optim.AdamW with the
paper's settings and cross-entropy ignoring label 0 (spec §B3). Both train on the count task
(whose label 0 is ignored), in training mode with dropout, one optimizer step per batch and the
paper's warmup-cosine learning rate, under float32 and under bfloat16 autocast (posym's
``precision: bf16``). Blocks of steps alternate between the contenders within one run, so that a
busy machine slows all alike; the results are samples per second and their ratios (posym ÷ reference).

posym trains through its own ``Trainer`` (batched member axis, MemberDropout, AdamW):

* ``posym`` — the encoder set to the reference's function (kv_source residual, sinusoidal input
  encoding, no padding mask, no final LayerNorm), with its eager step (``train.compile: false``). With the
  same weights and no dropout its logits match the reference's (the JSON records the largest difference).
* ``posym_compiled`` — the same with its compiled step (``train.compile: true``), as the workflow trains
  paper B (``compile: auto`` compiles its 13,700 steps);
* ``posym_authors`` — the model as posym trains paper B by default (keys and values from the
  embeddings, RoPE plus additive sinusoid), which the reference cannot express, compiled: for information.
* ``posym_packed<N>`` — N seeds of the ``posym`` model packed into one, compiled, the same batch per seed;
  its rate counts every seed's samples.

``--no-compiled`` leaves out ``posym_compiled`` and trains the others eagerly. Each rate is also given as a share
of this machine's matmul peak in its precision, measured in the same run (a square product and the model's FFN
product, the faster), on the FLOPs of the reference's formulation (3 × the forward's matmuls and attention
products); the JSON records the CPU's model and its bf16 units (AVX-512 BF16, AMX), and whether each posym
contender ran its compiled or its eager step (a compiled step that fails to compile goes on eagerly). Issue 28's
target: the compiled step at least twice the reference at each precision. ``--size min`` trains a tiny encoder
(tests/configs/b.yaml's) on small batches, to check the script in seconds.

One more difference is the reference's own: nn.TransformerEncoderLayer also drops out the FFN's
hidden units, which neither the authors' encoder nor posym's has. The profile of one step per
contender (``profile_ms_per_step``: the operators taking the most time; ``dropout_masks_ms_per_step``:
torch's dropout masks by the shape they cover) shows what that and the rest cost.

Each block also records the seconds the process spent in the kernel and its page faults. posym's trainer keeps
the memory a CPU step frees for the next step (:mod:`posym.training.host_memory`: no mmap, no heap trimming, a
setting of the whole process), so the reference, timed in the same process, runs with it too; before it, glibc
unmapped the attention patterns (64 MiB a layer at batch 64) when freed and the next step faulted them in again.

    python benchmarks/encoder_throughput.py [--rounds 4] [--steps 1] [--batch 64] [--packed 4] [--no-compiled] [--size paper|min] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmark_report import PEAK_DTYPES, PEAK_SIDE, best_peak, machine, machine_line, peak_gflops, peak_shapes, rates_summary, write_report
from posym.pipeline import config
from posym.nn.precision import autocast
from posym.studies.b.architecture import EncoderConfig, model_config
from posym.studies.b.tasks import get
from posym.studies.b.tasks.words import VOCABULARY
from posym.training import host_memory
from posym.training.splits import Run, SplitObjective, TrainConfig, learning_rate
from posym.training.trainer import Trainer

PAPER_B = config.study_defaults("b")  # the paper's model and optimiser settings

HERE = Path(__file__).resolve().parent
TASK = "count"  # its label 0 is ignored, as the reference's ignore_index=0
SAME_FUNCTION = {"kv_source": "residual", "position": "sinusoidal", "padding_mask": False, "final_layer_norm": False}
#: --size min checks the script, not the machine: tests/configs/b.yaml's encoder, small batches and products.
MIN_SIZE = {"model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_mlp": 64}, "batch": 8, "train_samples": 256, "peak_side": 256}
#: Issue 28's target: posym's compiled encoder at least this many times the reference's rate at each precision.
TARGET = 2.0


# --------------------------------------------------------------------------- the reference


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed encoding of "Attention is all you need": sin on even dimensions, cos on odd ones."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    frequencies = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * frequencies)
    table[:, 1::2] = torch.cos(position * frequencies)
    return table


class Reference(nn.Module):
    """The authors' encoder in plain PyTorch (without their kv_source quirk)."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.register_buffer("position", sinusoidal_table(c.max_len, c.d_model), persistent=False)
        layer = nn.TransformerEncoderLayer(
            c.d_model, c.n_head, c.d_mlp, c.dropout, activation="relu", layer_norm_eps=c.layer_norm_epsilon,
            batch_first=True, norm_first=True,
        )  # fmt: skip
        # The nested-tensor fast path needs a padding mask and post-LN: off, to spare the warning.
        self.encoder = nn.TransformerEncoder(layer, c.n_layer, enable_nested_tensor=False)
        self.classifier = nn.Linear(c.d_model, c.vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids) + self.position[: ids.shape[1]]
        return self.classifier(self.encoder(x).mean(dim=1))

    @torch.no_grad()
    def load_posym(self, model, m: int = 0) -> "Reference":
        """Copy member m of a posym Encoder of the same function."""
        self.embedding.weight.copy_(model.wte[m])
        for layer, block in zip(self.encoder.layers, model.blocks):
            layer.self_attn.in_proj_weight.copy_(torch.cat([block.q_weight[m], block.kv_weight[m]]))  # rows q, k, v
            layer.self_attn.in_proj_bias.copy_(torch.cat([block.q_bias[m], block.kv_bias[m]]))
            layer.self_attn.out_proj.weight.copy_(block.out_weight[m])
            layer.self_attn.out_proj.bias.copy_(block.out_bias[m])
            layer.linear1.weight.copy_(block.fc1_weight[m])
            layer.linear1.bias.copy_(block.fc1_bias[m])
            layer.linear2.weight.copy_(block.fc2_weight[m])
            layer.linear2.bias.copy_(block.fc2_bias[m])
            for norm, name in ((layer.norm1, "ln1"), (layer.norm2, "ln2")):
                norm.weight.copy_(getattr(block, f"{name}_weight")[m])
                norm.bias.copy_(getattr(block, f"{name}_bias")[m])
        self.classifier.weight.copy_(model.unembed_weight[m])
        self.classifier.bias.copy_(model.unembed_bias[m])
        return self


def reference_stepper(model: EncoderConfig, train: TrainConfig, data, batch: int):
    """The reference with torch AdamW (as the authors' ``AdamW(model.parameters(), ...)``), the same schedule."""
    torch.manual_seed(0)
    reference = Reference(model).train()
    optimizer = torch.optim.AdamW(reference.parameters(), lr=train.learning_rate, betas=train.betas, weight_decay=train.weight_decay)
    tokens = torch.as_tensor(data.tokens, dtype=torch.long)
    labels = torch.as_tensor(data.labels, dtype=torch.long)
    generator = torch.Generator().manual_seed(0)

    def step(k: int) -> None:
        index = torch.randint(0, len(labels), (batch,), generator=generator)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(k, train)
        with autocast("cpu", train.precision):
            loss = F.cross_entropy(reference(tokens[index]), labels[index], ignore_index=0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


# --------------------------------------------------------------------------- posym


def flops_per_sample(c: EncoderConfig) -> float:
    """Training FLOPs of one sample: 3 × the forward's matmuls (q, k, v, out and the FFN at every position, the
    classifier on the pooled vector) and attention products (scores and pattern × values)."""
    d, f, T, L = c.d_model, c.d_mlp, c.max_len, c.n_layer
    forward = 2 * T * L * (4 * d * d + 2 * d * f) + L * 4 * T * T * d + 2 * d * c.vocab_size
    return 3.0 * forward


def posym_trainer(members: int, model: EncoderConfig, train: TrainConfig, data, test, tmp: Path) -> Trainer:
    runs = [Run(seed=m, train=data, test=test, out=tmp / f"m{m}") for m in range(members)]
    return Trainer(SplitObjective(runs, model, train, VOCABULARY.tokens))


def same_function_difference(model: EncoderConfig, ids: torch.Tensor) -> float:
    """Largest |logit difference| between posym's encoder and the reference holding its weights (no dropout)."""
    encoder = model.build(1).initialise([0]).eval()
    reference = Reference(model).load_posym(encoder).eval()
    with torch.no_grad():
        return float((encoder(ids) - reference(ids)).abs().max())


# --------------------------------------------------------------------------- timing


def timed(step, first: int, count: int) -> tuple[float, float, float]:
    """Per step: wall seconds, seconds this process spent in the kernel, and page faults (mostly the
    kernel zeroing fresh pages for tensors that the allocator took from it anew)."""
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for k in range(first, first + count):
        step(k)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return wall / count, (after.ru_stime - before.ru_stime) / count, (after.ru_minflt - before.ru_minflt) / count


def profile_step(step, first: int, top: int) -> tuple[dict[str, float], dict[str, float]]:
    """Milliseconds in one step (torch.profiler) of the operators with the most self time, plus their sum;
    and of the dropout masks (``aten::bernoulli_``, torch's dropout) by the shape they cover."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step(first)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    operators = {e.key: round(e.self_cpu_time_total / 1e3, 1) for e in events[:top]}
    operators["(all operators)"] = round(sum(e.self_cpu_time_total for e in events) / 1e3, 1)
    masks = {
        "x".join(map(str, e.input_shapes[0])): round(e.self_cpu_time_total / 1e3, 1)
        for e in prof.key_averages(group_by_input_shape=True)
        if e.key == "aten::bernoulli_"
    }
    return operators, masks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1, help="steps per timed block")
    parser.add_argument("--batch", type=int, default=None, help="samples (of 128 tokens) per step, per seed when packed (default 64; --size min: 8)")
    parser.add_argument("--packed", type=int, default=4, help="seeds packed into one posym model (0: skip)")
    parser.add_argument("--no-compiled", dest="compiled", action="store_false", help="posym's eager step only (train.compile: false)")
    parser.add_argument("--precisions", nargs="+", default=list(PEAK_DTYPES), choices=list(PEAK_DTYPES))
    parser.add_argument("--profile-top", type=int, default=8, help="operators listed per profiled contender (0: no profile)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--size", default="paper", choices=["paper", "min"], help="paper B's encoder, or a tiny one that checks the script in seconds")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "encoder_throughput.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    began, about = time.perf_counter(), machine("cpu")
    minimal = args.size == "min"
    batch = args.batch or (MIN_SIZE["batch"] if minimal else 64)

    task = get(TASK)
    authors = model_config(len(VOCABULARY), {**PAPER_B["model"], **(MIN_SIZE["model"] if minimal else {})})
    same = replace(authors, **SAME_FUNCTION)
    seed = PAPER_B["data"]["seed_offset"]
    data, _ = task.generate("train", MIN_SIZE["train_samples"] if minimal else max(4096, 4 * batch), seed)
    test, _ = task.generate("test", 128, seed)
    difference = same_function_difference(same, torch.as_tensor(test.tokens[:16], dtype=torch.long))
    side = MIN_SIZE["peak_side"] if minimal else PEAK_SIDE["cpu"]
    shapes = peak_shapes(side, "ffn", (batch * same.max_len, same.d_model, same.d_mlp))

    references = {}  # precision -> the reference's name
    with tempfile.TemporaryDirectory() as tmp:
        contenders, trainers = {}, {}  # name -> (step, members, precision); name -> posym's trainer

        def posym(name: str, members: int, model: EncoderConfig, train: TrainConfig) -> None:
            trainers[name] = posym_trainer(members, model, train, data, test, Path(tmp) / name)
            contenders[name] = (trainers[name].step, members, train.precision)

        for precision in args.precisions:
            eager, fast = (
                TrainConfig.from_dict({**PAPER_B["train"], "batch_size": batch, "device": "cpu", "precision": precision, "compile": compile})
                for compile in (False, True)
            )  # fmt: skip
            usual = fast if args.compiled else eager  # how the workflow trains paper B (compile: auto, 13,700 steps)
            suffix = "" if precision == "fp32" else f"_{precision}"
            references[precision] = f"torch_encoder{suffix}"
            posym(f"posym{suffix}", 1, same, eager)
            if args.compiled:
                posym(f"posym_compiled{suffix}", 1, same, fast)
            contenders[f"torch_encoder{suffix}"] = (reference_stepper(same, eager, data, batch), 1, precision)
            posym(f"posym_authors{suffix}", 1, authors, usual)
            if args.packed > 1:
                posym(f"posym_packed{args.packed}{suffix}", args.packed, same, usual)
        first_steps = {}
        for name, (step, _, _) in contenders.items():  # warm up allocators and caches; a compiled step compiles
            first_steps[name] = timed(step, 0, 1)[0]
            print(f"first step of {name}: {first_steps[name]:.1f} s", flush=True)
        seconds, kernel, faults = ({name: [] for name in contenders} for _ in range(3))
        peaks = {precision: [] for precision in args.precisions}
        for round_ in range(args.rounds):
            for precision in args.precisions:
                peaks[precision].append(peak_gflops(PEAK_DTYPES[precision], torch.device("cpu"), shapes))
            for name, (step, _, _) in contenders.items():
                wall, system, faulted = timed(step, 1 + round_ * args.steps, args.steps)
                seconds[name].append(wall)
                kernel[name].append(system)
                faults[name].append(faulted)
            print(f"round {round_ + 1}/{args.rounds}: " + "  ".join(f"{n} {s[-1]:.2f}s" for n, s in seconds.items()), flush=True)
        # Read after the timed steps: a compiled step that failed to compile went on eagerly and was timed so.
        steps = {name: "torch" if name not in trainers else "compiled" if trainers[name].compiled is not None else "eager" for name in contenders}
        first = 1 + args.rounds * args.steps
        profiled = {  # a packed step is the single one's work times the seeds; not profiled, to save time
            name: profile_step(step, first, args.profile_top) for name, (step, members, _) in contenders.items() if members == 1 and args.profile_top
        }

    peak = best_peak(peaks)
    work = flops_per_sample(same)
    results = {}
    for name, (_, members, precision) in contenders.items():
        rates = [batch * members / s for s in seconds[name]]
        results[name] = {
            "precision": precision,
            "step": steps[name],  # posym's compiled or eager step, or torch's
            "members": members,
            "batch_per_member": batch,
            "step_seconds_median": statistics.median(seconds[name]),
            "step_seconds": seconds[name],
            "samples_per_second": statistics.median(rates),  # every seed's samples
            "samples_per_second_per_block": rates,
            "share_of_peak": statistics.median(rates) * work / (peak[precision] * 1e9),  # of the matmul peak in its precision
            "first_step_seconds": first_steps[name],  # a compiled step compiles in it
            "kernel_seconds_per_step_median": statistics.median(kernel[name]),  # both threads together
            "page_faults_per_step_median": statistics.median(faults[name]),
            "hours_per_paper_run": PAPER_B["train"]["steps"] * PAPER_B["train"]["batch_size"] / statistics.median(rates) / 3600,
        }
        if name in profiled:
            results[name]["profile_ms_per_step"], results[name]["dropout_masks_ms_per_step"] = profiled[name]

    def ratio(name: str, reference: str) -> tuple[float, list[float]]:
        """The median over rounds of the ratio of the rates of two contenders' blocks in the same round."""
        each = [a / b for a, b in zip(results[name]["samples_per_second_per_block"], results[reference]["samples_per_second_per_block"])]
        return statistics.median(each), each

    ratios, per_round = {}, {}
    for name, r in results.items():
        if name in references.values():
            continue
        pairs = [references[r["precision"]]] + (["torch_encoder"] if r["precision"] != "fp32" and "fp32" in references else [])
        for reference in pairs:
            key = f"{name} / torch at {results[reference]['precision']}"
            ratios[key], per_round[key] = ratio(name, reference)
    held = "posym_compiled" if args.compiled else "posym"
    target = {precision: ratios[f"{held}{'' if precision == 'fp32' else f'_{precision}'} / torch at {precision}"] for precision in args.precisions}
    met = all(value >= TARGET for value in target.values())
    dropped = {f"{batch}x{same.n_head}x{same.max_len}x{same.max_len}": "attention pattern", f"{batch}x{same.max_len}x{same.d_mlp}": "FFN hidden (posym: none)"}
    ffn_dropout = {
        precision: (results[name]["dropout_masks_ms_per_step"].get(f"{batch}x{same.max_len}x{same.d_mlp}", 0.0), results[name]["profile_ms_per_step"]["(all operators)"])
        for precision, name in references.items()
        if "dropout_masks_ms_per_step" in results[name]
    }
    minutes = (time.perf_counter() - began) / 60
    report = {
        "benchmark": "encoder_throughput",
        "what": ("paper B encoder (spec §B3)" if not minimal else "tiny encoder (--size min)")
        + f", batch {batch} x {same.max_len} tokens per seed, {TASK} task; blocks of steps alternate between contenders",
        "size": args.size,
        "machine": {**about, "load_average_at_end": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "torch": torch.__version__,
        "device": "cpu",
        "batch": batch,
        "sequence_length": same.max_len,
        "rounds": args.rounds,
        "steps_per_block": args.steps,
        "keep_freed_memory": host_memory.keep_freed_memory(),  # as posym's trainer set it, for every contender
        "minutes": minutes,
        "flops_per_sample": work,
        "peak_gflops": peak,
        "peak_measurements": peaks,
        "models": {
            "posym, torch_encoder": {**{k: getattr(same, k) for k in SAME_FUNCTION}, "dropout": same.dropout},
            "posym_authors": {k: getattr(authors, k) for k in SAME_FUNCTION},
            "torch_encoder's dropout masks by shape": dropped,
        },
        "same_function_max_logit_difference": difference,
        "results": results,
        "ratios": ratios,
        "ratios_per_round": per_round,
        "target": f"{held}: posym's encoder at least {TARGET:g}x the reference computing the same function at each precision (issue 28)",
        "target_met": met,
    }
    report["summary"] = (
        rates_summary(results, ratios, peak)
        | {
            f"target: {held} / torch >= {TARGET:g}, same function": ("met" if met else "not met") + " (" + ", ".join(f"{v:.2f} at {p}" for p, v in target.items()) + ")",
            "largest logit difference, same weights, no dropout": f"{difference:.1e}",
        }
        | {f"torch's FFN-hidden dropout (posym has none), {p}": f"{a:.0f} of {b:.0f} ms per step" for p, (a, b) in ffn_dropout.items()}
        | {
            f"seconds in the kernel per step (page faults), {precision}": ", ".join(
                f"{name} {r['kernel_seconds_per_step_median']:.1f} ({r['page_faults_per_step_median'] / 1e6:.1f} M)"
                for name, r in results.items()
                if r["precision"] == precision
            )
            for precision in args.precisions
        }
        | {
            "machine": machine_line(about),
            "steps": ", ".join(f"{n} {s}" for n, s in steps.items() if s != "torch"),
            "first step (compiling included)": ", ".join(f"{n} {s:.0f} s" for n, s in first_steps.items()),
            "batch, rounds x steps per block": f"{batch} x {same.max_len} tokens, {args.rounds} x {args.steps}",
            "malloc": "freed memory kept (posym.training.host_memory)" if host_memory.keep_freed_memory() else "glibc defaults",
            "wall time": f"{minutes:.1f} min",
        }
    )
    write_report(report, args.out)


if __name__ == "__main__":
    main()
