"""Keep a serving process's memory flat under a changing load.

- oneDNN compiles a primitive for each matmul shape and keeps 1024 of them,
  and torch's own cache of them (ideep's, for packed bf16 weights) keeps
  another 1024, ~0.3 MB each. Every new prefill length is a new shape, so a
  server's memory grew for thousands of requests (~70 MB within minutes of a
  mixed load). Packed projections see 24 row counts in all (padded, and
  chunked past 256 rows: `arch/packed_linear.py`), so the cap below holds
  every shape they build; oneDNN's own cache serves the rest, and its shapes
  come and go.
  (torch's fused attention keeps kernels per length with no cap at all:
  `arch/attention.py` pads the lengths it sees instead.)
- glibc raises its mmap threshold to the largest block freed so far; after
  that, large temporaries (a prefill's activations) come from the heap and
  fragment it. A fixed threshold maps them, and unmaps them when freed.
"""

from __future__ import annotations

import ctypes
import os

ONEDNN_PRIMITIVE_CACHE = 16
PACKED_MATMUL_CACHE = 256
MMAP_THRESHOLD_BYTES = 128 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def bound_process_memory() -> None:
    """Call before the first matmul: oneDNN reads its setting once."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_PRIMITIVE_CACHE))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(PACKED_MATMUL_CACHE))
    try:
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):  # not glibc
        pass


def release_freed_memory() -> None:
    """Hand memory freed by load-time temporaries back to the OS (glibc keeps
    freed mid-size blocks in its heap otherwise: ~0.7 GB after quantizing)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
