"""Keep the memory a CPU training step frees for the next step, instead of handing it back to the system.

glibc serves allocations above its mmap threshold (128 KiB, raised adaptively up to 32 MiB) with fresh pages from
the kernel and unmaps them when freed, and trims the heap's free top beyond 128 KiB. A training step allocates and
frees the same activations every step, so each step faults every page of them in again and the kernel zeroes it.
Here mmap is switched off for the process's allocations (every block comes from the heap) and the heap is never
trimmed, so the next step reuses those pages; the process keeps its peak memory instead of returning it between
steps. Measured on a 2-core Intel Xeon with AMX, 2026-12-06:

- paper A's compiled bf16 step at batch 192: about 20,000 page faults a step, 0-20 with the heap kept (then by
  raising the mmap threshold to its largest, 32 MiB); the time saved was within that machine's noise (one pair of
  runs 0.25-0.26 against 0.19-0.20 s a step, two alternating pairs 0.237 against 0.237 and 0.203 against 0.223 s);
- paper B's encoder at the paper's size, 4 seeds packed, compiled fp32 at batch 64: its 64 MiB attention patterns
  are above any threshold, 1.6-1.8 M page faults and 3.1-3.3 s in the kernel a step, 9.6-10.0 s a step; without
  mmap 0-4,000 faults, 0.01 s in the kernel, 6.9-7.4 s a step.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("posym.training")

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt's parameters (malloc.h)
TRIM_THRESHOLD = -1  # glibc takes it as a size_t: SIZE_MAX, never trim the heap's free top (2**31 - 1 let a 2 GiB top go)

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Switch glibc's mmap off for this process's allocations and its heap trimming, once; whether it did (False
    where the C library is not glibc, which has no ``mallopt``, or refuses)."""
    global _done
    if _done is None:
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            _done = False
        else:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _done = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        log.info("freed memory kept for reuse (glibc mallopt): %s", "yes" if _done else "no, not available here")
    return _done
