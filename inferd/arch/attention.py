"""Attention over the paged KV cache.

The KV cache of one layer is a pair of tensors [num_slots, kv_heads, head_dim];
slot = block_id * block_size + offset. Each step the runner describes the
batch once (`AttentionMetadata`) and every layer reuses it:

- decode rows (one query token each) come first, grouped by context length
  rounded up to a bucket; each group is attended in one batched call over
  its gathered, padded contexts. Padding depends only on a row's own
  length, so a row's result does not depend on its neighbours (batch
  invariance: the attention kernel's reduction changes with padded length);
- each prefill chunk then attends its own context (cached prefix + chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class ContextView:
    """Which cache slots a group of queries reads, and which of them it may see."""

    slots: torch.Tensor  # [B, L] int64 (decode) or [L] (one prefill chunk)
    mask: torch.Tensor | None  # bool, True = attend; broadcastable to [B, H, Q, L]


@dataclass
class PrefillSpan:
    start: int  # first row of the chunk in the flattened batch
    end: int
    cold: bool  # the chunk is the whole context: attend to its own K/V, no gather
    full: ContextView
    sliding: ContextView | None = None


@dataclass
class DecodeGroup:
    start: int  # rows [start, end) of the flattened batch, one token each
    end: int
    full: ContextView
    sliding: ContextView | None = None


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] where each new token's K/V is written
    decodes: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillSpan] = field(default_factory=list)


KVCache = tuple[torch.Tensor, torch.Tensor]


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, Hkv, D]
    v: torch.Tensor,
    cache: KVCache,
    meta: AttentionMetadata,
    scale: float,
    sliding: bool,
) -> torch.Tensor:
    k_cache, v_cache = cache
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    gqa = q.shape[1] != k.shape[1]
    for group in meta.decodes:
        view = group.sliding if sliding and group.sliding is not None else group.full
        kc = k_cache[view.slots].transpose(1, 2)  # [B, Hkv, L, D]
        vc = v_cache[view.slots].transpose(1, 2)
        o = F.scaled_dot_product_attention(
            q[group.start : group.end].unsqueeze(2), kc, vc, attn_mask=view.mask, scale=scale, enable_gqa=gqa
        )
        out[group.start : group.end] = o.squeeze(2)
    for span in meta.prefills:
        view = span.sliding if sliding and span.sliding is not None else span.full
        qs = q[span.start : span.end].transpose(0, 1)  # [H, n, D]
        if span.cold:
            ks, vs = k[span.start : span.end], v[span.start : span.end]
        else:
            ks, vs = k_cache[view.slots], v_cache[view.slots]
        o = F.scaled_dot_product_attention(
            qs, ks.transpose(0, 1), vs.transpose(0, 1),
            attn_mask=view.mask, is_causal=view.mask is None, scale=scale, enable_gqa=gqa,
        )
        out[span.start : span.end] = o.transpose(0, 1)
    return out
