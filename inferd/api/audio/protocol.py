"""Wire models of the audio routes (the multipart forms are read in routes.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class VoiceId(BaseModel):
    id: str


class SpeechBody(BaseModel):
    """POST /v1/audio/speech. `instructions` is accepted and not used: Piper
    voices take no style prompt. `noise_scale` and `noise_w_scale` are
    inferd's own (Piper's): 0 and 0 speak the same text the same way every time."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str
    voice: str | VoiceId | None = None
    instructions: str | None = None
    response_format: str = "mp3"
    speed: float = 1.0
    noise_scale: float | None = None
    noise_w_scale: float | None = None
    stream_format: Literal["audio", "sse"] = "audio"
    stream: bool = Field(True, description="send audio as it is synthesized; false: the whole file at once")

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceId) else self.voice


class VoiceCard(BaseModel):
    id: str
    object: Literal["audio.voice"] = "audio.voice"
    name: str
    language: str
    quality: str
    sample_rate: int
    default: bool


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VoiceCard]
