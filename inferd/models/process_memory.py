"""Keep a serving process's memory flat under a changing load.

- oneDNN compiles a primitive for each matmul shape and keeps 1024 of them,
  and torch's own cache of them (ideep's, for packed bf16 weights) keeps
  another 1024, ~0.3 MB each. Every new prefill length is a new shape, so a
  server's memory grew for thousands of requests (~70 MB within minutes of a
  mixed load). Packed projections see 40 row counts in all (padded, and
  chunked past 512 rows: `arch/packed_linear.py`), so the cap below holds
  every shape they build; oneDNN's own cache serves the rest, and its shapes
  come and go.
  (torch's fused attention keeps kernels per length with no cap at all:
  `arch/attention.py` pads the lengths it sees instead.)
- A step's temporaries (a prefill chunk's activations, the head's logits)
  are megabytes each. Mapped afresh for every step, their pages faulted in
  and were cleared every time: 28% of a prefill's CPU time. Fixed high
  thresholds keep them in the heap, its pages mapped from step to step,
  whatever the load has freed so far (glibc's own thresholds start low and
  rise with it); what a burst leaves free goes back to the OS once the
  engine falls idle (`release_freed_memory`), so the idle RSS stays flat.
"""

from __future__ import annotations

import ctypes
import os

ONEDNN_PRIMITIVE_CACHE = 16
PACKED_MATMUL_CACHE = 256
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for it
TRIM_THRESHOLD_BYTES = 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def bound_process_memory() -> None:
    """Call before the first matmul: oneDNN reads its setting once."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_PRIMITIVE_CACHE))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(PACKED_MATMUL_CACHE))
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):  # not glibc
        pass


def release_freed_memory() -> None:
    """Hand freed heap memory back to the OS: after loading (~0.7 GB of freed
    blocks after quantizing) and whenever the engine falls idle."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
