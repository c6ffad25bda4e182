"""Training throughput of paper B's encoder: posym against torch.nn.TransformerEncoder + AdamW.

The reference is the authors' model as plain PyTorch writes it: nn.Embedding plus the fixed
sinusoidal encoding, nn.TransformerEncoder of pre-LN nn.TransformerEncoderLayer (ReLU, dropout,
batch_first), the mean over positions, an nn.Linear classifier, torch.optim.AdamW with the
paper's settings and cross-entropy ignoring label 0 (spec §B3). Both train on the count task
(whose label 0 is ignored), in training mode with dropout, one optimizer step per batch and the
paper's warmup-cosine learning rate, under float32 and under bfloat16 autocast (posym's
``precision: bf16``). Blocks of steps alternate between the contenders within one run, so that a
busy machine slows all alike; the results are ratios of samples per second (posym ÷ reference).

posym trains through its own ``Trainer`` (batched member axis, MemberDropout, fused AdamW):

* ``posym`` — the encoder set to the reference's function (kv_source residual, sinusoidal input
  encoding, no padding mask, no final LayerNorm). With the same weights and no dropout its logits
  match the reference's (the JSON records the largest difference).
* ``posym_authors`` — the model as posym trains paper B by default (keys and values from the
  embeddings, RoPE plus additive sinusoid), which the reference cannot express: for information.
* ``posym_packed<N>`` — N seeds of the ``posym`` model packed into one, the same batch per seed;
  its rate counts every seed's samples.

One more difference is the reference's own: nn.TransformerEncoderLayer also drops out the FFN's
hidden units, which neither the authors' encoder nor posym's has. The profile of one step per
contender (``profile_ms_per_step``: the operators taking the most time; ``dropout_masks_ms_per_step``:
torch's dropout masks by the shape they cover) shows what that and the rest cost.

Each block also records the seconds the process spent in the kernel and its page faults: with
glibc's default malloc, blocks over 32 MiB (the attention patterns and what autograd keeps of
them) are unmapped when freed and faulted in, zeroed, at the next step. ``--keep-freed-memory``
keeps them in the heap instead, to measure what that costs.

    python benchmarks/encoder_throughput.py [--rounds 4] [--steps 1] [--batch 64] [--packed 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import math
import os
import platform
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmark_report import write_report
from posym.pipeline import config
from posym.nn.precision import PRECISIONS, autocast
from posym.studies.b.architecture import EncoderConfig, model_config
from posym.studies.b.tasks import get
from posym.studies.b.tasks.words import VOCABULARY
from posym.training.splits import Run, SplitObjective, TrainConfig, learning_rate
from posym.training.trainer import Trainer

PAPER_B = config.study_defaults("b")  # the paper's model and optimiser settings

HERE = Path(__file__).resolve().parent
TASK = "count"  # its label 0 is ignored, as the reference's ignore_index=0
SAME_FUNCTION = {"kv_source": "residual", "position": "sinusoidal", "padding_mask": False, "final_layer_norm": False}


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


def keep_freed_memory() -> None:
    """Make glibc's malloc serve every block from its heap and never hand freed memory back to the kernel.

    By default a block over 32 MiB (an attention pattern of batch 64 is 64 MiB) is mmap-ed and unmapped
    when freed, so every step faults its pages in again and the kernel zeroes them.
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
    if not (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, -1)):  # -1: SIZE_MAX, never trim
        raise RuntimeError("mallopt failed")


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
    parser.add_argument("--batch", type=int, default=64, help="samples (of 128 tokens) per step, per seed when packed")
    parser.add_argument("--packed", type=int, default=4, help="seeds packed into one posym model (0: skip)")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    parser.add_argument("--profile-top", type=int, default=8, help="operators listed per profiled contender (0: no profile)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--keep-freed-memory", action="store_true", help="glibc malloc: no mmap, no trimming (keep_freed_memory); default: as posym trains"
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=HERE / "results" / "encoder_throughput.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.keep_freed_memory:
        keep_freed_memory()
    began, load_before = time.perf_counter(), os.getloadavg()

    task = get(TASK)
    authors = model_config(len(VOCABULARY), PAPER_B["model"])
    same = replace(authors, **SAME_FUNCTION)
    seed = PAPER_B["data"]["seed_offset"]
    data, _ = task.generate("train", max(4096, 4 * args.batch), seed)
    test, _ = task.generate("test", 128, seed)
    difference = same_function_difference(same, torch.as_tensor(test.tokens[:16], dtype=torch.long))

    references = {}  # precision -> the reference's name
    with tempfile.TemporaryDirectory() as tmp:
        contenders = {}  # name -> (step, members, precision)
        for precision in args.precisions:
            train = TrainConfig.from_dict({**PAPER_B["train"], "batch_size": args.batch, "device": "cpu", "precision": precision})
            suffix = "" if precision == "fp32" else f"_{precision}"
            where = Path(tmp) / precision
            references[precision] = f"torch_encoder{suffix}"
            contenders[f"posym{suffix}"] = (posym_trainer(1, same, train, data, test, where).step, 1, precision)
            contenders[f"torch_encoder{suffix}"] = (reference_stepper(same, train, data, args.batch), 1, precision)
            contenders[f"posym_authors{suffix}"] = (posym_trainer(1, authors, train, data, test, where).step, 1, precision)
            if args.packed > 1:
                trainer = posym_trainer(args.packed, same, train, data, test, where)
                contenders[f"posym_packed{args.packed}{suffix}"] = (trainer.step, args.packed, precision)
        for step, _, _ in contenders.values():  # warm up allocators and caches
            timed(step, 0, 1)
        seconds, kernel, faults = ({name: [] for name in contenders} for _ in range(3))
        for round_ in range(args.rounds):
            for name, (step, _, _) in contenders.items():
                wall, system, faulted = timed(step, 1 + round_ * args.steps, args.steps)
                seconds[name].append(wall)
                kernel[name].append(system)
                faults[name].append(faulted)
            print(f"round {round_ + 1}/{args.rounds}: " + "  ".join(f"{n} {s[-1]:.2f}s" for n, s in seconds.items()), flush=True)
        first = 1 + args.rounds * args.steps
        profiled = {  # a packed step is the single one's work times the seeds; not profiled, to save time
            name: profile_step(step, first, args.profile_top) for name, (step, members, _) in contenders.items() if members == 1 and args.profile_top
        }

    results = {}
    for name, (_, members, precision) in contenders.items():
        rates = [args.batch * members / s for s in seconds[name]]
        results[name] = {
            "precision": precision,
            "members": members,
            "step_seconds_median": statistics.median(seconds[name]),
            "step_seconds": seconds[name],
            "samples_per_second": statistics.median(rates),  # every seed's samples
            "samples_per_second_per_block": rates,
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
    target = {precision: ratios[f"{'posym' if precision == 'fp32' else f'posym_{precision}'} / torch at {precision}"] for precision in args.precisions}
    met = all(value >= 1.0 for value in target.values())
    shapes = {f"{args.batch}x{same.n_head}x{same.max_len}x{same.max_len}": "attention pattern", f"{args.batch}x{same.max_len}x{same.d_mlp}": "FFN hidden (posym: none)"}
    ffn_dropout = {
        precision: (results[name]["dropout_masks_ms_per_step"].get(f"{args.batch}x{same.max_len}x{same.d_mlp}", 0.0), results[name]["profile_ms_per_step"]["(all operators)"])
        for precision, name in references.items()
        if "dropout_masks_ms_per_step" in results[name]
    }
    minutes = (time.perf_counter() - began) / 60
    report = {
        "benchmark": "encoder_throughput",
        "what": f"paper B encoder (spec §B3), batch {args.batch} x {same.max_len} tokens per seed, {TASK} task; blocks of steps alternate between contenders",
        "machine": {
            "platform": platform.platform(),
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "load average 1/5/15 min at start": " ".join(f"{x:.2f}" for x in load_before),
            "at end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "torch": torch.__version__,
        },
        "torch": torch.__version__,
        "device": "cpu",
        "batch": args.batch,
        "sequence_length": same.max_len,
        "rounds": args.rounds,
        "steps_per_block": args.steps,
        "keep_freed_memory": args.keep_freed_memory,
        "minutes": minutes,
        "models": {
            "posym, torch_encoder": {**{k: getattr(same, k) for k in SAME_FUNCTION}, "dropout": same.dropout},
            "posym_authors": {k: getattr(authors, k) for k in SAME_FUNCTION},
            "torch_encoder's dropout masks by shape": shapes,
        },
        "same_function_max_logit_difference": difference,
        "results": results,
        "ratios": ratios,
        "ratios_per_round": per_round,
        "target": "posym's encoder at least as fast as the reference computing the same function (ratio >= 1 at each precision)",
        "target_met": met,
    }
    report["summary"] = (
        {f"{name} samples/s ({r['precision']})": f"{r['samples_per_second']:.0f}" for name, r in results.items()}
        | {name: f"{value:.2f}" for name, value in ratios.items()}
        | {
            "target: posym / torch >= 1, same function": ("met" if met else "not met") + " (" + ", ".join(f"{v:.2f} at {p}" for p, v in target.items()) + ")",
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
            "batch, rounds x steps per block": f"{args.batch} x {same.max_len} tokens, {args.rounds} x {args.steps}",
            "malloc": "keeps freed memory (--keep-freed-memory)" if args.keep_freed_memory else "glibc defaults",
            "wall time": f"{minutes:.1f} min",
        }
    )
    write_report(report, args.out)


if __name__ == "__main__":
    main()
