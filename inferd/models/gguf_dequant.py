"""Turn one GGUF tensor's raw bytes into a torch tensor of a chosen dtype.

Block formats go through `gguf.quants`' per-block numpy math, fed a few hundred
thousand elements at a time straight into the preallocated output: chunks that
fit in cache run several times faster than whole-tensor calls, and the float32
intermediate never exceeds one chunk, whatever the tensor's size. The cast to
the target dtype stays in numpy too: hundreds of small torch copies each wake
torch's thread pool, which stalls badly whenever another process holds a core.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from inferd.models.gguf_file import GGUFError

# Elements dequantized per step: small enough for the float32 chunk to stay in cache.
CHUNK_ELEMENTS = 1 << 18

# Plain float storage: reinterpret the bytes, let torch convert.
_FLOAT_VIEWS = {
    GGMLQuantizationType.F32: (np.float32, None),
    GGMLQuantizationType.F16: (np.float16, None),
    GGMLQuantizationType.BF16: (np.int16, torch.bfloat16),  # numpy has no bfloat16
    GGMLQuantizationType.F64: (np.float64, None),
}


def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32 values, rounded to nearest-even exactly as torch rounds."""
    bits = values.view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


# torch dtype -> (numpy storage dtype, float32 -> storage conversion, torch view of the storage)
_NUMPY_CASTS: dict[torch.dtype, tuple[type, Callable[[np.ndarray], np.ndarray], torch.dtype | None]] = {
    torch.float32: (np.float32, lambda x: x, None),
    torch.float16: (np.float16, lambda x: x.astype(np.float16), None),
    torch.float64: (np.float64, lambda x: x.astype(np.float64), None),
    torch.bfloat16: (np.uint16, float32_to_bfloat16_bits, torch.bfloat16),
}


def dequantize(raw: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """`raw` is uint8 shaped (*shape[:-1], bytes per row); the result owns its memory."""
    if qtype in _FLOAT_VIEWS:
        np_type, torch_view = _FLOAT_VIEWS[qtype]
        values = torch.from_numpy(raw.view(np_type))
        if torch_view is not None:
            values = values.view(torch_view)
        return values.reshape(shape).to(dtype, copy=True)
    block_format = _block_format(qtype)
    block_format.init_grid()  # the i-quants decode through a lookup grid built on first use
    rows = raw.reshape(-1, raw.shape[-1])
    step = max(1, CHUNK_ELEMENTS // shape[-1])
    chunks = (block_format.dequantize_rows(rows[start:start + step]) for start in range(0, rows.shape[0], step))
    if dtype not in _NUMPY_CASTS:  # rare targets: let torch cast each float32 chunk
        out = torch.empty((rows.shape[0], shape[-1]), dtype=dtype)
        for start, chunk in zip(range(0, rows.shape[0], step), chunks):
            out[start:start + step] = torch.from_numpy(chunk)
        return out.reshape(shape)
    storage, convert, torch_view = _NUMPY_CASTS[dtype]
    out = np.empty((rows.shape[0], shape[-1]), dtype=storage)
    for start, chunk in zip(range(0, rows.shape[0], step), chunks):
        out[start:start + step] = convert(chunk)
    tensor = torch.from_numpy(out)
    return (tensor.view(torch_view) if torch_view is not None else tensor).reshape(shape)


def _block_format(qtype: GGMLQuantizationType):
    block_format = getattr(quants, qtype.name, None)
    if block_format is None or not hasattr(block_format, "dequantize_rows"):
        raise GGUFError(
            f"GGUF quant type {qtype.name} cannot be dequantized by the installed gguf package; "
            "re-quantize the model to a common type such as Q4_K_M, Q8_0, F16 or BF16"
        )
    return block_format
