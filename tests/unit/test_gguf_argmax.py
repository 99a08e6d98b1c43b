"""The kernel's greedy pick from an LM head (`gguf_gemv.argmax`) is, on every
build this CPU can run, exactly the sampler's first argmax of the product the
kernel would have written: the same token for every row, the lowest index on
a tie wherever the threads meet it, and -1 where a row has no finite maximum."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from inferd.kernels import gguf_gemv, greedy_rows, isa


def quantized(weights: np.ndarray, block_format: str) -> torch.Tensor:
    return torch.from_numpy(quants.quantize(weights.astype(np.float32), GGMLQuantizationType[block_format]))


def head(block_format: str, rows: int, k: int, tiles: bool, lib, seed: int = 0) -> gguf_gemv.Parts:
    weights = np.random.default_rng(seed).standard_normal((rows, k)) * 0.05
    raw = quantized(weights, block_format)
    return gguf_gemv.Parts([(block_format, gguf_gemv.to_tiles(block_format, raw, lib=lib) if tiles else raw)], k, [tiles])


def sampler_pick(x, parts, bias=None, out_dtype=torch.float32, lib=None) -> list[int]:
    return greedy_rows.first_argmax(gguf_gemv.matmul(x, parts, bias, out_dtype, lib=lib).float())


@pytest.mark.parametrize("block_format", ["Q8_0", "Q5_0", "Q4_0"])
@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("rows", [1, 3, 8, 11])
def test_each_rows_pick_is_the_argmax_of_the_product(gguf_lib, block_format, tiles, rows):
    parts = head(block_format, 4096, 256, tiles, gguf_lib, seed=rows)
    x = (torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows)) * 3).to(torch.bfloat16)
    picks = gguf_gemv.argmax(x, parts, out_dtype=torch.float32, lib=gguf_lib)
    assert picks == sampler_pick(x, parts, lib=gguf_lib)
    assert len(set(picks)) > 1 or rows == 1  # distinct rows, distinct picks: not one answer for all


def test_a_tie_goes_to_the_lowest_index_across_the_threads_chunks(gguf_lib):
    """Equal rows far apart (in different chunks of the tile loop) give equal outputs; every
    copy ties for the maximum, and the first must win whichever thread meets it first."""
    k, n = 256, 8192
    weights = np.zeros((n, k))
    best = np.random.default_rng(1).standard_normal(k)
    for at in (7000, 5, 4100, 8191):
        weights[at] = best
    x = torch.from_numpy(best).to(torch.bfloat16)[None].repeat(2, 1)
    for tiles in (True, False):
        raw = quantized(weights, "Q8_0")
        parts = gguf_gemv.Parts([("Q8_0", gguf_gemv.to_tiles("Q8_0", raw, lib=gguf_lib) if tiles else raw)], k, [tiles])
        for _ in range(5):
            assert gguf_gemv.argmax(x, parts, out_dtype=torch.float32, lib=gguf_lib) == [5, 5]


def test_parts_bias_and_bf16_outputs_pick_as_the_written_product_would(gguf_lib):
    """Several parts (their outputs side by side), a bias, and bf16 outputs, whose rounding
    makes ties: the pick is that of the values the product would have written."""
    k = 256
    rng = np.random.default_rng(3)
    first, second = quantized(rng.standard_normal((64, k)) * 0.05, "Q8_0"), quantized(rng.standard_normal((24, k)) * 0.05, "Q5_0")
    parts = gguf_gemv.Parts([("Q8_0", gguf_gemv.to_tiles("Q8_0", first, lib=gguf_lib)), ("Q5_0", second)], k, [True, False])
    x = torch.randn(4, k, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    bias = torch.linspace(-0.5, 0.5, 88).to(torch.bfloat16)
    for out_dtype in (torch.float32, torch.bfloat16):
        for b in (None, bias):
            got = gguf_gemv.argmax(x, parts, b, out_dtype, lib=gguf_lib)
            assert got == sampler_pick(x, parts, b, out_dtype, lib=gguf_lib), (out_dtype, b is None)
    x = x.float()
    assert gguf_gemv.argmax(x, parts, bias.float(), torch.float32, lib=gguf_lib) == sampler_pick(x, parts, bias.float(), lib=gguf_lib)


@pytest.mark.parametrize("poison,row_fails", [(float("nan"), True), (float("inf"), True), (-float("inf"), False)])
def test_a_row_with_no_finite_maximum_is_minus_one(gguf_lib, poison, row_fails):
    parts = head("Q8_0", 64, 256, True, gguf_lib)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(5))
    bias = torch.zeros(64)
    bias[17] = poison
    got = gguf_gemv.argmax(x, parts, bias, torch.float32, lib=gguf_lib)
    assert got == sampler_pick(x, parts, bias, lib=gguf_lib)
    assert (got == [-1, -1]) == row_fails
    assert gguf_gemv.argmax(x, parts, torch.full((64,), -float("inf")), torch.float32, lib=gguf_lib) == [-1, -1]


def test_the_bundled_heads_picks_match_on_every_build(bundled_head_blocks):
    k = 640
    x = (torch.randn(8, k, generator=torch.Generator().manual_seed(6)) * 2).to(torch.bfloat16)
    for name in isa.runnable():
        build = gguf_gemv.library(tuple(isa.march_flags(name)))
        parts = gguf_gemv.Parts([("Q8_0", gguf_gemv.to_tiles("Q8_0", bundled_head_blocks, lib=build))], k, [True])
        assert gguf_gemv.argmax(x, parts, None, torch.float32, lib=build) == \
            sampler_pick(x, parts, None, torch.float32, lib=build), name
