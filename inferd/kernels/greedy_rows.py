"""Greedy picks for rows of float32 logits in one call (greedy_rows.c).

The sampler's tensor path takes a row's argmax in several torch ops (block
maxima, the row maximum, a finiteness check, the first block that holds it,
a gather). When no row of the step wants more than its argmax, this is
one pass for the maximum and a short one for where it first occurs: on 8
rows of Gemma's 262,144 logits 0.45-0.55 ms against 1.2-1.7 ms on a 2-core
host (BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import I64, PTR, load_kernel


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("greedy_rows.c"), extra_flags,
                       inferd_greedy_rows=([PTR, I64, I64, I64, PTR], None))


def supports(x: torch.Tensor) -> bool:
    """float32 [n, V] on CPU, each row contiguous, where the kernel builds."""
    return (x.dtype == torch.float32 and x.dim() == 2 and x.is_cpu and x.shape[1] > 0 and x.stride(1) == 1
            and library() is not None)


def first_argmax(x: torch.Tensor, lib: ctypes.CDLL | None = None) -> list[int]:
    """Each row's first argmax, or -1 where the row has no finite maximum (see `supports`)."""
    tokens = torch.empty(x.shape[0], dtype=torch.int64)
    (lib or library()).inferd_greedy_rows(x.data_ptr(), x.shape[0], x.stride(0), x.shape[1], tokens.data_ptr())
    return tokens.tolist()
