"""POST /v1/audio/transcriptions and /v1/audio/translations: decode the
upload and run Whisper on the audio threads, then answer in the requested
response_format, or as OpenAI's transcript events when streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse

from inferd.audio import formats
from inferd.audio.service import AudioService
from inferd.audio.transcribe import Transcript, TranscriptionRequest
from inferd.http.errors import BadRequest
from inferd.http.sse import sse, sse_response
from inferd.serving.admission import admit_inputs
from inferd.serving.generation import unless_disconnected


async def answer_transcription(audio: AudioService, raw: Request, file: UploadFile, model: str | None,
                               request: TranscriptionRequest, response_format: str, stream: bool):
    if response_format not in formats.RESPONSE_FORMATS:
        raise BadRequest(f"response_format must be one of {', '.join(formats.RESPONSE_FORMATS)}",
                         param="response_format")
    if request.words and response_format != "verbose_json":
        raise BadRequest("timestamp_granularities[] needs response_format verbose_json",
                         param="timestamp_granularities")
    audio.check_transcription_model(model)
    await admit_inputs(model or audio.models.whisper_name, 0)  # the key's scopes and limits; usage is in seconds, not tokens
    items = audio.transcribe(file.file, request)
    if stream:
        # Decoding and the model's checks come first, so their errors are plain HTTP errors.
        transcript = await unless_disconnected(raw, anext(items))
        return sse_response(_events(items, transcript))
    transcript = await unless_disconnected(raw, _collect(items))
    return _whole(transcript, request, response_format)


async def _collect(items: AsyncIterator) -> Transcript:
    try:
        transcript = await anext(items)
        transcript.segments = [segment async for segment in items]
        return transcript
    finally:
        await items.aclose()


def _whole(transcript: Transcript, request: TranscriptionRequest, response_format: str):
    if response_format == "json":
        return JSONResponse(formats.as_json(transcript))
    if response_format == "verbose_json":
        return JSONResponse(formats.as_verbose_json(transcript, request.task, request.granularities))
    text = {"text": formats.as_text, "srt": formats.as_srt, "vtt": formats.as_vtt}[response_format](transcript)
    return PlainTextResponse(text, media_type=formats.MEDIA_TYPES[response_format])


async def _events(items: AsyncIterator, transcript: Transcript) -> AsyncIterator[str]:
    """One `transcript.text.delta` per segment (together they are the done event's
    text), then `transcript.text.done`."""
    try:
        async for segment in items:
            delta = segment.text if transcript.segments else segment.text.lstrip()
            transcript.segments.append(segment)
            if delta:
                yield sse({"type": "transcript.text.delta", "delta": delta})
        yield sse({"type": "transcript.text.done", "text": transcript.text, "usage": formats.usage(transcript)})
    finally:
        await items.aclose()
