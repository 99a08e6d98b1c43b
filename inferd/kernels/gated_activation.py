"""act(gate) * up over a fused gate-up output in one call (gated_activation.c).

For a decode step's few rows the torch form (split, activation, multiply) is
three ops whose GELU alone costs ~50 us at eight rows, run once per layer;
this is one vectorised pass. Same bf16 roundings as the torch ops; the
activation itself is computed in float32 in a form free of cancellation, so
a value can differ from torch's by a bf16 step. float32 rows (an engine
computing in it) take the same pass, unrounded.
"""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import torch

from inferd.kernels.native import F32, I64, INT, PTR, load_kernel

# act(x) = x * sigmoid(a x + b x^3): the coefficients (a, b) of each supported activation.
_GELU_TANH = 2 * math.sqrt(2 / math.pi)
COEFFICIENTS = {"silu": (1.0, 0.0), "gelu_pytorch_tanh": (_GELU_TANH, _GELU_TANH * 0.044715)}


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("gated_activation.c"), extra_flags,
                       inferd_gated_activation=([PTR, I64, I64, F32, F32, PTR, INT], None))


def supports(gate_up: torch.Tensor, activation: str) -> bool:
    """bf16 or float32 rows on CPU, contiguous, for an activation of `COEFFICIENTS`."""
    return (activation in COEFFICIENTS and gate_up.dtype in (torch.bfloat16, torch.float32) and gate_up.is_cpu
            and gate_up.is_contiguous() and gate_up.shape[-1] > 0 and gate_up.shape[-1] % 2 == 0
            and library() is not None)


def gated_activation(gate_up: torch.Tensor, activation: str, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """act(gate) * up for gate_up [..., 2I] = [gate, up]: [..., I] in gate_up's dtype (see `supports`)."""
    width = gate_up.shape[-1] // 2
    out = torch.empty((*gate_up.shape[:-1], width), dtype=gate_up.dtype)
    a, b = COEFFICIENTS[activation]
    (lib or library()).inferd_gated_activation(gate_up.data_ptr(), gate_up.numel() // (2 * width), width, a, b,
                                               out.data_ptr(), int(gate_up.dtype == torch.float32))
    return out
