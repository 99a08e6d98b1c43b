"""RMSNorm (plus an optional residual add) in one call (rms_norm.c).

At decode sizes the torch form (cast, `F.rms_norm`, scale, cast back, add)
is five ops of mostly dispatch overhead, run ~90 times a step for the
bundled model; this is one. Same float32 arithmetic; the sum of squares is
taken in another order, so a value can differ by one bf16 step at most.
float32 rows (an engine computing in float32) take the same path, unrounded.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import F32, I64, INT, PTR, load_kernel


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("rms_norm.c"), extra_flags,
                       inferd_rms_norm=([PTR, I64, I64, I64, I64, PTR, F32, INT, PTR, PTR, INT], None))


def supports(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """bf16 or float32 rows on CPU: x [T, D] with a weight [D], or x [T, W, D]
    with one weight row per head [W, D]; each token's rows contiguous."""
    if x.dtype not in (torch.bfloat16, torch.float32) or not x.is_cpu or weight.dtype != torch.float32:
        return False
    if weight.dim() == 1:
        shaped = x.dim() == 2 and x.shape[1] == weight.shape[0]
    else:
        shaped = x.dim() == 3 and x.shape[1:] == weight.shape and x.stride(1) == x.shape[2]
    return shaped and x.stride(-1) == 1 and weight.is_contiguous() and library() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, scale_in_float: bool,
             residual: torch.Tensor | None = None, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """[residual +] x / rms(x) * weight over the last dimension, in x's dtype (see `supports`)."""
    if residual is not None and not (residual.is_contiguous() and residual.shape == x.shape
                                     and residual.dtype == x.dtype):
        raise ValueError(f"the residual must be a contiguous {'bf16' if x.dtype == torch.bfloat16 else 'float32'} "
                         "tensor of x's shape")
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    heads = 1 if weight.dim() == 1 else weight.shape[0]
    (lib or library()).inferd_rms_norm(
        x.data_ptr(), x.stride(0), x.shape[0], heads, x.shape[-1], weight.data_ptr(), eps, int(scale_in_float),
        None if residual is None else residual.data_ptr(), out.data_ptr(), int(x.dtype == torch.float32))
    return out
