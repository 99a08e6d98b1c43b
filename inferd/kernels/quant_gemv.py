"""int8 and int4 weight-only matrix products for decoding (quant_gemv.c).

Weights are stored in the kernel's tile layout (16 output rows per tile,
see the C source); `tile_int8` and `tile_int4` convert from row-major
quantized weights. The products quantize activations to int8 per group of
32 inputs, so they are a little lossier than the torch kernels, and several
times faster at the one to eight rows of a decode step.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import I64, INT, PTR, load_kernel

TILE = 16  # output rows per tile
GROUP = 32  # inputs per quantization group (activations, and int4 weights)
MAX_ROWS = 8  # activation rows applied per pass over the weights


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    gemv = ([PTR, I64, I64, PTR, PTR, I64, PTR, PTR, INT], INT)
    return load_kernel(Path(__file__).with_name("quant_gemv.c"), extra_flags, inferd_q8_gemv=gemv,
                       inferd_q4_gemv=gemv)


def available() -> bool:
    """A vector path is built for this CPU (AVX-512 with VNNI, or AVX2 with
    FMA); elsewhere the torch kernels are faster than the portable C."""
    lib = library()
    return lib is not None and lib.inferd_quant_gemv_vectorized() in (1, 2)


def fits(out_features: int, in_features: int) -> bool:
    return out_features % TILE == 0 and in_features % GROUP == 0


def tile_int8(q: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] -> [N/16, K/4, 16, 4]."""
    n, k = q.shape
    return q.view(n // TILE, TILE, k // 4, 4).permute(0, 2, 1, 3).contiguous()


def tile_int4(q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Levels q [N, K] in 0..15 with per-group scale and low [N, K/32] ->
    (bytes [N/16, K/32, 4, 16, 4], params [N/16, K/32, 2, 16])."""
    n, k = q.shape
    # [tile, row, group, half, block, 4]: the low half's nibbles pair with the high half's
    levels = q.to(torch.uint8).view(n // TILE, TILE, k // GROUP, 2, 4, 4)
    packed = (levels[:, :, :, 0] | (levels[:, :, :, 1] << 4)).permute(0, 2, 3, 1, 4).contiguous()
    params = torch.stack((scale, low), dim=-1).view(n // TILE, TILE, k // GROUP, 2).permute(0, 2, 3, 1)
    return packed, params.contiguous()


def int8_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
                lib: ctypes.CDLL | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """x @ W.T in `out_dtype` (bf16, or float32 for logits)."""
    return _run((lib or library()).inferd_q8_gemv, x, qweight, scales, bias, scales.shape[0], out_dtype)


def int4_matmul(x: torch.Tensor, qweight: torch.Tensor, params: torch.Tensor, bias: torch.Tensor | None,
                lib: ctypes.CDLL | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return _run((lib or library()).inferd_q4_gemv, x, qweight, params, bias, params.shape[0] * TILE, out_dtype)


def _run(fn, x: torch.Tensor, qweight: torch.Tensor, params: torch.Tensor, bias: torch.Tensor | None,
         out_features: int, out_dtype: torch.dtype) -> torch.Tensor:
    if x.dtype != torch.bfloat16:
        raise TypeError(f"the quantized kernels take bf16 activations, not {x.dtype}")
    flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    if not flat.is_contiguous():
        flat = flat.contiguous()
    rows, width = flat.shape
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the quantized kernels write bf16 or float32, not {out_dtype}")
    y = torch.empty((rows, out_features), dtype=out_dtype)
    if rows:
        status = fn(flat.data_ptr(), rows, width, qweight.data_ptr(), params.data_ptr(), out_features,
                    None if bias is None else bias.data_ptr(), y.data_ptr(), out_dtype == torch.float32)
        if status == -1:
            raise MemoryError("the quantized kernel could not allocate its activation buffers")
        if status:
            raise ValueError(f"a [{out_features}, {width}] weight does not fit the kernel's tiles")
    return y if x.dim() == 2 else y.view(*x.shape[:-1], out_features)
