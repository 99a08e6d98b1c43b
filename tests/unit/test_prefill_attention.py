"""Prefill attention pads query and key lengths to a multiple of LENGTH_GRANULE
on CPU (torch's fused kernel keeps compiled kernels per length, forever): the
padding must be invisible in the result."""

from __future__ import annotations

import pytest
import torch

from inferd.arch.attention import LENGTH_GRANULE, AttentionMetadata, ContextView, PrefillSpan, _pad_lengths, \
    paged_attention

HEADS, KV_HEADS, DIM = 4, 1, 64


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """float32 softmax attention: q [n, H, D], k and v [L, Hkv, D], mask bool [n, L]."""
    k, v = (t.float().repeat_interleave(HEADS // KV_HEADS, dim=1).transpose(0, 1) for t in (k, v))
    scores = q.float().transpose(0, 1) @ k.transpose(1, 2) / DIM ** 0.5
    return torch.softmax(scores.masked_fill(~mask, -torch.inf), -1).matmul(v).transpose(0, 1)


@pytest.mark.parametrize("cached, new", [(0, 5), (0, 37), (0, 64), (19, 7), (40, 1), (3, 60)])
def test_a_prefill_span_attends_as_unpadded_attention_does(cached, new):
    torch.manual_seed(cached * 100 + new)
    total = cached + new
    q = torch.randn(new, HEADS, DIM, dtype=torch.bfloat16)
    k, v = (torch.randn(total, KV_HEADS, DIM, dtype=torch.bfloat16) for _ in range(2))
    k_cache, v_cache = (torch.zeros(128, KV_HEADS, DIM, dtype=torch.bfloat16) for _ in range(2))
    slots = torch.arange(total) + 3
    k_cache[slots[:cached]], v_cache[slots[:cached]] = k[:cached], v[:cached]
    mask = torch.ones(new, total, dtype=torch.bool).tril(cached)
    view = ContextView(slots, None if cached == 0 else mask)
    meta = AttentionMetadata(slot_mapping=slots[cached:], prefills=[PrefillSpan(0, new, cached == 0, view)])
    out = paged_attention(q, k[cached:], v[cached:], (k_cache, v_cache), meta, DIM ** -0.5, sliding=False)
    assert out.shape == q.shape
    torch.testing.assert_close(out.float(), reference(q, k, v, mask), atol=2e-2, rtol=2e-2)


def test_padding_reaches_the_granule_and_hides_padded_keys():
    q, k = torch.randn(7, HEADS, DIM), torch.randn(50, KV_HEADS, DIM)
    mask = torch.ones(7, 50, dtype=torch.bool)
    qp, kp, vp, mp = _pad_lengths(q, k, k, mask)
    assert (qp.shape[0], kp.shape[0], vp.shape[0]) == (LENGTH_GRANULE, 2 * LENGTH_GRANULE, 2 * LENGTH_GRANULE)
    assert mp.shape == (LENGTH_GRANULE, 2 * LENGTH_GRANULE)
    assert mp[:7, :50].all() and not mp[:7, 50:].any()  # real queries never see a padded key
    assert mp[7:].all()  # padded queries see every key: finite rows, dropped
    assert _pad_lengths(q[:0].new_zeros(32, HEADS, DIM), k[:32], k[:32], None)[3] is None
