"""What every dialect shares once it has token ids: one engine request per
choice, submitted together, read as one `Generation`.

A `Generation` owns its engine requests. Used as `async with` it closes every
one of them however the block ends, so a client that goes away, or an error
mid-stream, never leaves the engine generating for nobody. A streamed answer
learns of a disconnect when its stream is closed; a whole answer
(`Generation.collect`) watches the connection itself while it waits, and a
client that leaves first aborts every request at once (`ClientDisconnected`).

This is the one place the dialects meet the engine, so engine exceptions
become HTTP errors here (a full queue is a 503 with Retry-After), and the one
place every generation passes: it gets its request card (`serving/cards.py`)
and meters its tokens for the key that asked (`http/request_context.py`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request

from inferd.engine.async_engine import AsyncEngine, RequestStream
from inferd.engine.engine_request import EngineRequest, Priority
from inferd.engine.errors import EngineDeadError, QueueFullError, RequestRejected
from inferd.engine.outputs import RequestOutput, RequestTiming, TokenLogprobs, Usage
from inferd.engine.sampling_params import SamplingParams
from inferd.http.errors import APIError, BadRequest, ContextSizeExceeded, ServiceUnavailable
from inferd.http.request_context import RequestContext, current_request
from inferd.serving.cards import RequestCard, RequestCards
from inferd.serving.metrics import observe_output

T = TypeVar("T")

PRIORITIES = {"high": Priority.HIGH, "normal": Priority.NORMAL, "low": Priority.LOW}


ENGINE_UNAVAILABLE = (QueueFullError, EngineDeadError)


def engine_unavailable(exc: QueueFullError | EngineDeadError) -> ServiceUnavailable:
    """The HTTP meaning of an engine that cannot take work now."""
    if isinstance(exc, QueueFullError):
        return ServiceUnavailable(str(exc), code="queue_full", headers={"Retry-After": "1"})
    return ServiceUnavailable(str(exc), code="shutting_down")


class ClientDisconnected(APIError):
    """The client went away before its answer was ready. The answer goes
    nowhere (the server drops what is sent to a closed connection); its status,
    nginx's 499 "client closed request", is what the request metrics count."""

    status, type = 499, "client_closed_request"

    def __init__(self) -> None:
        super().__init__("the client closed the connection before the answer was ready")


class RequestCancelled(APIError):
    """Cancelled from another connection (`POST /v1/requests/{id}/cancel`)."""

    status, type = 409, "request_cancelled"

    def __init__(self) -> None:
        super().__init__("this request was cancelled (POST /v1/requests/{id}/cancel); its output is incomplete",
                         code="cancelled")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


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


@dataclass(frozen=True)
class Submission:
    """What one API request asks of the engine, shared by its choices."""

    request_id: str
    priority: Priority = Priority.NORMAL
    cache_prompt: bool = True
    cache_salt: str | None = None
    reasoning_started: bool = False


def submit(engine: AsyncEngine, submission: Submission, prompts: Sequence[list[int]],
           params: Sequence[SamplingParams], constraints: Sequence | None = None) -> Generation:
    """One engine request per (prompt, params) pair, all or none.
    `constraints`: one grammar constraint (or None) per request."""
    room = engine.engine.config.max_queue
    if len(prompts) > room:  # no retry could help: the queue never holds them all at once
        raise BadRequest(f"this request asks for {len(prompts)} generations (prompts x n); the server takes "
                         f"at most {room} generations (--max-queue) in one request: send fewer", param="n")
    constraints = constraints or [None] * len(prompts)
    ctx = current_request()
    salt = submission.cache_salt
    if ctx is not None and ctx.tenants is not None:
        salt = ctx.tenants.cache_salt(ctx.key, salt)
    streams: list[RequestStream] = []
    try:
        for i, (ids, p, c) in enumerate(zip(prompts, params, constraints)):
            streams.append(engine.add_request(EngineRequest(
                request_id=f"{submission.request_id}-{i}", prompt_token_ids=ids, params=p,
                priority=submission.priority, cache_prompt=submission.cache_prompt, constraint=c,
                reasoning_started=submission.reasoning_started, cache_salt=salt,
            )))
    except BaseException as exc:
        for s in streams:
            s.close()
        if isinstance(exc, ENGINE_UNAVAILABLE):
            raise engine_unavailable(exc) from None
        if isinstance(exc, RequestRejected) and (over := _overflow(engine, prompts, params)) is not None:
            raise ContextSizeExceeded(str(exc), *over) from None
        raise
    return Generation(streams, prompts, submission.request_id, ctx)


def _overflow(engine: AsyncEngine, prompts: Sequence[list[int]], params: Sequence[SamplingParams]):
    """(prompt tokens, context) of the first request that cannot fit the context, if any."""
    n_ctx = engine.engine.max_model_len
    for ids, p in zip(prompts, params):
        if len(ids) >= n_ctx or (p.max_tokens is not None and len(ids) + p.max_tokens > n_ctx):
            return len(ids), n_ctx
    return None


class Generation:
    """The engine requests of one API request, one per choice."""

    def __init__(self, streams: list[RequestStream], prompts: Sequence[list[int]] = (), request_id: str = "",
                 ctx: RequestContext | None = None):
        self.streams = streams
        # Each distinct prompt counts once, as the dialects' usage counts it.
        firsts = {id(p): i for i, p in reversed(list(enumerate(prompts)))}
        self._firsts = sorted(firsts.values())
        self.prompt_tokens = sum(len(prompts[i]) for i in self._firsts)
        self.completion_tokens = [0] * len(streams)
        self.cached_tokens = [0] * len(streams)
        self.finished = [False] * len(streams)
        self.ending: str | None = None  # "cancelled" | "interrupted", from the request's card
        self.started, self.first_output = time.monotonic(), None
        self.failed = False
        self.ticket = ctx.ticket if ctx is not None else None
        if self.ticket is not None:
            self.ticket.meters.append(self.usage)
        self.cards: RequestCards | None = ctx.services.get("cards") if ctx is not None else None
        self.card: RequestCard | None = None
        if self.cards is not None:
            self.card = self.cards.open(RequestCard(
                request_id, ctx.trace_id, ctx.key.name if ctx.key is not None else None, ctx.model, ctx.path,
                prompt_tokens=self.prompt_tokens, generation=self))
            ctx.cards.append(self.card)  # for the request's log line

    def usage(self) -> tuple[int, int, int]:
        """Prompt, completion and cached tokens so far."""
        return self.prompt_tokens, sum(self.completion_tokens), sum(self.cached_tokens[i] for i in self._firsts)

    def stop(self, how: str) -> bool:
        """End the unfinished choices from outside: "cancelled" (the reader gets
        `RequestCancelled`) or "interrupted" (the reader gets a normal final
        delta; the output so far stands). False when nothing was left running."""
        if self.ending is not None or all(self.finished):
            return False
        self.ending = how
        for i, s in enumerate(self.streams):
            if not self.finished[i] and not s.finished:
                usage = Usage(self.prompt_tokens, self.completion_tokens[i], self.cached_tokens[i])
                _end_stream(s, usage, RequestTiming(self.started, self.first_output, time.monotonic()))
        return True

    def _seen(self, i: int, out: RequestOutput) -> None:
        if out.token_ids and self.first_output is None:
            self.first_output = time.monotonic()
        self.completion_tokens[i] += len(out.token_ids)
        if out.finished:
            self.finished[i] = True
            if out.usage is not None:
                self.completion_tokens[i] = out.usage.completion_tokens
                self.cached_tokens[i] = out.usage.cached_tokens
        card = self.card
        if card is not None:
            card.saw_scheduled(out.scheduled)
            card.add_output(out.text)
            card.completion_tokens, card.cached_tokens = self.usage()[1:]

    def __len__(self) -> int:
        return len(self.streams)

    async def __aenter__(self) -> Generation:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Abort whatever has not finished; safe to call again."""
        for s in self.streams:
            s.close()
        if self.card is not None:
            state = self.ending or ("failed" if self.failed else "done" if all(self.finished) else "disconnected")
            self.cards.close(self.card, state)

    async def __aiter__(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Deltas as they arrive, tagged by choice index; a failed request raises."""
        async for i, out in _fan_in(self.streams):
            self._seen(i, out)
            observe_output(out)
            try:
                if out.finished and self.ending == "cancelled":
                    raise RequestCancelled()
                raise_if_failed(out)
            except APIError as err:
                self.failed = True
                if self.ticket is not None:
                    self.ticket.failed = True
                if self.card is not None:
                    self.card.error = err.message
                raise
            yield i, out

    async def collect(self, raw: Request) -> list[Choice]:
        """Every choice's whole output, once all have finished. A client of `raw`
        that disconnects first ends the wait: every engine request is aborted
        (within the engine's next step) and `ClientDisconnected` raised."""
        async with self:
            return await unless_disconnected(raw, self._collect())

    async def _collect(self) -> list[Choice]:
        choices = [Choice(i) for i in range(len(self.streams))]
        async for i, out in self:
            choices[i].add(out)
        return choices


def _end_stream(stream: RequestStream, usage: Usage, timing: RequestTiming) -> None:
    """Make what is queued for `stream`'s reader end with a final delta of
    its own (the output so far, finish reason "stop"), and abort the request."""
    queued = []
    while not stream.queue.empty():
        queued.append(stream.queue.get_nowait())
    if any(out.finished for out in queued):  # it finished on its own meanwhile
        for out in queued:
            stream.queue.put_nowait(out)
        return
    final = RequestOutput(stream.request_id, finished=True, finish_reason="stop")
    for out in queued:
        final.token_ids += out.token_ids
        final.text += out.text
        if out.logprobs is not None:
            final.logprobs = (final.logprobs or []) + out.logprobs
    final.usage = Usage(usage.prompt_tokens, usage.completion_tokens + len(final.token_ids), usage.cached_tokens)
    final.timing = timing
    stream.queue.put_nowait(final)
    stream.engine.abort(stream.request_id)  # the engine frees its slot; the reader ends with `final`


async def unless_disconnected(raw: Request, work: Coroutine[Any, Any, T]) -> T:
    """`work`'s result, unless `raw`'s client disconnects first: then `work` is
    cancelled and `ClientDisconnected` raised.

    Waits on the connection's `receive()` for `http.disconnect`, which is safe
    once the handler runs: FastAPI has read the whole body by then, so the only
    message left to come is the disconnect (vLLM's `with_cancellation` does the same).
    """
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(raw))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and watch.done() and watch.exception() is None:
            raise ClientDisconnected()
        return await task  # done, or the watch itself failed: keep waiting for the answer
    finally:
        for t in (task, watch):
            t.cancel()
        # Let a cancelled collection run its cleanup before the caller goes on.
        await asyncio.gather(task, watch, return_exceptions=True)


async def _disconnected(raw: Request) -> None:
    """Returns when the client disconnects."""
    while (await raw.receive())["type"] != "http.disconnect":
        pass  # an empty trailing body chunk: keep listening


def raise_if_failed(out: RequestOutput | None) -> None:
    if out is not None and out.finish_reason == "error":
        if out.error_is_client:
            raise BadRequest(out.error)
        if out.error_is_shutdown:
            raise ServiceUnavailable(out.error, code="shutting_down")
        raise APIError(out.error or "generation failed")


async def _fan_in(streams: list[RequestStream]) -> AsyncIterator[tuple[int, RequestOutput]]:
    if len(streams) == 1:
        async for out in streams[0]:
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
            if out.finished:
                remaining -= 1
            yield i, out
    finally:
        for t in tasks:
            t.cancel()
