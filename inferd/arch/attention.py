"""Attention over the paged KV cache.

The KV cache of one layer is a pair of tensors [num_slots, kv_heads, head_dim];
slot = block_id * block_size + offset. Each step the runner describes the
batch once (`AttentionMetadata`) and every layer reuses it:

- decode rows (one query token each) come first, grouped by context length
  rounded up to a bucket; on CPU (with a bf16 cache: float32 engines
  keep one too, their query rows rounded to bf16) each group is one call of
  inferd's kernel (`inferd.kernels.decode_attention`), which reads K and V
  from their slots; elsewhere one batched float32 matmul-softmax-matmul
  over the gathered, padded contexts (for one query row several times
  faster than the fused SDPA kernel, whose fixed cost dominates at this
  size). Padding depends only on a row's own length, so a row's result
  does not depend on its neighbours (batch invariance: the reduction
  changes with padded length);
- each prefill chunk then attends its own context (cached prefix + chunk):
  on CPU with a bf16 engine each of its rows as a decode row over its own
  causal window, in the same kernel (2-2.7x faster than torch's fused
  kernel for a 100-token prompt, 1.4x at 512 tokens with a sliding window);
  elsewhere torch's fused kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from inferd.kernels import decode_attention


@dataclass
class ContextView:
    """Which cache slots a group of queries reads, and which of them it may see."""

    slots: torch.Tensor  # [B, L] int64 (decode) or [L] (one prefill chunk)
    mask: torch.Tensor | None  # prefill: bool [Q, L], True = attend; decode: float32 [B, 1, 1, L], 0 or -inf


@dataclass
class DecodeGroup:
    start: int  # rows [start, end) of the flattened batch, one token each
    end: int
    full: ContextView
    sliding: ContextView | None = None


@dataclass
class PrefillSpan:
    start: int  # first row of the chunk in the flattened batch
    end: int
    cold: bool  # the chunk is the whole context: attend to its own K/V, no gather
    full: ContextView
    sliding: ContextView | None = None
    # The chunk's rows as decode rows, each over its own causal window: inferd's kernel
    # computes them where it runs (engine/runner.py decides), torch's fused one otherwise.
    rows: DecodeGroup | None = None


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] where each new token's K/V is written
    decodes: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillSpan] = field(default_factory=list)


KVCache = tuple[torch.Tensor, torch.Tensor]


def prefill_rows_native(compute_dtype: torch.dtype, cache_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether prefill chunks' rows attend in inferd's decode kernel (`PrefillSpan.rows`)."""
    return (device.type == "cpu" and compute_dtype == cache_dtype == torch.bfloat16
            and decode_attention.library() is not None)


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, Hkv, D]
    v: torch.Tensor,
    cache: KVCache,
    meta: AttentionMetadata,
    scale: float,
    sliding: bool,
    kv_stored: bool = False,
) -> torch.Tensor:
    """Writes k and v to their cache slots (unless `kv_stored`: already
    there), then attends each query row."""
    k_cache, v_cache = cache
    stored = k_cache.dtype  # bf16 under a float32 CPU engine (engine/runner.py)
    if k.dtype != stored:  # what the cache holds is what every later read sees
        k, v = k.to(stored), v.to(stored)
    if not kv_stored:
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    gqa = q.shape[1] != k.shape[1]
    decode_rows = max((group.end for group in meta.decodes), default=0)  # the rows before any prefill
    q_decode = q[:decode_rows] if q.dtype == stored else q[:decode_rows].to(stored)
    native = bool(meta.decodes) and decode_attention.supports(q_decode, k_cache)
    out_decode = out[:decode_rows] if q.dtype == stored else torch.empty_like(q_decode)
    for group in meta.decodes:
        view = _view(group, sliding)
        rows = slice(group.start, group.end)
        if native:
            decode_attention.decode_attention(q_decode[rows], k_cache, v_cache, view.slots, view.mask, scale,
                                              out_decode[rows])
        else:
            out_decode[rows] = _decode_attention(q_decode[rows], k_cache, v_cache, view, scale)
    if q.dtype != stored and decode_rows:
        out[:decode_rows] = out_decode
    native_rows = any(span.rows for span in meta.prefills) and q.dtype == stored \
        and decode_attention.supports(q, k_cache)
    for span in meta.prefills:
        if span.rows is not None and native_rows:
            view, rows = _view(span.rows, sliding), slice(span.rows.start, span.rows.end)
            decode_attention.decode_attention(q[rows], k_cache, v_cache, view.slots, view.mask, scale, out[rows])
            continue
        view = _view(span, sliding)
        qs, mask = q[span.start : span.end], view.mask
        if span.cold:
            ks, vs = k[span.start : span.end], v[span.start : span.end]
        else:
            ks, vs = k_cache.index_select(0, view.slots), v_cache.index_select(0, view.slots)
        ks, vs = ks.to(q.dtype), vs.to(q.dtype)
        if q.device.type == "cpu":
            qs, ks, vs, mask = _pad_lengths(qs, ks, vs, mask)
        # With a batch dimension (4-D inputs) torch takes its fused CPU kernel; 3-D inputs
        # fall back to the unfused math path, ~5x slower for a 1,024-token chunk.
        o = F.scaled_dot_product_attention(
            qs.transpose(0, 1)[None], ks.transpose(0, 1)[None], vs.transpose(0, 1)[None],
            attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=gqa,
        )
        out[span.start : span.end] = o[0, :, : span.end - span.start].transpose(0, 1)
    return out


def _view(rows: DecodeGroup | PrefillSpan, sliding: bool) -> ContextView:
    """What `rows` read on this layer: their window's view on a sliding layer, where they have one."""
    return rows.sliding if sliding and rows.sliding is not None else rows.full


# torch's fused CPU attention compiles kernels for the tail of each query and key
# length it meets and keeps them for the life of the process (~0.4 MB a length):
# lengths padded to a multiple of this keep that set small.
LENGTH_GRANULE = 32


def _pad_lengths(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None):
    """Pads queries and keys ([n, H, D], [L, Hkv, D]) to multiples of LENGTH_GRANULE.
    Padded keys are never seen by a real query (the causal mask, or a False column);
    padded queries see every key, so their rows, which are dropped, are finite."""
    q_pad, kv_pad = -q.shape[0] % LENGTH_GRANULE, -k.shape[0] % LENGTH_GRANULE
    if not q_pad and not kv_pad:
        return q, k, v, mask
    if mask is None and q.shape[0] != k.shape[0]:
        raise ValueError("a causal span without a mask attends to exactly its own keys")
    if mask is not None:
        mask = F.pad(F.pad(mask, (0, kv_pad), value=False), (0, 0, 0, q_pad), value=True)
    rows = (0, 0, 0, 0)
    return F.pad(q, (*rows, 0, q_pad)), F.pad(k, (*rows, 0, kv_pad)), F.pad(v, (*rows, 0, kv_pad)), mask


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, view: ContextView,
                      scale: float) -> torch.Tensor:
    """One query row per sequence: q [B, H, D] over B gathered contexts of L slots."""
    b, heads, dim = q.shape
    length = view.slots.shape[1]
    kv_heads = k_cache.shape[1]
    flat = view.slots.reshape(-1)
    k = k_cache.index_select(0, flat).view(b, length, kv_heads, dim).permute(0, 2, 3, 1).float()  # [B, Hkv, D, L]
    v = v_cache.index_select(0, flat).view(b, length, kv_heads, dim).transpose(1, 2).float()  # [B, Hkv, L, D]
    grouped = q.view(b, kv_heads, heads // kv_heads, dim).float()  # query heads sharing a KV head
    scores = torch.matmul(grouped, k).mul_(scale).add_(view.mask)  # [B, Hkv, G, L]
    o = torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, Hkv, G, D]
    return o.view(b, heads, dim).to(q.dtype)
