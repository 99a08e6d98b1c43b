"""Layers shared by the architectures."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inferd.kernels import gated_activation as native_activation
from inferd.kernels import rms_norm as native_norm


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32.

    `unit_offset` is Gemma's form, x * (1 + w): the offset is folded into the
    float32 weight at load time, so the forward is the same for both.
    `scale_in_float` keeps the multiply in float32 before casting back (Gemma);
    Llama casts first, then multiplies in the activation dtype.
    """

    def __init__(self, dim: int, eps: float, unit_offset: bool = False, scale_in_float: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.float32), requires_grad=False)
        self.eps = eps
        self.unit_offset = unit_offset
        self.scale_in_float = scale_in_float

    def load(self, w: torch.Tensor) -> None:
        w = w.float()
        self.weight = nn.Parameter(w + 1.0 if self.unit_offset else w, requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The norm of x, added to `residual` when given."""
        return rms_norm(x, self.weight, self.eps, self.scale_in_float, residual)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, scale_in_float: bool,
             residual: torch.Tensor | None = None) -> torch.Tensor:
    """`RMSNorm`'s arithmetic over the last dimension; `weight` broadcasts
    against x's trailing dimensions (one row per head for a joint Q/K norm).
    On CPU in bf16 or float32, one native call (`inferd.kernels.rms_norm`)."""
    if native_norm.supports(x, weight) and (residual is None or residual.is_contiguous()):
        return native_norm.rms_norm(x, weight, eps, scale_in_float, residual)
    normed = F.rms_norm(x.float(), x.shape[-1:], None, eps)  # x * rsqrt(mean(x^2) + eps): one op, not five
    if scale_in_float:
        out = (normed * weight).to(x.dtype)
    else:
        out = weight.to(x.dtype) * normed.to(x.dtype)
    return out if residual is None else residual + out


ACTIVATIONS = {
    "silu": F.silu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
}


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)), with gate and up fused into one matmul."""

    def __init__(self, hidden: int, intermediate: int, act: str):
        super().__init__()
        self.intermediate = intermediate
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_name, self.act = act, ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if native_activation.supports(gate_up, self.act_name):  # on CPU in bf16 or float32, one native call
            return self.down_proj(native_activation.gated_activation(gate_up, self.act_name))
        gate, up = gate_up.split(self.intermediate, dim=-1)
        return self.down_proj(self.act(gate) * up)
