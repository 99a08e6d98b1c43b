"""Speech to text with faster-whisper: one request's options, checked
against the model, and its segments as the model makes them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from inferd.audio.requirements import require
from inferd.http.errors import BadRequest

# Whisper's own schedule: at temperature 0, fall back to higher ones when a
# window's output fails its compression or log-probability checks.
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
GRANULARITIES = ("word", "segment")


@dataclass(frozen=True)
class TranscriptionRequest:
    task: str = "transcribe"  # or "translate" (to English)
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    granularities: tuple[str, ...] = ("segment",)

    def __post_init__(self):
        if not 0.0 <= self.temperature <= 1.0:
            raise BadRequest("temperature must be between 0 and 1", param="temperature")
        for g in self.granularities:
            if g not in GRANULARITIES:
                raise BadRequest(f"timestamp_granularities[]: {g!r} is not one of word, segment",
                                 param="timestamp_granularities")

    @property
    def words(self) -> bool:
        return "word" in self.granularities


@dataclass
class Transcript:
    """What the answer formats read: the segments (faster-whisper's, with
    words when asked for), the language and the audio's length."""

    language: str
    duration: float
    segments: list = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()


def check_request(model, model_name: str, request: TranscriptionRequest) -> None:
    """What the model cannot do is a 400 before any audio is decoded."""
    if not model.model.is_multilingual:
        if request.task == "translate":
            raise BadRequest(f"the Whisper model served here ({model_name}) is English-only and cannot translate; "
                             "start the server with a multilingual Whisper model (--whisper-model)", param="model")
        if request.language not in (None, "en"):
            raise BadRequest(f"the Whisper model served here ({model_name}) is English-only: "
                             "leave language out or set it to 'en'", param="language")
    elif request.language is not None and request.language not in model.supported_languages:
        raise BadRequest(f"language {request.language!r} is not an ISO-639-1 code this model knows",
                         param="language")


def transcribe(model, audio: np.ndarray, request: TranscriptionRequest,
               stop: threading.Event) -> Iterator[Transcript | object]:
    """First an empty `Transcript` (language and duration), then each segment
    as it is decoded; stops early when `stop` is set."""
    temperature = FALLBACK_TEMPERATURES if request.temperature == 0 else (request.temperature,)
    segments, info = model.transcribe(
        audio, task=request.task, language=request.language or ("en" if not model.model.is_multilingual else None),
        initial_prompt=request.prompt or None, temperature=temperature, word_timestamps=request.words)
    yield Transcript(language=info.language, duration=info.duration)
    for segment in segments:
        yield segment
        if stop.is_set():
            return


def language_name(code: str) -> str:
    """Whisper's language code as OpenAI names it in verbose_json ("en" -> "english")."""
    langcodes = require("langcodes")
    return langcodes.Language.get(code).display_name().lower()
