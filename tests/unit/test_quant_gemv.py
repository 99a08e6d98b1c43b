"""inferd's quantized CPU kernels (inferd/kernels): their arithmetic against
a float64 model of it, the vector and portable builds, the tile layouts,
and how the native build falls back."""

from __future__ import annotations

import functools
import shutil

import pytest
import torch

from inferd.arch.quantized_linear import QuantizedLinear, quantize_int8
from inferd.kernels import isa, native, quant_gemv

BF16 = torch.bfloat16
GROUP = quant_gemv.GROUP

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
needs_vector_build = pytest.mark.skipif(not quant_gemv.available(), reason="no vector build of the kernels here")


def portable():
    """The same source built for the architecture's baseline: the scalar path."""
    lib = quant_gemv.library(tuple(isa.march_flags("portable")))
    assert lib is not None and lib.inferd_quant_gemv_vectorized() == 0
    return lib


def avx2():
    """The AVX2 path (x86-64-v3), which machines without AVX-512 run."""
    lib = quant_gemv.library(tuple(isa.march_flags("avx2")))
    assert lib is not None and lib.inferd_quant_gemv_vectorized() == 2
    return lib


def builds():
    return [pytest.param(None, marks=needs_vector_build, id="vector"),
            pytest.param(avx2, marks=[needs_compiler, pytest.mark.skipif("avx2" not in isa.runnable(),
                                                                         reason="this CPU runs no AVX2 build")],
                         id="avx2"),
            pytest.param(portable, marks=needs_compiler, id="portable")]


def quantized_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 levels and per-group scales, as the kernel makes them."""
    groups = x.double().reshape(*x.shape[:-1], -1, GROUP)
    scale = groups.abs().amax(dim=-1, keepdim=True) / 127
    levels = torch.round(groups / torch.where(scale > 0, scale, 1)).clamp(-127, 127)
    return levels, scale


def int8_reference(x, q, scales, bias):
    levels, d = quantized_activations(x.float())
    w = q.double().reshape(q.shape[0], -1, GROUP)  # [N, G, 32]
    sums = torch.einsum("mgj,ngj->mng", levels, w)  # exact integer sums per group
    y = (sums * d.squeeze(-1)[:, None, :]).sum(-1) * scales.double()
    return y if bias is None else y + bias.double()


def int4_reference(x, levels4, scale, low, bias):
    levels, d = quantized_activations(x.float())
    q = levels4.double().reshape(levels4.shape[0], -1, GROUP)
    sums = torch.einsum("mgj,ngj->mng", levels, q)
    x_sums = x.double().reshape(x.shape[0], -1, GROUP).sum(-1)  # the mins apply to x itself
    y = (sums * d.squeeze(-1)[:, None, :] * scale.double()).sum(-1) + x_sums @ low.double().T
    return y if bias is None else y + bias.double()


def assert_bf16_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Within the bf16 rounding of the output (float32 sums reorder)."""
    torch.testing.assert_close(got.double(), want, rtol=2**-7, atol=1e-3 * want.abs().max().item())


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("rows", [1, 3, 8, 13])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int8_product_is_the_group_quantized_sum(build, rows, with_bias):
    torch.manual_seed(rows)
    n, k = 48, 96
    q = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    scales = (torch.rand(n) * 0.01 + 1e-3).to(BF16)
    bias = torch.randn(n).to(BF16) if with_bias else None
    x = torch.randn(rows, k).to(BF16)
    x[0, :GROUP] = 0  # an all-zero group has scale 0
    got = quant_gemv.int8_matmul(x, quant_gemv.tile_int8(q), scales, bias, build and build())
    assert got.dtype == BF16 and got.shape == (rows, n)
    assert_bf16_close(got, int8_reference(x, q, scales.float(), bias))


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("rows", [1, 2, 9])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int4_product_is_the_group_quantized_sum(build, rows, with_bias):
    torch.manual_seed(rows)
    n, k = 32, 128
    levels = torch.randint(0, 16, (n, k))
    scale = (torch.rand(n, k // GROUP) * 0.01 + 1e-3).to(BF16)
    low = (-torch.rand(n, k // GROUP) * 0.1).to(BF16)
    bias = torch.randn(n).to(BF16) if with_bias else None
    packed, params = quant_gemv.tile_int4(levels, scale, low)
    x = torch.randn(rows, k).to(BF16)
    got = quant_gemv.int4_matmul(x, packed, params, bias, build and build())
    assert_bf16_close(got, int4_reference(x, levels, scale.float(), low.float(), bias))


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("bits", [8, 4])
def test_float32_output_is_the_sum_before_its_bf16_rounding(build, bits):
    """Logits come out in float32: the same sums, unrounded."""
    torch.manual_seed(bits)
    lib = build and build()
    x, bias = torch.randn(9, 128).to(BF16), torch.randn(32).to(BF16)
    if bits == 8:
        q, scales = quantize_int8(torch.randn(32, 128), BF16)
        run = functools.partial(quant_gemv.int8_matmul, x, quant_gemv.tile_int8(q), scales, bias, lib)
        want = int8_reference(x, q, scales.float(), bias)
    else:
        levels = torch.randint(0, 16, (32, 128))
        scale, low = (torch.rand(32, 4) * 0.01 + 1e-3).to(BF16), (-torch.rand(32, 4) * 0.1).to(BF16)
        run = functools.partial(quant_gemv.int4_matmul, x, *quant_gemv.tile_int4(levels, scale, low), bias, lib)
        want = int4_reference(x, levels, scale.float(), low.float(), bias)
    wide, narrow = run(out_dtype=torch.float32), run()
    assert wide.dtype == torch.float32 and torch.equal(wide.to(BF16), narrow)
    assert not torch.equal(wide, narrow.float())  # not rounded to bf16
    assert_bf16_close(wide, want)
    with pytest.raises(TypeError, match="write bf16 or float32, not torch.float16"):
        run(out_dtype=torch.float16)


@pytest.mark.parametrize("build", builds())
def test_leading_dimensions_are_kept_and_empty_inputs_allowed(build):
    lib = build and build()
    q, scales = quantize_int8(torch.randn(16, 32), BF16)
    x = torch.randn(2, 3, 32).to(BF16)
    y = quant_gemv.int8_matmul(x, quant_gemv.tile_int8(q), scales, None, lib)
    assert y.shape == (2, 3, 16)
    assert torch.equal(y[1, 2], quant_gemv.int8_matmul(x[1, 2:], quant_gemv.tile_int8(q), scales, None, lib)[0])
    assert quant_gemv.int8_matmul(x[:0], quant_gemv.tile_int8(q), scales, None, lib).shape == (0, 3, 16)


@needs_vector_build
def test_a_row_does_not_depend_on_its_batch():
    """Each row is summed on its own, so batching never changes a sequence's output."""
    torch.manual_seed(0)
    q, scales = quantize_int8(torch.randn(64, 640), BF16)
    tiled = quant_gemv.tile_int8(q)
    x = torch.randn(11, 640).to(BF16)
    together = quant_gemv.int8_matmul(x, tiled, scales, None)
    for i in range(11):
        assert torch.equal(together[i], quant_gemv.int8_matmul(x[i : i + 1], tiled, scales, None)[0])


@needs_vector_build
def test_float32_activations_are_refused():
    q, scales = quantize_int8(torch.randn(16, 32), BF16)
    with pytest.raises(TypeError, match="bf16 activations, not torch.float32"):
        quant_gemv.int8_matmul(torch.randn(1, 32), quant_gemv.tile_int8(q), scales, None)


@needs_vector_build
@pytest.mark.parametrize("bits", [8, 4])
def test_tiled_layers_match_the_torch_layout(bits):
    """The same quantized weights through both kernels: they differ only by
    the int8 rounding of the activations."""
    torch.manual_seed(0)
    weight, x = torch.randn(64, 128) * 0.05, torch.randn(5, 128).to(BF16)
    tiled = QuantizedLinear.from_weight(weight, None, bits, BF16, tiled=True)
    plain = QuantizedLinear.from_weight(weight, None, bits, BF16)
    assert tiled.qweight.shape != plain.qweight.shape
    got, want = tiled(x).float(), plain(x).float()
    assert (got - want).norm() / want.norm() < 0.02
    # from_weight and an empty layer filled from its state dict agree (the weight cache's path)
    with torch.device("meta"):
        empty = QuantizedLinear(128, 64, bits, BF16, tiled=True)
    empty.load_state_dict(tiled.state_dict(), assign=True)
    assert torch.equal(empty(x), tiled(x))


# -- the native build ------------------------------------------------------------
@needs_compiler
def test_the_build_is_cached_and_reloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "answer.c"
    source.write_text("int answer(void) { return 42; }\n")
    assert native.load_library(source).answer() == 42
    (built,) = (tmp_path / "inferd" / "kernels").glob("answer-*.so")
    stamp = built.stat().st_mtime_ns
    assert native.load_library(source).answer() == 42
    assert built.stat().st_mtime_ns == stamp  # not rebuilt
    source.write_text("int answer(void) { return 43; }\n")  # a changed source is another build
    assert native.load_library(source).answer() == 43
    assert len(list((tmp_path / "inferd" / "kernels").glob("answer-*.so"))) == 2


def test_without_a_compiler_or_when_disabled_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "answer.c"
    source.write_text("int answer(void) { return 42; }\n")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert native.load_library(source) is None
    monkeypatch.delenv("CC")
    monkeypatch.setenv("INFERD_NATIVE_KERNELS", "0")
    assert native.load_library(source) is None
    assert not (tmp_path / "inferd" / "kernels").exists()


@needs_compiler
def test_a_source_that_does_not_compile_falls_back_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "broken.c"
    source.write_text("int broken(void) { return }\n")
    assert native.load_library(source) is None
    assert "cannot build the native kernel broken.c" in caplog.text
    assert not list((tmp_path / "inferd" / "kernels").glob("*"))  # no partial file left
