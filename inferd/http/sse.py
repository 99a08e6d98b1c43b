"""Server-sent events: framing, keep-alive comments while a request waits,
and the rule that a stream never ends silently on an error."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

from fastapi.responses import StreamingResponse

from inferd.http.errors import APIError, error_body, to_api_error

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
DONE = "data: [DONE]\n\n"


def sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n"


async def with_keepalive(events: AsyncIterator[str], interval: float = KEEPALIVE_SECONDS) -> AsyncIterator[str]:
    """Yield `events`, inserting an SSE comment whenever `interval` passes
    without one, so proxies keep the connection during queueing or prefill."""
    iterator = events.__aiter__()
    pending = asyncio.ensure_future(iterator.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield ": keep-alive\n\n"
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            yield event
            pending = asyncio.ensure_future(iterator.__anext__())
    finally:
        if not pending.done():
            pending.cancel()
        # Let the cancelled step unwind before closing the generator it runs in.
        await asyncio.gather(pending, return_exceptions=True)
        await iterator.aclose()


def openai_error_event(err: APIError) -> str:
    return f"event: error\n{sse(error_body(err.message, err.type, err.param, err.code))}"


async def guard_stream(
    events: AsyncIterator[str], error_event: Callable[[APIError], str] = openai_error_event
) -> AsyncIterator[str]:
    """An exception mid-stream becomes the dialect's `error` event, never a silent cut."""
    try:
        async for event in events:
            yield event
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the status line is already sent: report in-band
        yield error_event(to_api_error(exc))


def sse_response(
    events: AsyncIterator[str], error_event: Callable[[APIError], str] = openai_error_event
) -> StreamingResponse:
    return StreamingResponse(
        with_keepalive(guard_stream(events, error_event)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
