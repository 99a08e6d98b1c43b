"""The native gated activation, act(gate) * up, against a float64 model of
it and against the torch ops it replaces."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
import torch.nn.functional as F

from inferd.arch.layers import GatedMLP
from inferd.kernels import gated_activation as native
from inferd.kernels import isa

BF16 = torch.bfloat16
TINY = 1e-30  # smaller results may underflow to zero (e^-z overflows first)

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def builds():
    """Every build this CPU can run (avx512, avx2, portable), by its own flags."""
    return [pytest.param(lambda name=name: native.library(tuple(isa.march_flags(name))), id=name)
            for name in isa.runnable()]


def reference(gate_up: torch.Tensor, activation: str) -> torch.Tensor:
    """round(round(act(gate)) * up), act in float64 in the sigmoid form: the
    tanh form's 1 + tanh(y) cancels to 0 for negative x even in float64."""
    gate, up = gate_up.double().chunk(2, dim=-1)
    a = 1.0 if activation == "silu" else 2 * math.sqrt(2 / math.pi)
    b = 0.0 if activation == "silu" else a * 0.044715
    act = gate * torch.sigmoid(a * gate + b * gate**3)
    return (act.to(BF16).double() * up).to(BF16)


def assert_within_one_bf16_step(got, want, atol=TINY):
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=atol)
    assert (got != want).float().mean() < 0.01  # nearly all values identical


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("activation", ["gelu_pytorch_tanh", "silu"])
@pytest.mark.parametrize("rows", [1, 8, 200])
def test_matches_the_float64_arithmetic(build, activation, rows):
    generator = torch.Generator().manual_seed(rows)
    width = 2048 + 8  # not a whole number of vectors: the tail runs the scalar loop
    gate_up = (torch.randn(rows, 2 * width, generator=generator) * 4).to(BF16)
    gate_up[0, :6] = torch.tensor([-100.0, -20.0, 0.0, 20.0, 100.0, -0.0])  # saturated and zero inputs
    got = native.gated_activation(gate_up, activation, build and build())
    assert got.dtype == BF16 and got.shape == (rows, width)
    assert_within_one_bf16_step(got, reference(gate_up, activation))


def test_agrees_with_the_torch_ops_it_replaces():
    generator = torch.Generator().manual_seed(0)
    gate_up = (torch.randn(8, 4096, generator=generator) * 2).to(BF16)
    gate, up = gate_up.split(2048, dim=-1)
    for activation, torch_act in (("silu", F.silu), ("gelu_pytorch_tanh", lambda x: F.gelu(x, approximate="tanh"))):
        want = torch_act(gate) * up
        # torch's bf16 GELU computes 1 + tanh(y) in float32, which loses small negative-tail values.
        torch.testing.assert_close(native.gated_activation(gate_up, activation).float(), want.float(),
                                   rtol=2**-7, atol=1e-5)


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("activation", ["gelu_pytorch_tanh", "silu"])
def test_float32_rows_are_not_rounded(build, activation):
    generator = torch.Generator().manual_seed(3)
    width = 2048 + 8  # the scalar tail computes what a vector lane does
    gate_up = torch.randn(4, 2 * width, generator=generator) * 4
    got = native.gated_activation(gate_up, activation, build and build())
    gate, up = gate_up.double().chunk(2, dim=-1)
    a = 1.0 if activation == "silu" else 2 * math.sqrt(2 / math.pi)
    want = gate * torch.sigmoid(a * gate + (0.0 if activation == "silu" else a * 0.044715) * gate**3) * up
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=3e-6, atol=1e-6)
    assert torch.equal(got, native.gated_activation(gate_up, activation))  # every build: the same values


def test_leading_dimensions_and_what_it_does_not_take():
    gate_up = torch.randn(2, 3, 64).to(BF16)
    assert native.gated_activation(gate_up, "silu").shape == (2, 3, 32)
    assert not native.supports(gate_up, "gelu")  # the erf form stays with torch
    assert not native.supports(gate_up[..., :32].transpose(0, 1), "silu")


def test_the_mlp_takes_the_kernel_in_bf16_and_float32():
    torch.manual_seed(0)
    mlp = GatedMLP(64, 128, "gelu_pytorch_tanh").to(BF16)
    x = torch.randn(5, 64).to(BF16)
    gate, up = mlp.gate_up_proj(x).split(128, dim=-1)
    want = mlp.down_proj(F.gelu(gate, approximate="tanh") * up)
    torch.testing.assert_close(mlp(x), want, rtol=2**-6, atol=1e-2)
    mlp = mlp.float()  # float32: the kernel, unrounded
    gate_up = mlp.gate_up_proj(x.float())
    assert torch.equal(mlp(x.float()), mlp.down_proj(native.gated_activation(gate_up, "gelu_pytorch_tanh")))
    gate, up = gate_up.split(128, dim=-1)
    torch.testing.assert_close(mlp(x.float()), mlp.down_proj(F.gelu(gate, approximate="tanh") * up),
                               rtol=1e-5, atol=1e-6)
