"""Fit a loaded model's projections and LM head to the CPU kernels.

Schemes (`--weights`):
- `auto` (default): `gguf` for a GGUF file where inferd's kernels run
  (CPU, bf16 or float32), else `bf16`.
- `gguf`: the file's own quantized blocks (`arch.file_blocks`), exact.
- `bf16`: every weight in the engine dtype; on CPU the
  projections and a copy of the LM head are reordered once for oneDNN
  (`PackedLinear`), which gives the same results faster.
- `mixed`: int8 projections and an int4 LM head (the largest matrix: 63%
  of the bundled model's weight bytes) for decode steps, which are bound by
  memory bandwidth; prefill, bound by compute, uses the packed bf16
  projections. Faster decoding, lossy: see `benchmarks/weights_agreement.py`
  for how often it follows bf16.
- `int8` / `int4`: every projection and the LM head quantized (projections
  whose shape the int4 kernel cannot take fall back to int8).

Where inferd's own kernels are built for the CPU (`inferd.kernels`,
AVX-512 VNNI) the quantized layers use them: they also quantize activations
to int8 per group of 32 inputs, and stay ahead of the dense GEMM up to eight
rows, so `mixed` serves steps of up to eight rows from the quantized
projections, and the int4 head at every width. With torch's kernels `mixed`
switches to the dense weights from 3 rows (projections) and 12 (head).

Norms, embeddings (a lookup reads one row per token) and the KV cache stay
in the engine dtype.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from inferd.arch.base import CausalLM
from inferd.arch.gguf_linear import GGUFLinear
from inferd.arch.packed_linear import PackedLinear, can_pack, pack_all
from inferd.arch.quantized_linear import QuantizedLinear, can_tile, int4_fits
from inferd.kernels import gguf_gemv, quant_gemv

WEIGHT_SCHEMES = ("auto", "gguf", "bf16", "mixed", "int8", "int4")


@dataclass(frozen=True)
class Quantization:
    layer_bits: int
    head_bits: int
    # Rows from which the dense weight is used instead; None keeps no dense copy.
    # Measured on a 2-core AVX-512 CPU, whole decode steps: int8 projections
    # win only at 1-2 rows over packed bf16; the int4 262k-row head below ~12.
    layer_dense_from: int | None = None
    head_dense_from: int | None = None


SCHEMES = {
    "mixed": Quantization(8, 4, layer_dense_from=3, head_dense_from=12),
    "int8": Quantization(8, 8),
    "int4": Quantization(4, 4),
}
# With inferd's kernels, from this many rows the dense weight is faster (they
# take up to eight rows per pass over the weights; measured as above).
TILED_DENSE_FROM = quant_gemv.MAX_ROWS + 1


def resolve_weights(scheme: str, dtype: torch.dtype, device: torch.device) -> Quantization | None:
    """The quantization to apply, or None to keep the engine dtype (or the file's blocks)."""
    if scheme not in WEIGHT_SCHEMES:
        raise ValueError(f"--weights {scheme!r} is not one of: {', '.join(WEIGHT_SCHEMES)}")
    if scheme in ("auto", "gguf", "bf16"):
        return None
    if device.type != "cpu":
        raise ValueError(f"--weights {scheme} runs on CPU only; use --weights bf16 on {device.type}")
    return SCHEMES[scheme]


def uses_file_blocks(scheme: str, path: Path, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether `scheme` computes from a GGUF file's own blocks here: `gguf` insists
    (and says why it cannot), `auto` takes them wherever it can."""
    if scheme not in ("auto", "gguf"):
        return False
    why_not = None
    if not path.is_file():
        why_not = "the model is not a GGUF file"
    elif device.type != "cpu":
        why_not = f"it runs on CPU only, not {device.type}"
    elif dtype not in (torch.bfloat16, torch.float32):
        why_not = f"it computes with bf16 or float32 activations, not --dtype {str(dtype).removeprefix('torch.')}"
    elif not gguf_gemv.available():
        why_not = "inferd's kernels cannot be built here (no C compiler, or INFERD_NATIVE_KERNELS=0)"
    if why_not is not None and scheme == "gguf":
        raise ValueError(f"--weights gguf cannot be used: {why_not}; use --weights bf16")
    return why_not is None


def weights_label(q: Quantization | None, dtype: torch.dtype) -> str:
    """Names what `quantize_model` builds here, for the weight cache: the
    scheme, the dtype and the kernels' layout."""
    layout = "-tiled" if q is not None and dtype == torch.bfloat16 and quant_gemv.available() else ""
    return f"{q}-{dtype}{layout}"


def quantize_model(model: CausalLM, q: Quantization, dtype: torch.dtype, empty: bool = False) -> None:
    """Replace the projections and the LM head with quantized layers.
    `empty`: only the structure, with empty (meta) buffers, for a state dict
    to fill (the weight cache)."""

    def swap(weight: torch.Tensor, bias: torch.Tensor | None, bits: int, dense_from: int | None,
             head: bool = False) -> QuantizedLinear:
        tiled = can_tile(weight, dtype)
        if bits == 4 and not (tiled or int4_fits(weight)):
            bits = 8
        if tiled and dense_from is not None:
            # The head computes logits only for rows that sample, one per sequence: passes of eight rows
            # over its int4 weight beat the packed bf16 GEMM well past eight (15 against 32 ms at 16 rows),
            # so it keeps no dense copy, and a tied embedding is left to lookups (served from a map).
            dense_from = None if head else TILED_DENSE_FROM
        if empty:
            with torch.device("meta"):
                return QuantizedLinear(weight.shape[1], weight.shape[0], bits, dtype, bias is not None, dense_from,
                                       tiled)
        return QuantizedLinear.from_weight(weight.data, None if bias is None else bias.data, bits, dtype, dense_from,
                                           tiled)

    for module, name, linear in _projections(model):
        setattr(module, name, swap(linear.weight, linear.bias, q.layer_bits, q.layer_dense_from))
    head = model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
    model.fast_head = swap(head, None, q.head_bits, q.head_dense_from, head=True)
    model.fast_head.kernel_out_dtype = torch.float32  # logits: no bf16 rounding, no conversion after
    model.lm_head = None  # the quantized head replaces it (and holds its dense weight when kept)


def pack_for_cpu(model: CausalLM, dtype: torch.dtype, device: torch.device) -> None:
    """Reorder every remaining float projection, and the LM head unless it is
    quantized, for oneDNN; a no-op where that does not apply. All in one
    call that holds no GIL (`pack_all`), so it may run on a thread beside other loading."""
    if not can_pack(dtype, device):
        return
    layers: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    installs = []  # what to do with each packed layer, in the order of `layers`
    for module, name, linear in _projections(model):
        layers.append((linear.weight, linear.bias))
        installs.append(functools.partial(setattr, module, name))
    tied = model.embed_tokens.weight.data_ptr()
    for module in model.modules():
        if isinstance(module, (QuantizedLinear, GGUFLinear)) and module.dense is not None \
                and module.dense.data_ptr() != tied:
            layers.append((module.dense, module.bias))
            installs.append(functools.partial(_replace_dense, module))
    if model.fast_head is None:
        layers.append((model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight, None))
        installs.append(functools.partial(_install_head, model))
    for install, packed in zip(installs, pack_all(layers)):
        install(packed)


def _replace_dense(module: QuantizedLinear | GGUFLinear, packed: PackedLinear) -> None:
    module.packed_dense = packed
    module.dense = None


def _install_head(model: CausalLM, packed: PackedLinear) -> None:
    model.fast_head = packed
    model.lm_head = None


def _projections(model: CausalLM) -> list[tuple[nn.Module, str, nn.Linear]]:
    return [(module, name, child) for module in model.modules() for name, child in module.named_children()
            if isinstance(child, nn.Linear) and child is not model.lm_head]
