"""OpenAI's audio routes: HTTP concerns only; the work is in inferd.audio,
the answers in transcriptions.py and speech.py beside this."""

from __future__ import annotations

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile

from inferd.api.audio.protocol import SpeechBody, VoiceCard, VoiceList
from inferd.api.audio.speech import answer_speech
from inferd.api.audio.transcriptions import answer_transcription
from inferd.audio.service import AudioService
from inferd.audio.transcribe import TranscriptionRequest
from inferd.http.errors import NotFound
from inferd.serving.state import ServerState, get_state

router = APIRouter()

_AUDIO = {200: {"content": {"audio/mpeg": {}, "audio/wav": {}, "audio/pcm": {}, "text/event-stream": {}},
                "description": "the audio, sent as it is synthesized unless stream is false"}}
_TEXT = {200: {"content": {"application/json": {}, "text/plain": {}, "text/event-stream": {}},
               "description": "the transcript in response_format, or server-sent events when stream is true"}}


def get_audio(state: ServerState = Depends(get_state)) -> AudioService:
    if state.audio is None:
        raise NotFound("this server serves no audio", code="audio_disabled")
    return state.audio


@router.post("/v1/audio/transcriptions", responses=_TEXT)
@router.post("/audio/transcriptions", include_in_schema=False)
async def transcriptions(
    raw: Request,
    file: UploadFile = File(..., description="the audio: WAV, FLAC, MP3, OGG, WebM, M4A, ..."),
    model: str | None = Form(None),
    language: str | None = Form(None),
    prompt: str | None = Form(None),
    response_format: str = Form("json"),
    temperature: float = Form(0.0),
    timestamp_granularities: list[str] = Form(["segment"], alias="timestamp_granularities[]"),
    stream: bool = Form(False),
    audio: AudioService = Depends(get_audio),
):
    request = TranscriptionRequest(language=language or None, prompt=prompt, temperature=temperature,
                                   granularities=tuple(timestamp_granularities))
    return await answer_transcription(audio, raw, file, model, request, response_format, stream)


@router.post("/v1/audio/translations", responses=_TEXT)
@router.post("/audio/translations", include_in_schema=False)
async def translations(
    raw: Request,
    file: UploadFile = File(..., description="the audio, in any language the model knows"),
    model: str | None = Form(None),
    prompt: str | None = Form(None),
    response_format: str = Form("json"),
    temperature: float = Form(0.0),
    audio: AudioService = Depends(get_audio),
):
    request = TranscriptionRequest(task="translate", prompt=prompt, temperature=temperature)
    return await answer_transcription(audio, raw, file, model, request, response_format, stream=False)


@router.post("/v1/audio/speech", responses=_AUDIO)
@router.post("/audio/speech", include_in_schema=False)
async def speech(body: SpeechBody, raw: Request, audio: AudioService = Depends(get_audio)):
    return await answer_speech(audio, raw, body)


@router.get("/v1/audio/voices", response_model=VoiceList)
@router.get("/audio/voices", response_model=VoiceList, include_in_schema=False)
async def voices(audio: AudioService = Depends(get_audio)):
    installed = audio.models.voices
    return VoiceList(data=[
        VoiceCard(id=v.id, name=v.name, language=v.language, quality=v.quality, sample_rate=v.sample_rate,
                  default=i == 0)
        for i, v in enumerate(installed)
    ])
