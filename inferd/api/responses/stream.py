"""A chat run as the Responses event stream:

    response.created, response.in_progress, then per output item
    response.output_item.added, its parts and deltas
      (reasoning: content_part.added, reasoning_text.delta…, reasoning_text.done, content_part.done;
       message: content_part.added, output_text.delta…, output_text.done, content_part.done;
       function_call: function_call_arguments.delta…, function_call_arguments.done),
    response.output_item.done; finally response.completed (or response.incomplete).

Each event is SSE with an `event:` line naming its type, and carries a
sequence_number counting from 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi.responses import StreamingResponse

from inferd.api.responses.convert import (
    function_call_item, is_incomplete, message_item, output_text_part, reasoning_item, usage,
)
from inferd.api.responses.events import Sequencer
from inferd.api.responses.protocol import ResponseObject, new_item_id
from inferd.http.sse import sse_response
from inferd.serving.chat import SubmittedChat


class ItemWriter:
    """Opens, fills and closes output items so that each kind of output
    (reasoning, text, one item per tool call) becomes its own item."""

    def __init__(self, seq: Sequencer):
        self.seq = seq
        self.items: list[dict] = []  # finished items, in output order
        self.open_key: tuple | None = None
        self.open_item: dict | None = None
        self.text = ""

    @property
    def index(self) -> int:
        return len(self.items)

    def _open(self, key: tuple, item: dict) -> list[str]:
        events = self.close()
        self.open_key, self.open_item, self.text = key, item, ""
        events.append(self.seq.event("response.output_item.added", output_index=self.index, item=item))
        if item["type"] == "message":
            events.append(self._part_event("response.content_part.added", output_text_part("")))
        elif item["type"] == "reasoning":
            events.append(self._part_event("response.content_part.added", {"type": "reasoning_text", "text": ""}))
        return events

    def _part_event(self, type_: str, part: dict) -> str:
        return self.seq.event(type_, item_id=self.open_item["id"], output_index=self.index, content_index=0, part=part)

    def _text_event(self, type_: str, **fields) -> str:
        return self.seq.event(type_, item_id=self.open_item["id"], output_index=self.index, content_index=0, **fields)

    def reasoning(self, text: str) -> list[str]:
        events = []
        if self.open_key != ("reasoning",):
            events += self._open(("reasoning",), {"id": new_item_id("rs"), "type": "reasoning", "summary": [],
                                                  "content": [], "status": "in_progress"})
        self.text += text
        return events + [self._text_event("response.reasoning_text.delta", delta=text)]

    def content(self, text: str) -> list[str]:
        events = []
        if self.open_key != ("message",):
            events += self._open(("message",), {"id": new_item_id("msg"), "type": "message", "status": "in_progress",
                                                "role": "assistant", "content": []})
        if text:
            self.text += text
            events.append(self._text_event("response.output_text.delta", delta=text, logprobs=[]))
        return events

    def call(self, delta) -> list[str]:
        events = []
        if self.open_key != ("function_call", delta.index):
            item = function_call_item(delta.id or "", delta.name or "", "", "in_progress")
            events += self._open(("function_call", delta.index), item)
        if delta.arguments:
            self.text += delta.arguments
            events.append(self.seq.event("response.function_call_arguments.delta", item_id=self.open_item["id"],
                                         output_index=self.index, delta=delta.arguments))
        return events

    def feed(self, d) -> list[str]:
        events = self.reasoning(d.reasoning) if d.reasoning else []
        if d.content:
            events += self.content(d.content)
        for call in d.tool_calls:
            events += self.call(call)
        return events

    def close(self, message_status: str = "completed") -> list[str]:
        if self.open_item is None:
            return []
        item, text, events = self.open_item, self.text, []
        if item["type"] == "message":
            done = message_item(text, message_status, id=item["id"])
            events.append(self._text_event("response.output_text.done", text=text, logprobs=[]))
            events.append(self._part_event("response.content_part.done", done["content"][0]))
        elif item["type"] == "reasoning":
            done = reasoning_item(text, id=item["id"])
            events.append(self._text_event("response.reasoning_text.done", text=text))
            events.append(self._part_event("response.content_part.done", done["content"][0]))
        else:
            done = function_call_item(item["call_id"], item["name"], text, id=item["id"])
            events.append(self.seq.event("response.function_call_arguments.done", item_id=item["id"],
                                         output_index=self.index, name=item["name"], arguments=text))
        events.append(self.seq.event("response.output_item.done", output_index=self.index, item=done))
        self.items.append(done)
        self.open_key, self.open_item, self.text = None, None, ""
        return events


Build = Callable[..., ResponseObject]


async def _events(chat: SubmittedChat, build: Build, finish: Callable[[ResponseObject], Awaitable[None]],
                  seq: Sequencer) -> AsyncIterator[str]:
    output = chat.outputs[0]
    started = build("in_progress", []).model_dump()
    yield seq.event("response.created", response=started)
    yield seq.event("response.in_progress", response=started)
    items = ItemWriter(seq)
    final = None
    async with chat.generation as generation:
        async for _, out in generation:
            if out.text:
                for e in items.feed(output.feed(out.text)):
                    yield e
            if out.finished:
                final = out
                for e in items.feed(output.finish()):
                    yield e
    incomplete = is_incomplete(final, output.called_tools)
    if not items.items and items.open_item is None:
        for e in items.content(""):  # an empty answer is still one (empty) message
            yield e
    for e in items.close("incomplete" if incomplete else "completed"):
        yield e
    response = build("incomplete" if incomplete else "completed", items.items, usage(final))
    await finish(response)
    yield seq.event("response.incomplete" if incomplete else "response.completed", response=response.model_dump())


def response_events(chat: SubmittedChat, build: Build,
                    finish: Callable[[ResponseObject], Awaitable[None]]) -> StreamingResponse:
    seq = Sequencer()
    return sse_response(_events(chat, build, finish, seq), seq.error)
