"""The native greedy pick against torch's argmax, on every build this CPU runs,
and the sampler's use of it."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from inferd.engine.sampling.errors import NoValidTokenError
from inferd.engine.sampling.sampler import SampleRow, Sampler
from inferd.engine.sampling_params import SamplingParams
from inferd.kernels import greedy_rows, isa

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def builds():
    """Every build this CPU can run (avx512, avx2, portable), by its own flags."""
    return [pytest.param(tuple(isa.march_flags(name)), marks=needs_compiler, id=name) for name in isa.runnable()]


def picks(x: torch.Tensor, build) -> list[int]:
    lib = greedy_rows.library(build)
    assert lib is not None
    return greedy_rows.first_argmax(x, lib)


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("vocab", [1, 7, 8, 15, 16, 17, 100, 4099])
def test_each_row_gets_torchs_argmax(build, vocab):
    x = torch.randn(9, vocab, generator=torch.Generator().manual_seed(vocab))
    assert picks(x, build) == x.argmax(dim=1).tolist()


@pytest.mark.parametrize("build", builds())
def test_ties_go_to_the_lowest_id_and_masked_values_never_win(build):
    x = torch.full((4, 50), -math.inf)
    x[0, [3, 17, 40]] = 2.0  # three-way tie
    x[1, [33, 49]] = 5.0  # one in the vector part, one in the wider builds' scalar tail
    x[2] = torch.linspace(-1, 1, 50)
    x[2, 9] = 1.0  # equal to the last value
    x[3, 49] = -1e30  # the only finite value is the last
    assert picks(x, build) == [3, 33, 9, 49]


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("at", [0, 21, 99])
def test_rows_with_no_finite_maximum_are_minus_one(build, bad, at):
    x = torch.randn(3, 100, generator=torch.Generator().manual_seed(at))
    x[1, at] = bad
    x[2] = -math.inf
    assert picks(x, build) == [x[0].argmax().item(), -1, -1]


@pytest.mark.parametrize("build", builds())
def test_rows_read_from_a_wider_tensor(build):
    wide = torch.randn(5, 300, generator=torch.Generator().manual_seed(1))
    x = wide[1:4, :257]  # rows 300 apart
    assert greedy_rows.supports(x)
    assert picks(x, build) == x.argmax(dim=1).tolist()


def test_only_float32_rows_contiguous_within_themselves():
    x = torch.randn(4, 64)
    assert greedy_rows.supports(x)
    assert not greedy_rows.supports(x.to(torch.bfloat16))
    assert not greedy_rows.supports(x.t())
    assert not greedy_rows.supports(x[0])


GREEDY = SamplingParams(temperature=0.0, max_tokens=4)


def rows(params: list[SamplingParams]) -> list[SampleRow]:
    return [SampleRow(p, [1, 2], [3], None, frozenset({1})) for p in params]


@needs_compiler
def test_the_sampler_takes_the_kernel_only_when_every_row_wants_just_its_argmax(monkeypatch):
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2))
    calls = []
    original = greedy_rows.first_argmax
    monkeypatch.setattr(greedy_rows, "first_argmax", lambda t: calls.append(t.shape) or original(t))
    out = Sampler()(x, rows([GREEDY] * 3))
    assert (out.token_ids, out.logprobs, calls) == (x.argmax(dim=1).tolist(), [None] * 3, [(3, 1000)])
    with_logprobs = SamplingParams(temperature=0.0, max_tokens=4, logprobs=2)
    drawn = SamplingParams(temperature=0.8, max_tokens=4, seed=5)
    for mixed in ([GREEDY, with_logprobs, GREEDY], [GREEDY, drawn, GREEDY]):
        out = Sampler()(x, rows(mixed))
        assert out.token_ids[0] == x[0].argmax().item() and out.token_ids[2] == x[2].argmax().item()
    assert calls == [(3, 1000)]  # the mixed steps took the tensor path
    assert out.logprobs[0] is None


@needs_compiler
def test_the_sampler_reports_the_rows_with_no_valid_token():
    x = torch.randn(3, 64)
    x[0] = -math.inf
    x[2, 5] = math.nan
    with pytest.raises(NoValidTokenError) as caught:
        Sampler()(x, rows([GREEDY] * 3))
    assert caught.value.rows == [0, 2]
