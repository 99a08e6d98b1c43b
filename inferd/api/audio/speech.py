"""POST /v1/audio/speech: Piper on the audio threads, the audio sent as it
is synthesized (sentence by sentence), whole with "stream": false, or as
OpenAI's speech.audio events with "stream_format": "sse"."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from inferd.api.audio.protocol import SpeechBody
from inferd.audio.encode import MEDIA_TYPES
from inferd.audio.service import SPEECH_MODEL, AudioService
from inferd.audio.synthesize import SpeechRequest
from inferd.http.sse import sse, sse_response
from inferd.serving.admission import admit_inputs
from inferd.serving.generation import unless_disconnected


async def answer_speech(audio: AudioService, raw: Request, body: SpeechBody):
    audio.check_speech_model(body.model)
    await admit_inputs(body.model or SPEECH_MODEL, 0)  # the key's scopes and limits; speech costs no tokens
    voice = audio.voice(body.voice_name)
    request = SpeechRequest(input=body.input, speed=body.speed, noise_scale=body.noise_scale,
                            noise_w_scale=body.noise_w_scale)
    sse_events = body.stream_format == "sse"
    streaming = sse_events or body.stream
    chunks = audio.speak(voice, request, body.response_format, streaming)
    media_type = MEDIA_TYPES[body.response_format]
    if not streaming:
        data = await unless_disconnected(raw, _collect(chunks))
        return Response(data, media_type=media_type)
    # The first sentence comes before the status line: failures up to it are plain HTTP errors.
    first = await unless_disconnected(raw, anext(chunks))
    if sse_events:
        return sse_response(_events(first, chunks))
    return StreamingResponse(_chunks(first, chunks), media_type=media_type)


async def _collect(chunks: AsyncIterator[bytes]) -> bytes:
    try:
        return b"".join([chunk async for chunk in chunks])
    finally:
        await chunks.aclose()


async def _chunks(first: bytes, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for chunk in chunks:
            yield chunk
    finally:
        await chunks.aclose()


async def _events(first: bytes, chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    async for chunk in _chunks(first, chunks):
        if chunk:
            yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()})
    yield sse({"type": "speech.audio.done"})
