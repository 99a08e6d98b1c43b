"""Probabilities after sampling's truncation (llama-server's `post_sampling_probs`).

The sampler's logprobs describe the processed logits before temperature and
top_k / top_p / min_p. A row with `post_sampling_probs` gets instead the
distribution its token was drawn from: weights exp((x - max) / T), only those
at or above the row's threshold kept (the same threshold as the draw: top_k,
then top_p measured against the mass top_k left, then min_p; ties at the cut
are kept), renormalized. A greedy row's distribution is all on its token.

Only rows that ask pay for it: one sort of their row, on a path apart from
the draw's blocked search.
"""

from __future__ import annotations

import math

import torch

from inferd.engine.outputs import TokenLogprobs
from inferd.engine.sampling_params import SamplingParams


def post_sampling_logprobs(x: torch.Tensor, params: SamplingParams, token: int) -> TokenLogprobs:
    """`x`: one row of processed logits [V]; `token`: the one drawn. Log-probabilities, so the
    result reads like the sampler's own; tokens cut away have probability 0 and are not listed."""
    wanted = params.logprobs or 0
    if params.greedy:
        return TokenLogprobs(token_id=token, logprob=0.0, top=[(token, 0.0)][:wanted])
    weights = torch.exp((x.float() - x.max().float()) / params.temperature)
    sorted_weights, ids = torch.sort(weights, descending=True, stable=True)
    threshold = _threshold(sorted_weights, params)
    kept = int((sorted_weights >= threshold).sum())
    kept_weights = sorted_weights[:kept].double()
    logprobs = (kept_weights / kept_weights.sum()).log()
    position = (ids[:kept] == token).nonzero()
    chosen = float(logprobs[position[0, 0]]) if position.numel() else -math.inf
    top = list(zip(ids[: min(wanted, kept)].tolist(), logprobs[:wanted].tolist()))
    return TokenLogprobs(token_id=token, logprob=chosen, top=top)


def _threshold(sorted_weights: torch.Tensor, params: SamplingParams) -> float:
    vocab = sorted_weights.shape[0]
    k = params.top_k if 0 < params.top_k < vocab else vocab
    count = k
    if params.top_p < 1.0:
        cumulative = sorted_weights.double().cumsum(0)
        mass = float(cumulative[k - 1])
        before = torch.cat((cumulative.new_zeros(1), cumulative[:-1]))
        count = min(int((before < params.top_p * mass).sum()), k)
    return max(float(sorted_weights[count - 1]), params.min_p)
