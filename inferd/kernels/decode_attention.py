"""Decode attention read straight from the paged KV cache (decode_attention.c).

One call per layer and decode group replaces the gather, cast, two matmuls
and softmax of the torch path, which for one query row are mostly per-op
overhead. Same arithmetic (float32 scores, softmax and sums), in another
order, so results match the torch path to float32 rounding.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import F32, I64, INT, PTR, load_kernel


# The library's function: (argument types, result type).
SIGNATURES = dict(inferd_decode_attention=([PTR, I64, I64, I64, I64, PTR, PTR, I64, PTR, PTR, I64, F32, PTR], INT))


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("decode_attention.c"), extra_flags, **SIGNATURES)


def supports(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """bf16 on CPU, each query row's heads contiguous, and the kernel built."""
    return (q.dtype == k_cache.dtype == torch.bfloat16 and q.is_cpu and q.stride(2) == 1
            and q.stride(1) == q.shape[2] and k_cache.is_contiguous() and library() is not None)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                     mask: torch.Tensor, scale: float, out: torch.Tensor, lib: ctypes.CDLL | None = None) -> None:
    """Writes into `out` [B, H, D] (contiguous) attention of q [B, H, D] over
    the cache slots [B, L], masked by `mask` (float32, 0 or -inf, B x L values)."""
    b, heads, dim = q.shape
    if not (out.is_contiguous() and slots.is_contiguous() and mask.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("decode attention needs contiguous outputs, slots, mask and caches")
    if slots.dtype != torch.int64 or mask.dtype != torch.float32 or mask.numel() != slots.numel():
        raise ValueError("decode attention takes int64 slots and a float32 mask of the same size")
    status = (lib or library()).inferd_decode_attention(
        q.data_ptr(), q.stride(0), b, heads, dim, k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape[1],
        slots.data_ptr(), mask.data_ptr(), slots.shape[-1], scale, out.data_ptr())
    if status == -1:
        raise MemoryError("decode attention could not allocate its score buffers")
    if status:
        raise ValueError(f"{heads} query heads do not share {k_cache.shape[1]} KV heads evenly")
