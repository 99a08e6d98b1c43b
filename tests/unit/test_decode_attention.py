"""The native decode-attention kernel against the torch path it replaces."""

from __future__ import annotations

import shutil

import pytest
import torch

from inferd.arch.attention import ContextView, _decode_attention
from inferd.kernels import decode_attention, isa

BF16 = torch.bfloat16

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def builds():
    """Every build this CPU can run (avx512, avx2, portable), by its own flags."""
    return [pytest.param(tuple(isa.march_flags(name)), marks=needs_compiler, id=name) for name in isa.runnable()]


def padded_view(lengths: list[int], width: int, num_slots: int, generator: torch.Generator) -> ContextView:
    """Each row's context at scattered slots, padded to `width` with masked repeats."""
    slots = torch.stack([torch.randperm(num_slots, generator=generator)[:width] for _ in lengths])
    mask = torch.zeros(len(lengths), width)
    for row, length in enumerate(lengths):
        mask[row, length:] = float("-inf")
        slots[row, length:] = slots[row, length - 1]
    return ContextView(slots=slots, mask=mask[:, None, None, :])


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(4, 1, 256), (8, 2, 64), (6, 2, 64), (5, 1, 32), (4, 2, 80), (4, 4, 24)])
def test_matches_the_torch_path(build, heads, kv_heads, dim):
    generator = torch.Generator().manual_seed(heads * dim)
    k_cache = torch.randn(300, kv_heads, dim, generator=generator).to(BF16)
    v_cache = torch.randn(300, kv_heads, dim, generator=generator).to(BF16)
    view = padded_view([1, 37, 128, 64], 128, 300, generator)
    q = torch.randn(4, heads, dim, generator=generator).to(BF16)
    out = torch.empty_like(q)
    decode_attention.decode_attention(q, k_cache, v_cache, view.slots, view.mask, dim**-0.5, out,
                                      decode_attention.library(build))
    want = _decode_attention(q, k_cache, v_cache, view, dim**-0.5)
    torch.testing.assert_close(out.float(), want.float(), rtol=2**-7, atol=2**-9)
    # A single context slot returns its value exactly (softmax of one score is 1).
    assert torch.equal(out[0], v_cache[view.slots[0, 0]].repeat_interleave(heads // kv_heads, dim=0))


def test_a_row_does_not_depend_on_its_batch():
    generator = torch.Generator().manual_seed(0)
    k_cache, v_cache = (torch.randn(200, 1, 256, generator=generator).to(BF16) for _ in range(2))
    view = padded_view([50, 64, 20], 64, 200, generator)
    q = torch.randn(3, 4, 256, generator=generator).to(BF16)
    together = torch.empty_like(q)
    decode_attention.decode_attention(q, k_cache, v_cache, view.slots, view.mask, 0.0625, together)
    for row in range(3):
        alone = torch.empty_like(q[row : row + 1])
        mask = view.mask[row : row + 1].contiguous()
        decode_attention.decode_attention(q[row : row + 1], k_cache, v_cache, view.slots[row : row + 1].contiguous(),
                                          mask, 0.0625, alone)
        assert torch.equal(alone[0], together[row])


def test_queries_may_be_a_view_of_a_wider_tensor():
    """The model passes Q as the first heads of its joint Q/K tensor."""
    generator = torch.Generator().manual_seed(1)
    k_cache, v_cache = (torch.randn(64, 1, 32, generator=generator).to(BF16) for _ in range(2))
    view = padded_view([10, 5], 16, 64, generator)
    qk = torch.randn(2, 5, 32, generator=generator).to(BF16)
    q = qk[:, :4]
    assert decode_attention.supports(q, k_cache) == (decode_attention.library() is not None)
    out = torch.empty(2, 4, 32, dtype=BF16)
    decode_attention.decode_attention(q, k_cache, v_cache, view.slots, view.mask, 0.2, out)
    torch.testing.assert_close(out.float(), _decode_attention(q, k_cache, v_cache, view, 0.2).float(),
                               rtol=2**-7, atol=2**-9)


def test_what_it_does_not_take():
    k_cache = torch.zeros(8, 1, 16, dtype=BF16)
    assert not decode_attention.supports(torch.zeros(1, 2, 16), k_cache.float())  # float32
    assert not decode_attention.supports(torch.zeros(1, 2, 32, dtype=BF16)[:, :, :16], k_cache)  # strided heads
    q, slots, mask = torch.zeros(1, 3, 16, dtype=BF16), torch.zeros(1, 4, dtype=torch.int64), torch.zeros(1, 4)
    with pytest.raises(ValueError, match="3 query heads do not share 2 KV heads evenly"):
        decode_attention.decode_attention(q, torch.zeros(8, 2, 16, dtype=BF16), torch.zeros(8, 2, 16, dtype=BF16),
                                          slots, mask, 1.0, torch.empty_like(q))
    with pytest.raises(ValueError, match="int64 slots and a float32 mask"):
        decode_attention.decode_attention(q, k_cache, k_cache, slots.int(), mask, 1.0, torch.empty_like(q))


@needs_compiler
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(4, 1, 256), (6, 2, 64), (2, 1, 48), (4, 4, 24)])
def test_every_build_computes_the_same_bits(heads, kv_heads, dim):
    """Sums across lanes reduce in one fixed order, query-key products go by pairs in
    vdpbf16ps's order (where the CPU has AVX512-BF16, that instruction), and the exponential
    is one polynomial, so a greedy decode does not depend on the machine's vector width.
    A head of 48 ends with a half chunk of pairs."""
    generator = torch.Generator().manual_seed(dim)
    k_cache, v_cache = (torch.randn(400, kv_heads, dim, generator=generator).to(BF16) for _ in range(2))
    view = padded_view([3, 77, 300, 161], 300, 400, generator)
    q = torch.randn(4, heads, dim, generator=generator).to(BF16)
    outs = {}
    for name in isa.runnable():
        outs[name] = torch.empty_like(q)
        decode_attention.decode_attention(q, k_cache, v_cache, view.slots, view.mask, dim**-0.5, outs[name],
                                          decode_attention.library(tuple(isa.march_flags(name))))
    first = next(iter(outs.values()))
    for name, out in outs.items():
        assert torch.equal(out, first), f"{name} differs"
