"""`--weights gguf`: a GGUF model's projections and LM head computed from
the file's own quantized blocks (`GGUFLinear`), the default for GGUF files.

Exact where `mixed` re-quantizes: the weights are the file's, and decode
steps read them at their stored size. A projection whose tensors are in a
format the kernels do not compute (F16, Q2_K...) stays dense.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import nn

from inferd.arch.base import FUSED, CausalLM, normalize_name
from inferd.arch.gguf_linear import GGUFLinear
from inferd.arch.packed_linear import PackedLinear
from inferd.arch.quantized_linear import QuantizedLinear
from inferd.kernels import gguf_gemv, isa

FORMATS = tuple(gguf_gemv.BLOCKS)
# Rows from which a dense copy is faster than the file's blocks in tiles, where
# the model keeps one (`keeps_dense_copies`). Measured on whole decode steps of
# the bundled model, 2-core AVX-512 CPU with AMX: see BENCHMARKS.md ("Tiles").
# A step that only decodes takes the tiles whatever this says, at any width
# (up to 24 rows beside AMX's dense copies, 8 beside a portable build's: see
# arch/fused_decode.py `rows_limit`; without the Python between its kernels
# they beat the dense weight); this decides for the modules, prefill chunks
# included.
# The head's tiles beat its dense bf16 copy (twice the bytes) up to two passes
# of the kernel beside AMX (at 24 rows the copy's steps were 3-7% faster there,
# BENCHMARKS.md, session 24), and on Zen 4's AVX512-BF16 up to four at least (24
# and 32 rows: 1.9x and 1.4x the copy's decode steps; BENCHMARKS.md, session
# 23), so at --parallel 8 that copy is never read and its pages never loaded.
LAYER_DENSE_FROM = 5
HEAD_DENSE_FROM = 2 * gguf_gemv.MAX_ROWS + 1
WIDE_HEAD_DENSE_FROM = 4 * gguf_gemv.MAX_ROWS + 1
# The portable build (no vector path) keeps float32 copies of the layers past
# one pass of its scalar kernel; a float32 head's would be the whole tied
# embedding in float32 (670 MB for the bundled model).
FLOAT32_LAYER_DENSE_FROM = gguf_gemv.MAX_ROWS + 1
_FUSED_PARTS = {"qkv_proj": 3, "gate_up_proj": 2}


def keeps_dense_copies(dtype: torch.dtype) -> bool:
    """Whether the projections keep a dense copy in `dtype` for many rows (a
    prefill chunk). Only bf16 where oneDNN runs it at full rate computes a
    chunk faster than the integer products over the file's blocks (AMX tiles:
    1.8x; AMD's AVX512-BF16: 1.2-1.4x; bundled model, 2 cores); elsewhere the
    products win (Intel's AVX-512 BF16 without AMX: 1.5-1.7x; float32 on
    AVX2: as fast or faster), and the copy only costs memory. The portable
    build, whose products are scalar C, keeps one too. BENCHMARKS.md,
    sessions 14 and 18."""
    return not gguf_gemv.vectorized() or (dtype == torch.bfloat16 and isa.fast_bf16_matmul())


def blocks_label(dtype: torch.dtype) -> str:
    """Names what `use_file_blocks` builds here, for the weight cache."""
    return f"gguf-tiles-{gguf_gemv.tile_layout()}-{dtype}{'' if keeps_dense_copies(dtype) else '-blocks-only'}"


def head_dense_from() -> int:
    """Rows from which a bf16 head with a dense copy reads it rather than its tiles."""
    return HEAD_DENSE_FROM if isa.amx_bf16() or not gguf_gemv.vectorized() else WIDE_HEAD_DENSE_FROM


def _dense_from(dtype: torch.dtype, head: bool) -> int | None:
    if not keeps_dense_copies(dtype):
        return None
    if dtype == torch.float32:
        return None if head else FLOAT32_LAYER_DENSE_FROM
    return head_dense_from() if head else LAYER_DENSE_FROM


def use_file_blocks(model: CausalLM, formats: dict[str, tuple[str, int]], raws: dict[str, torch.Tensor] | None,
                    dtype: torch.dtype) -> None:
    """Swap in `GGUFLinear` layers. `formats`: checkpoint name -> (block format,
    rows) (`gguf_block_formats`); `raws`: checkpoint name -> the file's bytes, or
    None for the structure alone, with empty buffers for a state dict to fill."""
    head_name = "embed_tokens.weight" if model.lm_head is None else "lm_head.weight"
    layers: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for name in formats:
        local = normalize_name(name)
        if local == head_name or not local.endswith(".weight"):
            continue
        parent, _, proj = local.removesuffix(".weight").rpartition(".")
        fused, shard = FUSED.get(proj, (proj, 0))
        layers[f"{parent}.{fused}" if parent else fused].append((shard, name))

    for path, members in layers.items():
        linear = model.get_submodule(path)
        if not isinstance(linear, nn.Linear) or len(members) != _FUSED_PARTS.get(path.rsplit(".", 1)[-1], 1):
            continue
        parts = [(formats[name], name) for _, name in sorted(members)]
        if not all(gguf_gemv.supports(block_format, linear.in_features) for (block_format, _), _ in parts):
            continue
        _swap(model, path, _layer(linear.weight, linear.bias, parts, raws, dtype, _dense_from(dtype, head=False)))

    head_names = [name for name in formats if normalize_name(name) == head_name]
    head = model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight
    if head_names and gguf_gemv.supports(formats[head_names[0]][0], head.shape[1]):
        model.fast_head = _layer(head, None, [(formats[head_names[0]], head_names[0])], raws, dtype,
                                 _dense_from(dtype, head=True))
        model.fast_head.kernel_out_dtype = torch.float32  # logits: no bf16 rounding, no conversion after
        model.lm_head = None


def computes_lone_rows_exactly(model: CausalLM) -> bool:
    """Every projection and the LM head is the file's blocks, so rows marked as
    lone decode rows (`arch/decode_rows.py`) come out bit for bit as a step of
    one row would compute them. A dense or re-quantized projection switches
    kernels with the row count and does not promise it."""
    return isinstance(model.fast_head, GGUFLinear) and _only_file_blocks(model)


def _only_file_blocks(module: nn.Module) -> bool:
    for child in module.children():
        if isinstance(child, GGUFLinear):
            continue  # its dense copy (a PackedLinear child) serves rows past the lone ones only
        if isinstance(child, (nn.Linear, PackedLinear, QuantizedLinear)) or not _only_file_blocks(child):
            return False
    return True


def _layer(weight: torch.Tensor, bias: torch.Tensor | None, parts: list[tuple[tuple[str, int], str]],
           raws: dict[str, torch.Tensor] | None, dtype: torch.dtype, dense_from: int | None) -> GGUFLinear:
    if raws is None:
        with torch.device("meta"):
            return GGUFLinear(weight.shape[1], [(block_format, rows) for (block_format, rows), _ in parts], dtype,
                              bias is not None, dense_from)
    return GGUFLinear.from_parts([(block_format, raws[name]) for (block_format, _), name in parts], weight.data,
                                 None if bias is None else bias.data, dtype, dense_from)


def _swap(model: nn.Module, path: str, layer: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, layer)
