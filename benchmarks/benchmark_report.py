"""What the benchmarks share: the machine they ran on (its CPU model and the bf16 / AMX units PyTorch can use), its
matmul peak in each precision measured in the same run, a clock that waits for a GPU, and writing the report as JSON
for the report page."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

from posym.data.files import write_text
from posym.pipeline.provenance import bf16_units, cpu_flags, cpu_name

#: The precisions compared, each with the dtype its matmul peak is measured in. Named here rather than taken from
#: posym.nn.precision.PRECISIONS, whose keys may grow (a precision resolved per device).
PEAK_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
#: The side of the square product that reaches the peak: 2048 saturates a CPU's cores in a few ms per product; a
#: GPU needs 8192 (about a TFLOP) to fill its streaming multiprocessors.
PEAK_SIDE = {"cpu": 2048, "cuda": 8192}


def rates_summary(results: dict, ratios: dict, peak: dict) -> dict:
    """The summary lines every throughput benchmark opens with: each contender's samples/s and its share of the
    matmul peak in its precision, each ratio, and the peaks measured in the run."""
    return (
        {f"{name} samples/s (share of {r['precision']} peak)": f"{r['samples_per_second']:.0f} ({100 * r['share_of_peak']:.0f} %)" for name, r in results.items()}
        | {name: f"{value:.2f}" for name, value in ratios.items()}
        | {f"{precision} matmul peak": f"{value:.0f} GFLOP/s" for precision, value in peak.items()}
    )


def machine(device: torch.device | str = "cpu") -> dict:
    """The machine a benchmark runs on, read when it starts (after it sets its threads): the device, the CPU's model
    name and its bf16 / AMX flags, the vector code PyTorch chose, threads and the load average."""
    device = torch.device(device)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "torch": torch.__version__,
    }


def machine_line(about: dict) -> str:
    """A summary line of :func:`machine`: the device, its bf16 units and the threads."""
    return f"{about['device']}, bf16 units: {bf16_units(about['cpu_flags'])}, {about['threads']} threads"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels, so that the clock read next includes them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step, first: int, count: int, device: torch.device = torch.device("cpu")) -> float:
    """Seconds per step of ``step(k)`` for k in first … first + count − 1, the device's queue drained before and
    after (the previous contender's kernels are not this one's)."""
    synchronize(device)
    start = time.perf_counter()
    for k in range(first, first + count):
        step(k)
    synchronize(device)
    return (time.perf_counter() - start) / count


def peak_shapes(side: int, name: str, product: tuple[int, int, int]) -> dict[str, tuple[int, int, int]]:
    """The (m, k, n) products a peak is measured on: a square one of ``side`` and the model's own ``product``, named
    by their sizes."""
    return {f"{side}x{side}x{side}": (side, side, side), f"{name} {'x'.join(map(str, product))}": product}


def peak_gflops(dtype: torch.dtype, device: torch.device, shapes: dict[str, tuple[int, int, int]], repeats: int = 20) -> dict[str, float]:
    """Matmul throughput in ``dtype`` on ``device`` for each named (m, k, n) product (:func:`peak_shapes`)."""
    out = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
        for _ in range(3):
            a @ b
        synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        synchronize(device)
        out[name] = 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9
    return out


def best_peak(peaks: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """Each precision's peak: the fastest of its products over the rounds (``peaks``: precision -> one
    :func:`peak_gflops` per round)."""
    return {precision: max(max(p.values()) for p in rounds) for precision, rounds in peaks.items()}


def write_report(report: dict, out: Path) -> None:
    """Write ``report`` to ``out`` atomically (a benchmark stopped half-way leaves the last complete JSON) and print
    its ``summary`` lines."""
    write_text(out, json.dumps(report, indent=2, ensure_ascii=False) + "\n")  # in the benchmark's order: the report page shows it so
    for key, value in report["summary"].items():
        print(f"{key}: {value}")
    print(f"written {out}")
