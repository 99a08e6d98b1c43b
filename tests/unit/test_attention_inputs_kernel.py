"""The native attention-inputs kernel (QK-norm, RoPE, KV-cache write) gives
exactly the values of the torch ops it replaces, in bf16 and in float32
(beside a bf16 cache, which stores K and V as torch's cast rounds them)."""

from __future__ import annotations

import shutil

import pytest
import torch

from inferd.arch.layers import rms_norm
from inferd.arch.rope import RotaryEmbedding, apply_rotary
from inferd.kernels import attention_inputs as native
from inferd.kernels import isa
from inferd.models.config import RopeConfig

BF16 = torch.bfloat16
H, HKV, D = 4, 2, 64

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def builds():
    """Every build this CPU can run (avx512, avx2, portable), by its own flags."""
    return [pytest.param(lambda name=name: native.library(tuple(isa.march_flags(name))), id=name)
            for name in isa.runnable()]


def torch_path(qkv, weight, scale_in_float, rope, D=D):
    qk = qkv[:, : (H + HKV) * D].view(-1, H + HKV, D)
    if weight is not None:
        qk = rms_norm(qk, weight, 1e-6, scale_in_float)
    return apply_rotary(qk, *rope)


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("tokens", [1, 8, 40])
@pytest.mark.parametrize("norm", ["gemma", "llama", None])
@pytest.mark.parametrize("dtype", [BF16, torch.float32])
@pytest.mark.parametrize("D", [D, 80], ids=["D64", "D80"])  # 80: each half's last 8 past the vector lanes
def test_matches_the_torch_ops_exactly(build, tokens, norm, dtype, D):
    generator = torch.Generator().manual_seed(tokens)
    qkv = (torch.randn(tokens, (H + 2 * HKV) * D, generator=generator) * 2).to(dtype)
    weight = None if norm is None else torch.randn(H + HKV, D, generator=generator) + 1
    positions = torch.randint(0, 4000, (tokens,), generator=generator)
    rope = RotaryEmbedding(RopeConfig(theta=10000.0), D)(positions, dtype)
    k_cache, v_cache = torch.zeros(64, HKV, D, dtype=BF16), torch.zeros(64, HKV, D, dtype=BF16)
    slots = torch.randperm(64, generator=generator)[:tokens]

    got = native.attention_inputs(qkv, H, HKV, D, weight, 1e-6, norm == "gemma", *rope, k_cache, v_cache, slots,
                                  build and build())
    want = torch_path(qkv, weight, norm == "gemma", rope, D)
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.equal(k_cache[slots], want[:, H:].to(BF16))
    assert torch.equal(v_cache[slots], qkv[:, (H + HKV) * D :].view(tokens, HKV, D).to(BF16))
    untouched = torch.ones(64, dtype=torch.bool).index_fill_(0, slots, False)
    assert not k_cache[untouched].any() and not v_cache[untouched].any()


def test_what_it_takes():
    qkv = torch.randn(3, (H + 2 * HKV) * D).to(BF16)
    rope = RotaryEmbedding(RopeConfig(theta=10000.0), D)(torch.arange(3), BF16)
    cache = torch.zeros(8, HKV, D, dtype=BF16)
    wide = RotaryEmbedding(RopeConfig(theta=10000.0), D)(torch.arange(3), torch.float32)
    assert native.supports(qkv, rope[0], cache) and native.supports(qkv.float(), wide[0], cache)
    assert not native.supports(qkv.float(), rope[0], cache)  # rows and tables in one dtype
    assert not native.supports(qkv.float(), wide[0], cache.float())  # the cache is bf16
    assert not native.supports(qkv, rope[0], cache.transpose(0, 1))
    with pytest.raises(ValueError, match="one slot per token"):
        native.attention_inputs(qkv, H, HKV, D, None, 1e-6, False, *rope, cache, cache.clone(), torch.arange(2))
    with pytest.raises(ValueError, match="contiguous float32"):
        native.attention_inputs(qkv, H, HKV, D, torch.ones(H + HKV, D, dtype=BF16), 1e-6, False, *rope, cache,
                                cache.clone(), torch.arange(3))
