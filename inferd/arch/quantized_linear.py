"""Weight-only quantized linear layers for CPU decoding.

Decoding one token reads every weight once, so a step's time is bounded by
weight bytes over memory bandwidth. Storing weights in 8 or 4 bits cuts the
bytes 2x or 4x; activations stay in the engine dtype.

- int8: symmetric, one scale per output channel (`torch._weight_int8pack_mm`).
- int4: asymmetric, a scale and a zero per group of 32 inputs
  (`torch._weight_int4pack_mm_for_cpu`). The bundled GGUF's K-quants use the
  same 32-wide groups with 16 levels, so re-quantizing them loses little.

`tiled` layers hold the same values in the layout of inferd's own kernels
(`inferd.kernels.quant_gemv`, used where they are built for the CPU), which
also quantize activations to int8 and run several times faster.
"""

from __future__ import annotations

import torch
from torch import nn

from inferd.kernels import quant_gemv

INT4_GROUP = 32
# The int4 kernel packs output channels in tiles of 16.
_INT4_N_MULTIPLE = 16


# Rows quantized at a time: bounds the float32 temporaries for a 262k-row head
# (a multiple of the int4 packer's 64-row blocks, so packed chunks concatenate).
_CHUNK_ROWS = 8192


def quantize_int8(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> (int8 [N, K], scales [N]) with weight ~= q * scale."""
    qs, scales = [], []
    for chunk in weight.split(_CHUNK_ROWS):
        w = chunk.float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        qs.append(torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        scales.append(scale.to(dtype))
    return torch.cat(qs), torch.cat(scales)


def quantize_int4(weight: torch.Tensor, dtype: torch.dtype, tiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> weight ~= q * scale + low, q in 0..15, per group of 32 inputs:
    torch's (packed int4, scales_and_zeros [K/32, N, 2]) with zero = low + 8 * scale,
    or tiled, `quant_gemv.tile_int4`'s (bytes, params)."""
    packed, params = [], []
    for chunk in weight.split(_CHUNK_ROWS):
        n, k = chunk.shape
        w = chunk.float().reshape(n, k // INT4_GROUP, INT4_GROUP)
        lo, hi = w.amin(dim=2), w.amax(dim=2)
        scale = ((hi - lo) / 15).clamp(min=1e-12)
        q = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
        if tiled:
            chunk_packed, chunk_params = quant_gemv.tile_int4(q, scale.to(dtype), lo.to(dtype))
            packed.append(chunk_packed)
            params.append(chunk_params)
        else:
            packed.append(torch._convert_weight_to_int4pack_for_cpu(q, 1))
            params.append(torch.stack([scale, lo + 8 * scale], dim=-1).to(dtype))  # [n, K/32, 2]
    if tiled:
        return torch.cat(packed), torch.cat(params)
    return torch.cat(packed), torch.cat(params).transpose(0, 1).contiguous()


def int4_fits(weight: torch.Tensor) -> bool:
    n, k = weight.shape
    return k % INT4_GROUP == 0 and n % _INT4_N_MULTIPLE == 0


def can_tile(weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """inferd's kernels are built for this CPU and take this layer."""
    return dtype == torch.bfloat16 and quant_gemv.fits(*weight.shape) and quant_gemv.available()


def dense_product(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x through a compact layer's dense weight (`dense`, or `packed_dense`
    once packed for oneDNN), for inputs of `dense_from_rows` rows or more."""
    if layer.packed_dense is not None:
        return layer.packed_dense(x)
    return torch.nn.functional.linear(x, layer.dense, layer.bias)


class QuantizedLinear(nn.Module):
    """y = x @ W.T (+ b) with W held as int8 or int4.

    With `dense_from_rows`, the float weight is kept too and inputs of that
    many rows or more use it: the quantized kernels win only while a matmul
    is memory-bound (a few rows); prefill and wide decode batches are
    compute-bound, where the dense GEMM is 1.5-3x faster.

    The constructor makes empty buffers of the right shapes (filled by a
    state dict, e.g. from the weight cache); `from_weight` quantizes.
    `tiled`: the layout of inferd's kernels (see `can_tile`) instead of torch's.
    """

    def __init__(self, in_features: int, out_features: int, bits: int, dtype: torch.dtype, bias: bool = False,
                 dense_from_rows: int | None = None, tiled: bool = False):
        super().__init__()
        if bits not in (4, 8):
            raise ValueError(f"quantized weights have 4 or 8 bits, not {bits}")
        self.bits, self.in_features, self.out_features, self.tiled = bits, in_features, out_features, tiled
        n, k, tile, groups = out_features, in_features, quant_gemv.TILE, in_features // INT4_GROUP
        if bits == 4 and tiled:
            self.register_buffer("qweight", torch.empty(n // tile, groups, 4, tile, 4, dtype=torch.uint8))
            self.register_buffer("scales", torch.empty(n // tile, groups, 2, tile, dtype=dtype))
        elif bits == 4:
            self.register_buffer("qweight", torch.empty(n, k // 2, dtype=torch.uint8))
            self.register_buffer("scales", torch.empty(groups, n, 2, dtype=dtype))
        else:
            shape = (n // tile, k // 4, tile, 4) if tiled else (n, k)
            self.register_buffer("qweight", torch.empty(shape, dtype=torch.int8))
            self.register_buffer("scales", torch.empty(n, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.dense_from_rows = dense_from_rows
        dense = None if dense_from_rows is None else torch.empty(out_features, in_features, dtype=dtype)
        self.register_buffer("dense", dense)
        self.packed_dense = None  # set by arch.quantize.pack_for_cpu; replaces `dense`
        # The kernels can write float32 directly: an LM head sets it, as its logits are sampled in float32.
        self.kernel_out_dtype = dtype

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None, bits: int, dtype: torch.dtype,
                    dense_from_rows: int | None = None, tiled: bool = False) -> QuantizedLinear:
        out_features, in_features = weight.shape
        with torch.device("meta"):
            layer = cls(in_features, out_features, bits, dtype, bias is not None, dense_from_rows, tiled)
        if bits == 4:
            layer.qweight, layer.scales = quantize_int4(weight, dtype, tiled)
        else:
            q, layer.scales = quantize_int8(weight, dtype)
            layer.qweight = quant_gemv.tile_int8(q) if tiled else q
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(dtype), requires_grad=False)
        if dense_from_rows is not None:
            layer.dense = weight.to(dtype)  # no copy when already in dtype (e.g. a tied embedding)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if self.dense_from_rows is not None and rows >= self.dense_from_rows:
            return dense_product(self, x)
        if self.tiled:  # the decode path: kept short, it runs ~70 times a step
            return (quant_gemv.int4_matmul if self.bits == 4 else quant_gemv.int8_matmul)(
                x, self.qweight, self.scales, self.bias, out_dtype=self.kernel_out_dtype)
        flat = x.reshape(rows, self.in_features)
        if self.bits == 4:
            y = torch._weight_int4pack_mm_for_cpu(flat, self.qweight, INT4_GROUP, self.scales)
        else:
            y = torch._weight_int8pack_mm(flat, self.qweight, self.scales)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        dense = "" if self.dense is None else f", dense_from_rows={self.dense_from_rows}"
        tiled = ", tiled" if self.tiled else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}{tiled}{dense}"
