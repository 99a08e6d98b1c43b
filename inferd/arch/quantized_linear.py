"""Weight-only quantized linear layers for CPU decoding.

Decoding one token reads every weight once, so a step's time is bounded by
weight bytes over memory bandwidth. Storing weights in 8 or 4 bits cuts the
bytes 2x or 4x; activations stay in the engine dtype.

- int8: symmetric, one scale per output channel (`torch._weight_int8pack_mm`).
- int4: asymmetric, a scale and a zero per group of 32 inputs
  (`torch._weight_int4pack_mm_for_cpu`). The bundled GGUF's K-quants use the
  same 32-wide groups with 16 levels, so re-quantizing them loses little.
"""

from __future__ import annotations

import torch
from torch import nn

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


def quantize_int4(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> (packed int4, scales_and_zeros [K/32, N, 2]) with
    weight ~= (q - 8) * scale + zero, q in 0..15."""
    packed, params = [], []
    for chunk in weight.split(_CHUNK_ROWS):
        n, k = chunk.shape
        w = chunk.float().reshape(n, k // INT4_GROUP, INT4_GROUP)
        lo, hi = w.amin(dim=2), w.amax(dim=2)
        scale = ((hi - lo) / 15).clamp(min=1e-12)
        q = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
        packed.append(torch._convert_weight_to_int4pack_for_cpu(q, 1))
        params.append(torch.stack([scale, lo + 8 * scale], dim=-1).to(dtype))  # [n, K/32, 2]
    return torch.cat(packed), torch.cat(params).transpose(0, 1).contiguous()


def int4_fits(weight: torch.Tensor) -> bool:
    n, k = weight.shape
    return k % INT4_GROUP == 0 and n % _INT4_N_MULTIPLE == 0


class QuantizedLinear(nn.Module):
    """y = x @ W.T (+ b) with W held as int8 or int4.

    With `dense_from_rows`, the float weight is kept too and inputs of that
    many rows or more use it: the quantized kernels win only while a matmul
    is memory-bound (a few rows); prefill and wide decode batches are
    compute-bound, where the dense GEMM is 1.5-3x faster.

    The constructor makes empty buffers of the right shapes (filled by a
    state dict, e.g. from the weight cache); `from_weight` quantizes.
    """

    def __init__(self, in_features: int, out_features: int, bits: int, dtype: torch.dtype, bias: bool = False,
                 dense_from_rows: int | None = None):
        super().__init__()
        if bits not in (4, 8):
            raise ValueError(f"quantized weights have 4 or 8 bits, not {bits}")
        self.bits, self.in_features, self.out_features = bits, in_features, out_features
        if bits == 4:
            self.register_buffer("qweight", torch.empty(out_features, in_features // 2, dtype=torch.uint8))
            self.register_buffer("scales", torch.empty(in_features // INT4_GROUP, out_features, 2, dtype=dtype))
        else:
            self.register_buffer("qweight", torch.empty(out_features, in_features, dtype=torch.int8))
            self.register_buffer("scales", torch.empty(out_features, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.dense_from_rows = dense_from_rows
        dense = None if dense_from_rows is None else torch.empty(out_features, in_features, dtype=dtype)
        self.register_buffer("dense", dense)
        self.packed_dense = None  # set by arch.quantize.pack_for_cpu; replaces `dense`

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None, bits: int, dtype: torch.dtype,
                    dense_from_rows: int | None = None) -> QuantizedLinear:
        out_features, in_features = weight.shape
        with torch.device("meta"):
            layer = cls(in_features, out_features, bits, dtype, bias is not None, dense_from_rows)
        layer.qweight, layer.scales = (quantize_int4 if bits == 4 else quantize_int8)(weight, dtype)
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(dtype), requires_grad=False)
        if dense_from_rows is not None:
            layer.dense = weight.to(dtype)  # no copy when already in dtype (e.g. a tied embedding)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if self.dense_from_rows is not None and flat.shape[0] >= self.dense_from_rows:
            if self.packed_dense is not None:
                return self.packed_dense(x)
            return torch.nn.functional.linear(x, self.dense, self.bias)
        if self.bits == 4:
            y = torch._weight_int4pack_mm_for_cpu(flat, self.qweight, INT4_GROUP, self.scales)
        else:
            y = torch._weight_int8pack_mm(flat, self.qweight, self.scales)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        dense = "" if self.dense is None else f", dense_from_rows={self.dense_from_rows}"
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}{dense}"
