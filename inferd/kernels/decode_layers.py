"""The decoder layers of a decode step in one native call (decode_layers.c).

At a few rows a layer's arithmetic takes less time than the Python around
its dozen kernel calls (module dispatch, checks, output allocations). When
every projection runs the GGUF kernels and the step only decodes, the model
hands its layers to this call instead: the same kernels in the same order
on the same values, so the same bits (tested against the modules' path).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels import attention_inputs, decode_attention, gated_activation, gguf_gemv, rms_norm
from inferd.kernels.native import I64, PTR, load_kernel

F32, INT = ctypes.c_float, ctypes.c_int


class Kernels(ctypes.Structure):
    _fields_ = [("rms_norm", PTR), ("gemv", PTR), ("attention_inputs", PTR), ("decode_attention", PTR),
                ("gated_activation", PTR)]


class Projection(ctypes.Structure):
    _fields_ = [("parts", INT), ("types", PTR), ("weights", PTR), ("rows", PTR), ("out_features", I64),
                ("bias", PTR)]


class Layer(ctypes.Structure):
    _fields_ = [("input_norm", PTR), ("attention_out_norm", PTR), ("mlp_in_norm", PTR), ("mlp_out_norm", PTR),
                ("qk_norm", PTR), ("qkv", Projection), ("o", Projection), ("gate_up", Projection),
                ("down", Projection), ("k_cache", PTR), ("v_cache", PTR), ("sliding", INT)]


class Shape(ctypes.Structure):
    _fields_ = [("hidden", I64), ("heads", I64), ("kv_heads", I64), ("head_dim", I64), ("intermediate", I64),
                ("eps", F32), ("qk_eps", F32), ("scale", F32), ("act_a", F32), ("act_b", F32),
                ("scale_in_float", INT), ("qk_scale_in_float", INT), ("is_float", INT)]


class Group(ctypes.Structure):
    _fields_ = [("start", I64), ("end", I64), ("slots", PTR), ("mask", PTR), ("width", I64),
                ("sliding_slots", PTR), ("sliding_mask", PTR), ("sliding_width", I64)]


# The step's buffers in the activations' dtype, then two bf16 ones that only a float32 step uses.
SCRATCH = ("x", "y", "normed", "qkv", "qk", "attended", "projected", "gate_up", "activated")
BF16_SCRATCH = ("queries", "attended_bf16")


class Scratch(ctypes.Structure):
    _fields_ = [(name, PTR) for name in SCRATCH + BF16_SCRATCH]


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("decode_layers.c"), extra_flags,
                       inferd_decode_layers=([PTR, PTR, PTR, I64, I64, PTR, PTR, PTR, PTR, PTR, PTR, I64, PTR], INT))


@functools.cache
def kernels() -> Kernels | None:
    """The addresses of the kernels a layer calls; None when any is not built here."""
    libraries = (rms_norm.library(), gguf_gemv.library(), attention_inputs.library(), decode_attention.library(),
                 gated_activation.library())
    if library() is None or any(lib is None for lib in libraries):
        return None
    names = ("inferd_rms_norm", "inferd_gguf_gemv", "inferd_attention_inputs", "inferd_decode_attention",
             "inferd_gated_activation")
    return Kernels(*(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for lib, name in zip(libraries, names)))


def projection(parts: gguf_gemv.Parts, bias: torch.Tensor | None) -> Projection:
    return Projection(parts.count, ctypes.addressof(parts.types), ctypes.addressof(parts.pointers),
                      ctypes.addressof(parts.rows), sum(parts.rows), None if bias is None else bias.data_ptr())


def run(shape: Shape, layers: ctypes.Array, x: torch.Tensor, ropes: list[torch.Tensor], slot_mapping: torch.Tensor,
        groups: ctypes.Array, widths: dict[str, int]) -> torch.Tensor:
    """The layers over x [T, hidden] (bf16, or float32 with `shape.is_float`);
    `ropes`: the global then the local layers' cos and signed sin, [T, 1, D]
    in x's dtype; `widths`: each scratch buffer's row width."""
    t = x.shape[0]
    main = torch.empty(t * sum(widths[name] for name in SCRATCH), dtype=x.dtype)
    narrow = torch.empty(t * sum(widths[name] for name in BF16_SCRATCH) if shape.is_float else 0,
                         dtype=torch.bfloat16)
    pointers = []
    for buffer, names in ((main, SCRATCH), (narrow, BF16_SCRATCH)):
        at = buffer.data_ptr()
        for name in names:
            pointers.append(at)
            at += t * widths[name] * buffer.element_size()
    out = main[: t * widths["x"]].view(t, widths["x"])
    out.copy_(x)
    status = library().inferd_decode_layers(
        ctypes.byref(kernels()), ctypes.byref(shape), layers, len(layers), t, *(r.data_ptr() for r in ropes),
        slot_mapping.data_ptr(), groups, len(groups), ctypes.byref(Scratch(*pointers)))
    if status == -1:
        raise MemoryError("the decode layers could not allocate their buffers")
    if status:
        raise ValueError(f"a decode-layer kernel refused its inputs (status {status})")
    return out
