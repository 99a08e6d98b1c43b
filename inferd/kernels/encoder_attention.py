"""Attention of an encoder's short packed sequences (encoder_attention.c).

For sequences of a few dozen tokens, torch's attention spends most of its
time on per-head calls; one call per layer here reads query, key and value
straight from the fused projection's rows. Same float32 arithmetic in
another order, so results match torch's to float32 rounding.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import F32, I64, INT, PTR, load_kernel

# The longest sequence the kernel takes (ENCODER_ATTENTION_MAX_LEN); longer ones stay with torch.
MAX_LENGTH = 64


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("encoder_attention.c"), extra_flags,
                       inferd_encoder_attention=([PTR, I64, I64, I64, PTR, PTR, PTR, I64, F32, PTR, I64], INT))


def supports(qkv: torch.Tensor) -> bool:
    """float32 rows on CPU, each row's values contiguous, and the kernel built."""
    return qkv.dtype == torch.float32 and qkv.is_cpu and qkv.dim() == 2 and qkv.stride(1) == 1 and library() is not None


def encoder_attention(qkv: torch.Tensor, heads: int, head_dim: int, groups: torch.Tensor, out: torch.Tensor,
                      lib: ctypes.CDLL | None = None) -> None:
    """Writes into `out` [T, heads * head_dim] the attention of each sequence
    in `groups` (int64 [G, 3]: first row, sequences, length; each sequence's
    rows follow the previous one's) over its own rows of `qkv` [T, 3 * heads * head_dim]."""
    if qkv.shape[1] != 3 * heads * head_dim or out.shape[1] != heads * head_dim or out.stride(1) != 1:
        raise ValueError("encoder attention takes [T, 3 * heads * head_dim] rows and writes [T, heads * head_dim]")
    if groups.dtype != torch.int64 or groups.dim() != 2 or groups.shape[1] != 3:
        raise ValueError("encoder attention takes int64 groups of (first row, sequences, length)")
    columns = groups.t().contiguous()
    if columns.numel() and int((columns[0] + columns[1] * columns[2]).max()) > min(qkv.shape[0], out.shape[0]):
        raise ValueError("a group's rows lie past the end of qkv or out")
    status = (lib or library()).inferd_encoder_attention(
        qkv.data_ptr(), qkv.stride(0), heads, head_dim, columns[0].data_ptr(), columns[1].data_ptr(),
        columns[2].data_ptr(), groups.shape[0], head_dim ** -0.5, out.data_ptr(), out.stride(0))
    if status == -1:
        raise MemoryError("encoder attention could not allocate its key buffer")
    if status:
        raise ValueError(f"encoder attention takes sequences of 1 to {MAX_LENGTH} tokens")
