"""A chat run as Anthropic's event stream:

    message_start, then per content block content_block_start, deltas
    (thinking_delta / text_delta / input_json_delta), content_block_stop,
    with one ping after the first block opens; then message_delta
    (stop_reason, usage) and message_stop.

Each event is SSE with an `event:` line naming its type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from inferd.api.anthropic.results import stop_reason, usage
from inferd.api.anthropic.events import error_event, event
from inferd.http.sse import sse_response
from inferd.serving.chat import SubmittedChat


class BlockWriter:
    """Opens, fills and closes content blocks so that each kind of output
    (thinking, text, one block per tool call) gets its own index."""

    def __init__(self):
        self.count = 0
        self.open_key: tuple | None = None
        self.pinged = False

    def write(self, key: tuple, start_block: dict, delta: dict | None) -> list[str]:
        events = []
        if key != self.open_key:
            events += self.close()
            self.open_key = key
            events.append(event({"type": "content_block_start", "index": self.count, "content_block": start_block}))
            if not self.pinged:
                self.pinged = True
                events.append(event({"type": "ping"}))
        if delta is not None:
            events.append(event({"type": "content_block_delta", "index": self.count, "delta": delta}))
        return events

    def close(self) -> list[str]:
        if self.open_key is None:
            return []
        self.open_key = None
        self.count += 1
        return [event({"type": "content_block_stop", "index": self.count - 1})]

    def delta_events(self, d) -> list[str]:
        events = []
        if d.reasoning:
            events += self.write(("thinking",), {"type": "thinking", "thinking": "", "signature": ""},
                                 {"type": "thinking_delta", "thinking": d.reasoning})
        if d.content:
            events += self.write(("text",), {"type": "text", "text": ""}, {"type": "text_delta", "text": d.content})
        for call in d.tool_calls:
            start = {"type": "tool_use", "id": call.id or "", "name": call.name or "", "input": {}}
            delta = {"type": "input_json_delta", "partial_json": call.arguments} if call.arguments else None
            events += self.write(("tool_use", call.index), start, delta)
        return events


async def _events(chat: SubmittedChat, model: str, stop_sequences: list[str]) -> AsyncIterator[str]:
    output = chat.outputs[0]
    yield event({"type": "message_start", "message": {
        "id": chat.request_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": len(chat.prompt_ids), "output_tokens": 0},
    }})
    blocks = BlockWriter()
    final = None
    async with chat.generation as generation:
        async for _, out in generation:
            if out.text:
                for e in blocks.delta_events(output.feed(out.text)):
                    yield e
            if out.finished:
                final = out
                for e in blocks.delta_events(output.finish()):
                    yield e
    for e in blocks.close():
        yield e
    if not blocks.pinged:
        yield event({"type": "ping"})
    reason, sequence = stop_reason(final, output.called_tools, stop_sequences)
    yield event({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                 "usage": usage(final).model_dump()})
    yield event({"type": "message_stop"})


def message_events(chat: SubmittedChat, model: str, stop_sequences: list[str]) -> StreamingResponse:
    return sse_response(_events(chat, model, stop_sequences), error_event)
