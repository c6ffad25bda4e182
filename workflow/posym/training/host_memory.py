"""Keep the memory a CPU training step frees for the next step, instead of handing it back to the system.

glibc serves allocations above its mmap threshold (128 KiB, raised adaptively up to 32 MiB) with fresh pages from
the kernel and unmaps them when freed, and trims the heap's free top beyond 128 KiB. A training step allocates and
frees the same few-MiB activations every step, so each step faults every page of them in again and zeroes it:
measured on paper A's compiled bf16 step at batch 192 (2-core Intel Xeon with AMX, 2026-12-06), about 20,000 page
faults a step; with the thresholds raised, 0-20. The time that saves was within that machine's noise: one pair of
runs gave 0.25-0.26 s a step against 0.19-0.20 s, two alternating pairs 0.237 against 0.237 s and 0.203 against
0.223 s (docs/run_times.md).
Raising both thresholds keeps those pages in the heap, where the next step reuses them; the process keeps its peak
memory instead of returning it between steps. Allocations above 32 MiB (glibc's largest threshold) are still
mapped and unmapped.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("posym.training")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest (HEAP_MAX / 2 on 64-bit systems)
TRIM_THRESHOLD = 2**31 - 1  # an int: never trim the heap's free top

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process, once; whether they are raised (False where the C
    library is not glibc, which has no ``mallopt``, or refuses)."""
    global _done
    if _done is None:
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            _done = False
        else:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        log.info("freed memory kept for reuse (glibc mallopt): %s", "yes" if _done else "no, not available here")
    return _done
