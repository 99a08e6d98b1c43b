"""Matrix products over a GGUF file's own quantized blocks (gguf_gemv.c).

A weight is the file's bytes for its rows, [N, bytes per row] uint8, in one
of the block formats below; the product quantizes activations to int8 per
group of 32 inputs and sums exact integer products per block, as llama.cpp
does. Meant for decode steps: up to eight rows per pass over the weights.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import I64, INT, PTR, load_kernel

# GGML type id -> (weights per block, bytes per block)
BLOCKS = {
    "Q4_0": (2, 32, 18),
    "Q5_0": (6, 32, 22),
    "Q8_0": (8, 32, 34),
    "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210),
}
MAX_ROWS = 8  # activation rows applied per pass over the weights


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("gguf_gemv.c"), extra_flags,
                       inferd_gguf_gemv=([INT, PTR, PTR, PTR, I64, PTR, I64, PTR, INT, PTR, INT], INT),
                       inferd_gguf_gemv_vectorized=([], INT))


def available() -> bool:
    return library() is not None


def supports(block_format: str, in_features: int) -> bool:
    """The kernel computes this format at this width."""
    return block_format in BLOCKS and in_features % BLOCKS[block_format][1] == 0


def row_bytes(block_format: str, in_features: int) -> int:
    _, size, nbytes = BLOCKS[block_format]
    return in_features // size * nbytes


class Parts:
    """The matrices of one projection, stacked by rows: their formats and the
    file's bytes, held as the arrays the kernel takes."""

    def __init__(self, parts: list[tuple[str, torch.Tensor]], in_features: int):
        for block_format, raw in parts:
            if not supports(block_format, in_features) or raw.dtype != torch.uint8 or raw.dim() != 2 \
                    or raw.shape[1] != row_bytes(block_format, in_features):
                raise ValueError(f"a {block_format} weight of shape {tuple(raw.shape)} does not take "
                                 f"{in_features} inputs")
        self.in_features = in_features
        self.out_features = sum(raw.shape[0] for _, raw in parts)
        self.raws = [raw.contiguous() for _, raw in parts]  # kept alive: the kernel reads their memory
        n = len(parts)
        self.count = n
        self.types = (ctypes.c_int * n)(*(BLOCKS[block_format][0] for block_format, _ in parts))
        self.pointers = (ctypes.c_void_p * n)(*(raw.data_ptr() for raw in self.raws))
        self.rows = (ctypes.c_int64 * n)(*(raw.shape[0] for raw in self.raws))


def matmul(x: torch.Tensor, parts: Parts, bias: torch.Tensor | None = None,
           out_dtype: torch.dtype = torch.bfloat16, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """x @ W.T for x [..., K] (bf16, or float32 where the engine computes in
    it) and W the stacked `parts`; a bias is in x's dtype."""
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the GGUF kernels take bf16 or float32 activations, not {x.dtype}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the GGUF kernels write bf16 or float32, not {out_dtype}")
    if x.shape[-1] != parts.in_features:
        raise ValueError(f"the weights take {parts.in_features} inputs, not {x.shape[-1]}")
    if bias is not None and (bias.dtype != x.dtype or bias.shape != (parts.out_features,) or not bias.is_contiguous()):
        raise TypeError(f"the bias must be contiguous {x.dtype} [{parts.out_features}], "
                        f"not {bias.dtype} {tuple(bias.shape)}")
    flat = x.reshape(-1, parts.in_features)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    y = torch.empty((flat.shape[0], parts.out_features), dtype=out_dtype)
    if flat.shape[0]:
        status = (lib or library()).inferd_gguf_gemv(
            parts.count, parts.types, parts.pointers, parts.rows, parts.in_features, flat.data_ptr(),
            flat.shape[0], None if bias is None else bias.data_ptr(), x.dtype == torch.float32, y.data_ptr(),
            out_dtype == torch.float32)
        if status == -1:
            raise MemoryError("the GGUF kernel could not allocate its activation buffers")
        if status:
            raise ValueError("the GGUF kernel refused its weights")
    return y.view(*x.shape[:-1], parts.out_features)
