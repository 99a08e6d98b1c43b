"""What every dialect shares once it has token ids: submit one engine request
per choice, then either collect the finals or fan the deltas in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from fastapi import Request

from inferd.engine.async_engine import AsyncEngine, RequestStream
from inferd.engine.outputs import RequestOutput
from inferd.engine.request import Priority
from inferd.engine.sampler import TokenLogprobs
from inferd.engine.sampling_params import SamplingParams
from inferd.server.errors import APIError, BadRequest
from inferd.server.metrics import observe_output

PRIORITIES = {"high": Priority.HIGH, "normal": Priority.NORMAL, "low": Priority.LOW}


def request_priority(raw: Request) -> Priority:
    value = raw.headers.get("x-priority", "normal").strip().lower()
    if value not in PRIORITIES:
        raise BadRequest(f"X-Priority must be high, normal or low, got {value!r}", param="X-Priority")
    return PRIORITIES[value]


def check_token_ids(engine: AsyncEngine, ids: Sequence[int], param: str = "prompt") -> list[int]:
    vocab = engine.engine.loaded.config.vocab_size
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise BadRequest(f"token id {bad} is outside the vocabulary [0, {vocab})", param=param)
    return list(ids)


@dataclass
class Choice:
    """One choice's whole output, accumulated from its deltas."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    final: RequestOutput | None = None

    def add(self, out: RequestOutput) -> None:
        self.text += out.text
        self.token_ids += out.token_ids
        self.logprobs += out.logprobs or []
        if out.finished:
            self.final = out


def submit(
    engine: AsyncEngine,
    base_id: str,
    prompts: Sequence[list[int]],
    params: Sequence[SamplingParams],
    priority: Priority,
    cache_prompt: bool,
    constraints: Sequence | None = None,
    reasoning_started: bool = False,
) -> list[RequestStream]:
    """One engine request per (prompt, params) pair; all-or-nothing on errors.
    `constraints`: one grammar constraint (or None) per request."""
    streams: list[RequestStream] = []
    constraints = constraints or [None] * len(prompts)
    try:
        for i, (ids, p, c) in enumerate(zip(prompts, params, constraints)):
            streams.append(engine.add_request(f"{base_id}-{i}", ids, p, priority, cache_prompt, c, reasoning_started))
    except BaseException:
        for s in streams:
            s.close()
        raise
    return streams


async def collect(streams: list[RequestStream]) -> list[Choice]:
    choices = [Choice(i) for i in range(len(streams))]
    try:
        async for i, out in fan_in(streams):
            choices[i].add(out)
    finally:
        for s in streams:
            s.close()
    for c in choices:
        raise_if_failed(c.final)
    return choices


def raise_if_failed(out: RequestOutput | None) -> None:
    if out is not None and out.finish_reason == "error":
        if out.error_is_client:
            raise BadRequest(out.error)
        raise APIError(out.error or "generation failed")


async def fan_in(streams: list[RequestStream]) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Deltas of several streams as they arrive, tagged by stream index."""
    if len(streams) == 1:
        async for out in streams[0]:
            observe_output(out)
            yield 0, out
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, stream: RequestStream) -> None:
        async for out in stream:
            await queue.put((i, out))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(streams)
    try:
        while remaining:
            i, out = await queue.get()
            observe_output(out)
            if out.finished:
                remaining -= 1
            yield i, out
    finally:
        for t in tasks:
            t.cancel()
