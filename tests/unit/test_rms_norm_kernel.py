"""The native RMSNorm kernel against the torch arithmetic it replaces."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from inferd.arch.layers import RMSNorm
from inferd.kernels import rms_norm as native_norm

BF16 = torch.bfloat16

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def torch_norm(x, weight, eps, scale_in_float, residual=None):
    normed = F.rms_norm(x.float(), x.shape[-1:], None, eps)
    out = (normed * weight).to(x.dtype) if scale_in_float else weight.to(x.dtype) * normed.to(x.dtype)
    return out if residual is None else residual + out


def assert_within_one_bf16_step(got, want):
    """Off by at most a bf16 step of the operands (a residual add can cancel to a small value)."""
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=want.abs().max().item() * 2**-8)
    assert (got != want).float().mean() < 0.02  # nearly all values identical


@pytest.mark.parametrize("scale_in_float", [True, False])
@pytest.mark.parametrize("rows", [1, 8, 300])
def test_matches_the_torch_arithmetic(scale_in_float, rows):
    generator = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 640, generator=generator) * 3).to(BF16)
    weight = torch.randn(640, generator=generator) + 1
    residual = torch.randn(rows, 640, generator=generator).to(BF16)
    got = native_norm.rms_norm(x, weight, 1e-6, scale_in_float)
    assert got.dtype == BF16 and got.shape == x.shape
    assert_within_one_bf16_step(got, torch_norm(x, weight, 1e-6, scale_in_float))
    with_residual = native_norm.rms_norm(x, weight, 1e-6, scale_in_float, residual)
    assert_within_one_bf16_step(with_residual, torch_norm(x, weight, 1e-6, scale_in_float, residual))


def test_joint_heads_take_their_own_weight_rows_from_a_strided_view():
    """Q and K heads normed together, read out of the fused QKV output."""
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, 6 * 32, generator=generator).to(BF16)
    qk = qkv[:, : 5 * 32].view(3, 5, 32)  # 4 query heads + 1 key head; V left out
    weight = torch.cat((torch.full((4, 32), 1.5), torch.full((1, 32), 0.5)))
    assert native_norm.supports(qk, weight)
    assert_within_one_bf16_step(native_norm.rms_norm(qk, weight, 1e-6, True), torch_norm(qk, weight, 1e-6, True))


def test_the_layer_uses_the_kernel_where_it_applies_and_torch_elsewhere():
    norm = RMSNorm(64, 1e-6, unit_offset=True, scale_in_float=True)
    norm.load(torch.randn(64))
    x, residual = torch.randn(4, 64).to(BF16), torch.randn(4, 64).to(BF16)
    assert native_norm.supports(x, norm.weight)
    assert_within_one_bf16_step(norm(x, residual=residual), torch_norm(x, norm.weight, 1e-6, True, residual))
    x32 = torch.randn(4, 64)  # float32: the kernel too, unrounded
    assert native_norm.supports(x32, norm.weight)
    torch.testing.assert_close(norm(x32), torch_norm(x32, norm.weight, 1e-6, True), rtol=1e-6, atol=1e-6)
    x16 = torch.randn(4, 64).to(torch.float16)  # another dtype: the torch path, exactly
    assert not native_norm.supports(x16, norm.weight)
    assert torch.equal(norm(x16), torch_norm(x16, norm.weight, 1e-6, True))


def test_a_mismatched_residual_is_refused():
    x, weight = torch.randn(2, 16).to(BF16), torch.ones(16)
    with pytest.raises(ValueError, match="residual must be a contiguous bf16 tensor of x's shape"):
        native_norm.rms_norm(x, weight, 1e-6, True, torch.zeros(2, 8, dtype=BF16))


@pytest.mark.parametrize("scale_in_float", [True, False])
@pytest.mark.parametrize("rows", [1, 300])
def test_float32_rows_match_the_torch_arithmetic_unrounded(scale_in_float, rows):
    """An engine computing in float32 norms in float32: nothing rounds to bf16."""
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 640, generator=generator) * 3
    weight = torch.randn(640, generator=generator) + 1
    residual = torch.randn(rows, 640, generator=generator)
    assert native_norm.supports(x, weight)
    got = native_norm.rms_norm(x, weight, 1e-6, scale_in_float)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch_norm(x, weight, 1e-6, scale_in_float), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(native_norm.rms_norm(x, weight, 1e-6, scale_in_float, residual),
                               torch_norm(x, weight, 1e-6, scale_in_float, residual), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="residual must be a contiguous float32 tensor"):
        native_norm.rms_norm(x, weight, 1e-6, True, residual.to(BF16))


@pytest.mark.parametrize("dtype", [BF16, torch.float32])
@pytest.mark.parametrize("scale_in_float", [True, False])
@pytest.mark.parametrize("with_residual", [True, False])
def test_every_build_computes_the_same_bits(dtype, scale_in_float, with_residual):
    """Vector lanes and the scalar tail alike (266 = 16 lanes x 16 + 10)."""
    from inferd.kernels import isa

    generator = torch.Generator().manual_seed(3)
    x, residual = (torch.randn(37, 4, 266, generator=generator).mul(4).to(dtype) for _ in range(2))
    weight = torch.randn(4, 266, generator=generator)
    outs = {name: native_norm.rms_norm(x, weight, 1e-6, scale_in_float, residual if with_residual else None,
                                       lib=native_norm.library(tuple(isa.march_flags(name))))
            for name in isa.runnable()}
    first = next(iter(outs.values()))
    assert all(torch.equal(out, first) for out in outs.values()), list(outs)
