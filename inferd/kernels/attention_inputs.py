"""QK-norm, RoPE and the KV-cache write in one call (attention_inputs.c).

Between the QKV projection and attention, the torch path runs about a dozen
small ops per layer (norm, roll, multiplies, add, slicing, two index copies);
at decode sizes each is mostly dispatch overhead. This is one call, with the
same roundings, so its values are identical.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import F32, I64, INT, PTR, load_kernel


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    # float32 rows are rotated as torch's ops do it: each product rounded before the sum.
    return load_kernel(Path(__file__).with_name("attention_inputs.c"), ("-ffp-contract=off", *extra_flags),
                       inferd_attention_inputs=([PTR, I64, I64, I64, I64, I64, PTR, F32, INT, PTR, PTR, PTR, PTR, PTR,
                                                 PTR, INT], None))


def supports(qkv: torch.Tensor, cos: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """bf16 (or float32 rows and tables beside a bf16 cache) on CPU, rows of
    contiguous heads, contiguous caches and tables, and the kernel built."""
    return (qkv.dtype == cos.dtype in (torch.bfloat16, torch.float32) and k_cache.dtype == torch.bfloat16
            and qkv.is_cpu and qkv.dim() == 2
            and qkv.stride(1) == 1 and cos.is_contiguous() and k_cache.is_contiguous() and library() is not None)


def attention_inputs(qkv: torch.Tensor, num_heads: int, num_kv_heads: int, head_dim: int,
                     norm_weight: torch.Tensor | None, eps: float, scale_in_float: bool, cos: torch.Tensor,
                     signed_sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     slot_mapping: torch.Tensor, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """From qkv [T, (H + 2 Hkv) D]: Q and K normed (when `norm_weight` [H + Hkv, D]
    is given) and rotated, [T, H + Hkv, D]; K and V written to `slot_mapping`'s
    cache slots. cos/signed_sin: `RotaryEmbedding`'s tables, [T, 1, D]."""
    tokens = qkv.shape[0]
    if norm_weight is not None and not (norm_weight.dtype == torch.float32 and norm_weight.is_contiguous()):
        raise ValueError("the QK-norm weight must be a contiguous float32 [H + Hkv, D] tensor")
    if not (v_cache.is_contiguous() and slot_mapping.dtype == torch.int64 and slot_mapping.is_contiguous()
            and signed_sin.is_contiguous() and slot_mapping.shape == (tokens,)):
        raise ValueError("the V cache, the slot mapping and the rotary tables must be contiguous, one slot per token")
    qk = torch.empty((tokens, num_heads + num_kv_heads, head_dim), dtype=qkv.dtype)
    (lib or library()).inferd_attention_inputs(
        qkv.data_ptr(), qkv.stride(0), tokens, num_heads, num_kv_heads, head_dim,
        None if norm_weight is None else norm_weight.data_ptr(), eps, int(scale_in_float), cos.data_ptr(),
        signed_sin.data_ptr(), qk.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), slot_mapping.data_ptr(),
        int(qkv.dtype == torch.float32))
    return qk
