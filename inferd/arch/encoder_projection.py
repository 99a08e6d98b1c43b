"""An encoder's linear projections, with the weight reordered once into
oneDNN's blocked layout on CPU.

torch's float32 `addmm` on CPU calls MKL, which on some CPUs (AMD's) runs
its AVX2 kernels even where AVX-512 is there: oneDNN's kernels on a weight
reordered at load are ~1.15x faster held to AVX2 and ~2.3x with AVX-512
(one thread, [3840, 384] x [384, 1536]). A bf16 `addmm` already runs
oneDNN, but reorders the weight on every call. The same float32 or bf16
accumulation either way, so vectors agree with the plain product to float
rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The row count oneDNN tunes the weight's layout for; one layout serves every
# row count (batches run a few thousand rows, a single sentence a dozen).
_LAYOUT_ROWS = 1024


def can_pack(dtype: torch.dtype, device: torch.device) -> bool:
    """Float32, or bf16 where oneDNN computes it, on a CPU with oneDNN."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class Projection(nn.Module):
    """y = x W^T + b. `weight` and `bias` load as nn.Linear's do; `pack`
    then swaps the weight for its reordered copy (no second copy is kept)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)
        # A buffer, so the model's size counts it; not persistent: an opaque layout, no state-dict entry.
        self.register_buffer("packed", None, persistent=False)

    def pack(self) -> None:
        if self.packed is None and can_pack(self.weight.dtype, self.weight.device):
            try:
                self.packed = _reorder(self.weight.detach())
            except RuntimeError:  # a oneDNN build without this layout (e.g. some ARM ones): stay plain
                return
            self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def add_onto(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + self(x), in the product's fresh tensor."""
        return self(x).add_(residual)


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, _LAYOUT_ROWS)
