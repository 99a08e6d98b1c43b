"""Server-sent events: framing, keep-alive comments while a request waits
(keepalive.py), and the rule that a stream never ends silently on an error."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

from fastapi.responses import StreamingResponse

from inferd.http.errors import APIError, error_body, to_api_error
from inferd.http.keepalive import with_keepalive

log = logging.getLogger(__name__)

DONE = "data: [DONE]\n\n"


_to_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def sse(payload: dict | str) -> str:
    return f"data: {payload if isinstance(payload, str) else _to_json(payload)}\n\n"


class ChunkFrame:
    """The events of one streamed response whose chunks differ only in their
    `choices`: the rest of the chunk (id, model, created...) serialized once,
    so a token's event serializes only its choices (a chunk validated and
    dumped whole took 10 µs a token; BENCHMARKS.md)."""

    def __init__(self, chunk: dict):
        head, tail = _to_json({**chunk, "choices": []}).split('"choices":[]')
        self.head, self.tail = f'data: {head}"choices":[', f"]{tail}\n\n"

    def event(self, choices: list[dict]) -> str:
        return self.head + ",".join(map(_to_json, choices)) + self.tail


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
