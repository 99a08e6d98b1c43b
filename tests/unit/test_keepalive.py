"""Keep-alive comments in an event stream, and the chunk frame: what each
streamed token costs the event loop, with the behaviour of the simple way."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd.api.openai.protocol import (ChatChunkChoice, ChatCompletionChunk, CompletionChoice, CompletionResponse,
                                        DeltaMessage)
from inferd.http.keepalive import KEEPALIVE_COMMENT, with_keepalive
from inferd.http.sse import ChunkFrame, sse


def run(coro):
    return asyncio.run(coro)


def test_a_steady_stream_gets_no_comments():
    async def go():
        async def steady():
            for i in range(8):
                await asyncio.sleep(0.01)
                yield f"data: {i}\n\n"

        return [e async for e in with_keepalive(steady(), interval=0.5)]

    assert run(go()) == [f"data: {i}\n\n" for i in range(8)]


def test_the_source_failing_reaches_the_reader_after_its_events():
    async def go():
        async def failing():
            yield "data: 1\n\n"
            raise RuntimeError("the engine went away")

        seen = []
        with pytest.raises(RuntimeError, match="the engine went away"):
            async for event in with_keepalive(failing()):
                seen.append(event)
        return seen

    assert run(go()) == ["data: 1\n\n"]


def test_closing_the_stream_closes_its_source_and_stops_the_read():
    async def go():
        closed, produced = asyncio.Event(), []

        async def endless():
            try:
                for i in range(1000):
                    produced.append(i)
                    yield f"data: {i}\n\n"
            finally:
                closed.set()

        stream = with_keepalive(endless())
        first = await stream.__anext__()
        await asyncio.sleep(0.01)  # the read may go ahead meanwhile
        await stream.aclose()
        return first, closed.is_set(), len(produced)

    first, closed, produced = run(go())
    # The read goes at most two events ahead of a reader that stopped after one.
    assert (first, closed) == ("data: 0\n\n", True) and produced <= 3


def test_a_silence_after_events_gets_a_comment_then_the_next_event():
    async def go():
        async def pause():
            yield "data: 1\n\n"
            await asyncio.sleep(0.12)
            yield "data: 2\n\n"

        return [e async for e in with_keepalive(pause(), interval=0.05)]

    events = run(go())
    assert events[0] == "data: 1\n\n" and events[-1] == "data: 2\n\n"
    assert events[1:-1] == [KEEPALIVE_COMMENT] * len(events[1:-1]) and len(events[1:-1]) >= 1


@pytest.mark.parametrize("model", ["gemma", 'odd","choices":[]"name', "ünïcödé \\ \"quoted\""])
def test_a_framed_completion_chunk_is_the_whole_chunk_dumped(model):
    envelope = CompletionResponse(id="cmpl-1", created=7, model=model, choices=[], system_fingerprint="fp_1")
    choice = CompletionChoice(index=0, text=' "hi"\n', finish_reason="stop", stop_reason=None)
    whole = CompletionResponse(id="cmpl-1", created=7, model=model, choices=[choice], system_fingerprint="fp_1")
    framed = ChunkFrame(envelope.model_dump()).event([choice.model_dump()])
    assert framed == sse(whole.model_dump())
    assert json.loads(framed[len("data: "):])["choices"][0]["text"] == ' "hi"\n'


def test_a_framed_chat_chunk_keeps_the_fields_after_its_choices():
    envelope = ChatCompletionChunk(id="chatcmpl-1", created=7, model="m", choices=[], system_fingerprint="fp_1")
    choices = [ChatChunkChoice(index=i, delta=DeltaMessage(content=str(i))) for i in range(2)]
    whole = ChatCompletionChunk(id="chatcmpl-1", created=7, model="m", choices=choices, system_fingerprint="fp_1")
    framed = ChunkFrame(envelope.model_dump()).event([c.model_dump() for c in choices])
    assert framed == sse(whole.model_dump())
    assert list(json.loads(framed[len("data: "):])) == ["id", "object", "created", "model", "choices", "usage",
                                                         "system_fingerprint"]
