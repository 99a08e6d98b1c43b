"""post_sampling_probs: the distribution a token was drawn from, after temperature,
top_k, top_p and min_p, renormalized (as llama-server reports it)."""

from __future__ import annotations

import math

import pytest
import torch

from inferd.engine.sampling.post_sampling import post_sampling_logprobs
from inferd.engine.sampling.sampler import Sampler, SampleRow, make_generator
from inferd.engine.sampling_params import SamplingParams

# Softmax at temperature 1 of these logits: 0.5, 0.25, 0.125, 0.0625, 0.0625.
LOGITS = torch.tensor([math.log(8), math.log(4), math.log(2), 0.0, 0.0])


def probs(params: SamplingParams, token: int = 0) -> tuple[float, list[tuple[int, float]]]:
    out = post_sampling_logprobs(LOGITS, params, token)
    return math.exp(out.logprob), [(t, round(math.exp(lp), 6)) for t, lp in out.top]


def test_top_k_keeps_k_and_renormalizes():
    assert probs(SamplingParams(top_k=2, logprobs=5)) == (pytest.approx(2 / 3), [(0, 0.666667), (1, 0.333333)])


def test_top_p_keeps_the_nucleus():
    # 0.5 alone is not past 0.7; with 0.25 it is: two tokens.
    assert probs(SamplingParams(top_p=0.7, logprobs=5))[1] == [(0, 0.666667), (1, 0.333333)]


def test_min_p_cuts_below_its_share_of_the_top():
    # Kept: weights at least 0.3 of the top's (8, 4 of 8; 2 is 0.25 of it).
    assert probs(SamplingParams(min_p=0.3, logprobs=5))[1] == [(0, 0.666667), (1, 0.333333)]


def test_temperature_reshapes_then_ties_at_the_cut_are_kept():
    _, top = probs(SamplingParams(temperature=2.0, logprobs=5))
    weights = [math.sqrt(8), 2, math.sqrt(2), 1, 1]
    assert top == [(i, round(w / sum(weights), 6)) for i, w in enumerate(weights)]
    # top_k 4 cuts between two equal weights: both stay.
    assert [t for t, _ in probs(SamplingParams(top_k=4, logprobs=5))[1]] == [0, 1, 2, 3, 4]


def test_greedy_is_all_on_its_token():
    assert probs(SamplingParams(temperature=0, logprobs=3)) == (1.0, [(0, 1.0)])


def test_no_alternatives_asked_lists_none():
    assert probs(SamplingParams(top_k=2, logprobs=0)) == (pytest.approx(2 / 3), [])


def test_the_sampler_reports_the_distribution_it_drew_from():
    sampler = Sampler()
    logits = LOGITS.repeat(2, 1)
    seen = set()
    for seed in range(40):
        post = SamplingParams(top_k=3, seed=seed, logprobs=5, post_sampling_probs=True)
        plain = SamplingParams(top_k=3, seed=seed, logprobs=5)
        rows = [SampleRow(p, [1], [], make_generator(seed), frozenset()) for p in (post, plain)]
        out = sampler(logits, rows)
        assert out.token_ids[0] == out.token_ids[1]  # the draw itself is unchanged
        token = out.token_ids[0]
        seen.add(token)
        assert math.exp(out.logprobs[0].logprob) == pytest.approx([4 / 7, 2 / 7, 1 / 7][token])
        assert [t for t, _ in out.logprobs[0].top] == [0, 1, 2]
        assert math.exp(out.logprobs[1].logprob) == pytest.approx([0.5, 0.25, 0.125][token])  # before truncation
        assert len(out.logprobs[1].top) == 5
    assert seen == {0, 1, 2}
