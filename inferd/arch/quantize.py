"""Swap a loaded model's linear layers and LM head for quantized ones.

Schemes (`--weights`):
- `bf16`: weights stay in the engine dtype.
- `int8`: every projection and the LM head in int8 only.
- `int4`: every projection and the LM head in int4 only (projections whose
  shape the int4 kernel cannot take fall back to int8).
- `auto`: on CPU, int8 projections and an int4 LM head for steps of a few
  rows (decode), the dense weights for wider steps (prefill, large decode
  batches); see `QuantizedLinear`. On CUDA, where these kernels do not run,
  the engine dtype.

Norms, embeddings (a lookup reads one row per token) and the KV cache stay
in the engine dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from inferd.arch.base import CausalLM
from inferd.arch.quantized_linear import QuantizedLinear, int4_fits

WEIGHT_SCHEMES = ("auto", "bf16", "int8", "int4")


@dataclass(frozen=True)
class Quantization:
    layer_bits: int
    head_bits: int
    # Rows from which the dense weight is used instead; None keeps no dense copy.
    # Measured crossovers on a 2-core AVX-512 CPU: projections ~5 rows, the 262k-row head ~12.
    layer_dense_from: int | None = None
    head_dense_from: int | None = None


SCHEMES = {
    "auto": Quantization(8, 4, layer_dense_from=5, head_dense_from=12),
    "int8": Quantization(8, 8),
    "int4": Quantization(4, 4),
}


def resolve_weights(scheme: str, dtype: torch.dtype, device: torch.device) -> Quantization | None:
    """The quantization to apply, or None to keep the engine dtype."""
    if scheme not in WEIGHT_SCHEMES:
        raise ValueError(f"--weights {scheme!r} is not one of: {', '.join(WEIGHT_SCHEMES)}")
    if scheme == "bf16" or scheme == "auto" and (device.type != "cpu" or dtype == torch.float32):
        return None
    if device.type != "cpu":
        raise ValueError(f"--weights {scheme} runs on CPU only; use --weights bf16 on {device.type}")
    return SCHEMES[scheme]


def quantize_model(model: CausalLM, q: Quantization, dtype: torch.dtype, empty: bool = False) -> None:
    """Replace every projection and the LM head. `empty`: only the structure,
    with empty (meta) buffers, for a state dict to fill (the weight cache)."""

    def swap(weight: torch.Tensor, bias: torch.Tensor | None, bits: int, dense_from: int | None) -> QuantizedLinear:
        if bits == 4 and not int4_fits(weight):
            bits = 8
        if empty:
            with torch.device("meta"):
                return QuantizedLinear(weight.shape[1], weight.shape[0], bits, dtype, bias is not None, dense_from)
        return QuantizedLinear.from_weight(weight.data, None if bias is None else bias.data, bits, dtype, dense_from)

    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child is not model.lm_head:
                setattr(module, child_name, swap(child.weight, child.bias, q.layer_bits, q.layer_dense_from))
    head = model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
    model.quantized_head = swap(head, None, q.head_bits, q.head_dense_from)
    model.lm_head = None  # the quantized head replaces it (and holds its dense weight when kept)
