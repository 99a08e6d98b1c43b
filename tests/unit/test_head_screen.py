"""A greedy pick through a Q8_0 head's screen (`gguf_gemv.HeadScreen`, head_screen.h) is,
on every build this CPU can run, the pick of the whole head (`gguf_gemv.argmax`) to the
index: near ties, bf16 rounding, rows that are not finite, and heads the screen cannot
narrow, where it computes the whole head instead."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from inferd.arch.gguf_linear import GGUFLinear
from inferd.kernels import gguf_gemv, isa


def tiles_of(weights: np.ndarray, lib) -> torch.Tensor:
    """Q8_0 tiles laid out as `lib` lays them out."""
    raw = torch.from_numpy(quants.quantize(weights.astype(np.float32), GGMLQuantizationType.Q8_0))
    return gguf_gemv.to_tiles("Q8_0", raw, lib=lib)


def picks(tiles: torch.Tensor, x: torch.Tensor, out_dtype: torch.dtype, lib) -> tuple[list[int], list[int], int]:
    """(the whole head's picks, the screen's, how many passes the screen could not narrow)."""
    k = x.shape[-1]
    screen = gguf_gemv.HeadScreen(tiles, k, lib=lib)
    whole = gguf_gemv.argmax(x, gguf_gemv.Parts([("Q8_0", tiles)], k, [True]), None, out_dtype, lib=lib)
    return whole, screen.argmax(x, out_dtype), screen.whole_head_passes


@pytest.mark.parametrize("rows", [1, 3, 8, 11])
@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_the_screen_picks_what_the_whole_head_picks(gguf_lib, rows, in_dtype, out_dtype):
    rng = np.random.default_rng(rows)
    tiles = tiles_of(rng.standard_normal((8192, 256)) * 0.05, gguf_lib)
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows)) * 4
    x[:, :3] *= 20  # a few large inputs, as a transformer's last hidden state has
    whole, screened, unnarrowed = picks(tiles, x.to(in_dtype), out_dtype, gguf_lib)
    assert screened == whole
    assert unnarrowed == 0  # the screen did the work: not the whole head again
    assert len(set(whole)) > 1 or rows == 1


def test_near_ties_and_bf16_rounding_pick_the_lowest_index_the_whole_head_would(gguf_lib):
    """Rows that differ from the best in their last bits (the screen cannot tell them
    apart), far apart in the head; in bf16 they round to one value and the first wins."""
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((8192, 256)) * 0.05
    best = rng.standard_normal(256) * 0.05
    for at, nudge in ((6000, 0.0), (9, 1e-3), (4100, -1e-3), (8191, 2e-3), (200, 0.0)):
        weights[at] = best
        weights[at, 0] += nudge
    tiles = tiles_of(weights, gguf_lib)
    x = torch.from_numpy(best * 40).float()[None].repeat(3, 1)
    x[1] *= 0.5
    for out_dtype in (torch.float32, torch.bfloat16):
        whole, screened, _ = picks(tiles, x, out_dtype, gguf_lib)
        assert screened == whole, out_dtype
    assert picks(tiles, x, torch.bfloat16, gguf_lib)[1][0] in (9, 200, 4100, 6000, 8191)


def test_a_head_the_screen_cannot_narrow_is_computed_whole(gguf_lib):
    """Every row alike: every bound reaches the best, so the screen gives way to the whole head."""
    row = np.random.default_rng(2).standard_normal(256) * 0.05
    tiles = tiles_of(np.tile(row, (4096, 1)), gguf_lib)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(3))
    whole, screened, unnarrowed = picks(tiles, x, torch.float32, gguf_lib)
    assert screened == whole == [0, 0]
    assert unnarrowed == 1


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), -float("inf")])
def test_a_row_that_is_not_finite_is_picked_as_the_whole_head_picks_it(gguf_lib, poison):
    tiles = tiles_of(np.random.default_rng(4).standard_normal((1024, 256)) * 0.05, gguf_lib)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(5))
    x[1, 17] = poison
    whole, screened, _ = picks(tiles, x, torch.float32, gguf_lib)
    assert screened == whole
    assert screened[0] != -1 and screened[2] != -1


def test_only_a_q8_0_head_in_tiles_takes_a_screen(gguf_lib):
    with pytest.raises(ValueError, match="Q8_0 head in tiles"):
        gguf_gemv.HeadScreen(torch.zeros(1024, 256 // 32 * 22, dtype=torch.uint8), 256, lib=gguf_lib)
    with pytest.raises(ValueError, match="Q8_0 head in tiles"):
        gguf_gemv.HeadScreen(torch.zeros(1020, 256 // 32 * 34, dtype=torch.uint8), 256, lib=gguf_lib)


def test_the_screen_pays_at_any_row_count_without_vnni_and_at_one_or_two_rows_with_it():
    vnni = bool(isa.cpu_flags() & {"avx512_vnni", "avx_vnni"})
    for name in isa.runnable():
        build = gguf_gemv.library(tuple(isa.march_flags(name)))
        native = name == isa.runnable()[0]
        expected = 0 if name == "portable" else 2 if native and vnni else 1 << 30
        assert gguf_gemv.screen_rows(build) == expected, name


@pytest.mark.parametrize("limit", [0, 2, 4])
def test_a_head_layer_picks_through_its_screen_for_as_many_rows_as_it_pays(monkeypatch, limit):
    raw = torch.from_numpy(quants.quantize(
        np.random.default_rng(6).standard_normal((2048, 256)).astype(np.float32) * 0.05, GGMLQuantizationType.Q8_0))
    layer = GGUFLinear.from_parts([("Q8_0", raw)], torch.empty(2048, 256), None, torch.float32, None)
    layer.kernel_out_dtype = torch.float32
    monkeypatch.setattr(gguf_gemv, "screen_rows", lambda lib=None: limit)
    screened = []
    argmax = gguf_gemv.HeadScreen.argmax
    monkeypatch.setattr(gguf_gemv.HeadScreen, "argmax", lambda self, *a: screened.append(1) or argmax(self, *a))
    for rows in (1, 4):
        x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(8))
        screened.clear()
        assert layer.argmax(x) == gguf_gemv.argmax(x, layer.parts(), None, torch.float32)
        assert bool(screened) == (rows <= limit), rows
    assert (layer.screen() is not None) == (limit > 0)


def test_the_bundled_heads_picks_through_the_screen_match_on_every_build(bundled_head_blocks):
    from inferd.models.loader import load_model

    model = load_model(weights="auto").model
    head = model.fast_head
    # Rows like a last hidden state: each near one token's embedding, at the norm such states have.
    ids = torch.tensor([2, 818, 5422, 1000, 12345, 70000, 150000, 262000])
    x = model.embed_tokens.weight[ids].float() + 0.02 * torch.randn(8, head.in_features, generator=torch.Generator().manual_seed(6))
    x = (x * 100 / x.norm(dim=1, keepdim=True)).to(torch.bfloat16)
    for name in isa.runnable():
        build = gguf_gemv.library(tuple(isa.march_flags(name)))
        tiles = gguf_gemv.to_tiles("Q8_0", bundled_head_blocks, lib=build)
        screen = gguf_gemv.HeadScreen(tiles, head.in_features, lib=build)
        whole = gguf_gemv.Parts([("Q8_0", tiles)], head.in_features, [True])
        assert screen.argmax(x, torch.float32) == gguf_gemv.argmax(x, whole, None, torch.float32, lib=build), name
        assert screen.whole_head_passes == 0, name
