"""Admission of a generating request for the key that sent it: the model must
be in the key's scopes (403) and its limits must allow its token
reservation, prompt + budget (429); the door (`http/auth.py`) has already
taken its lease and counted it against rpm. Called by every generating route
once its prompt is tokenized, before `submit` (`admit`), or before its
inputs go to a pooled model (`admit_inputs`: embeddings, rerank); the
reservation settles to the tokens used when the response ends."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.engine.sampling_params import SamplingParams
from inferd.http.auth import refusal_error
from inferd.http.request_context import current_request
from inferd.tenants.refused import Refused


async def admit(model: str, prompts: Sequence[list[int]], params: Sequence[SamplingParams], context_size: int) -> None:
    """`model`: the name the request asked for (or the served one). A choice with
    no max_tokens may run until the context is full, so that is its budget."""
    ctx = current_request()
    if ctx is None:
        return
    ctx.model = model
    if ctx.ticket is None:
        return
    distinct = {id(p): len(p) for p in prompts}
    budget = sum(p.max_tokens if p.max_tokens is not None else max(0, context_size - len(ids))
                 for ids, p in zip(prompts, params))
    try:
        await ctx.tenants.admit(ctx.ticket, model, sum(distinct.values()) + budget)
    except Refused as refused:
        raise refusal_error(refused) from None


async def admit_inputs(model: str, tokens: int) -> None:
    """For work whose whole cost is its input tokens (embeddings, rerank): admitted and metered as prompt tokens."""
    ctx = current_request()
    if ctx is None:
        return
    ctx.model = model
    if ctx.ticket is None:
        return
    try:
        await ctx.tenants.admit(ctx.ticket, model, tokens)
    except Refused as refused:
        raise refusal_error(refused) from None
    ctx.ticket.meters.append(lambda: (tokens, 0, 0))
