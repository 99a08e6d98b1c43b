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


# -- a chunk's rows as decode rows (PrefillSpan.rows: inferd's kernel, bf16 on CPU) ----------------
BLOCK = 16


@pytest.fixture(scope="module")
def runner(tiny_model_dir):
    from inferd.engine.runner import ModelRunner
    from inferd.models.loader import load_model

    loaded = load_model(str(tiny_model_dir), dtype="bfloat16")
    runner = ModelRunner(loaded.model, num_blocks=16, block_size=BLOCK, dtype=torch.bfloat16,
                         device=torch.device("cpu"))
    if not runner.rows_attention:
        pytest.skip("inferd's decode attention kernel is not built here")
    return runner


def _chunk(runner, cached: int, new: int, window: int | None, seed: int):
    """q, k, v of a chunk of `new` rows after `cached` tokens in a cache of scattered blocks,
    the runner's span for it, and the mask (bool [new, total]) a row may see."""
    torch.manual_seed(seed)
    total = cached + new
    runner.window = window
    table = torch.tensor([5, 2, 11, 7, 0, 9, 3, 14])[: -(-total // BLOCK)]
    k_cache, v_cache = runner.kv_caches[0]
    k, v = (torch.randn(total, *k_cache.shape[1:], dtype=torch.bfloat16) for _ in range(2))  # the model's KV heads
    pos = torch.arange(total)
    slots = table[pos // BLOCK] * BLOCK + pos % BLOCK
    k_cache[slots], v_cache[slots] = k, v  # the chunk's own rows too, as paged_attention writes them
    q = torch.randn(new, HEADS, k_cache.shape[2], dtype=torch.bfloat16)
    span = runner._prefill_span(0, cached, new, table)
    query = torch.arange(cached, total)[:, None]
    mask = pos[None, :] <= query
    if window is not None:
        mask &= pos[None, :] > query - window
    return q, k, v, span, slots, mask


@pytest.mark.parametrize("cached, new, window", [(0, 5, None), (0, 100, None), (19, 7, None), (40, 1, None),
                                                 (0, 100, 24), (30, 70, 24), (3, 60, 64)])
def test_a_chunk_attends_row_by_row_as_softmax_attention_does(runner, cached, new, window):
    q, k, v, span, slots, mask = _chunk(runner, cached, new, window, seed=cached * 100 + new)
    assert span.rows is not None and (span.rows.start, span.rows.end) == (0, new)
    caches, scale = runner.kv_caches[0], q.shape[2] ** -0.5
    meta = AttentionMetadata(slot_mapping=slots[cached:], prefills=[span])
    out = paged_attention(q, k[cached:], v[cached:], caches, meta, scale, sliding=window is not None, kv_stored=True)
    expected = reference_scaled(q, k, v, mask, scale)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
    # torch's fused kernel, on the same chunk, agrees to bf16 rounding.
    span.rows = None
    fused = paged_attention(q, k[cached:], v[cached:], caches, meta, scale, sliding=window is not None, kv_stored=True)
    torch.testing.assert_close(out.float(), fused.float(), atol=2e-2, rtol=2e-2)


def test_a_prompt_row_attends_exactly_as_the_same_row_decoded(runner):
    # Prefill and decode compute a position's attention in one kernel over the same slots:
    # the same bits, so a token does not depend on whether its row came in a prompt.
    q, k, v, span, slots, _ = _chunk(runner, 20, 30, 24, seed=7)
    caches, scale = runner.kv_caches[0], q.shape[2] ** -0.5
    prompt = paged_attention(q, k[20:], v[20:], caches, AttentionMetadata(slots[20:], prefills=[span]), scale,
                             sliding=True, kv_stored=True)
    for row in (0, 13, 29):
        length = 20 + row + 1
        group = runner._decode_groups([length], [span_table(length)])
        one = paged_attention(q[row:row + 1], k[length - 1:length], v[length - 1:length], caches,
                              AttentionMetadata(slots[length - 1:length], decodes=group), scale, sliding=True,
                              kv_stored=True)
        assert torch.equal(one[0], prompt[row])


def span_table(length: int) -> list[int]:
    return [5, 2, 11, 7, 0, 9, 3, 14][: -(-length // BLOCK)]


def reference_scaled(q, k, v, mask, scale):
    k, v = (t.float().repeat_interleave(q.shape[1] // k.shape[1], dim=1).transpose(0, 1) for t in (k, v))
    scores = q.float().transpose(0, 1) @ k.transpose(1, 2) * scale
    return torch.softmax(scores.masked_fill(~mask, -torch.inf), -1).matmul(v).transpose(0, 1)
