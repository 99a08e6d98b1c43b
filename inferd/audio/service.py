"""What the audio routes call: one server's speech models and the bounded
threads their work runs on.

Model names: a transcription may name the served Whisper model or any of
OpenAI's transcription models (clients hard-code them); speech may name
"piper" or OpenAI's speech models. OpenAI's voice names speak with the
default voice, so clients written for OpenAI work unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import BinaryIO

from inferd.audio.decode import decode_upload
from inferd.audio.encode import SpeechEncoder, check_format
from inferd.audio.executor import AudioExecutor
from inferd.audio.models import Locate, SpeechModels, Voice
from inferd.audio.requirements import check_installed
from inferd.audio.synthesize import SpeechRequest, synthesize
from inferd.audio.transcribe import TranscriptionRequest, check_request, transcribe
from inferd.http.errors import NotFound

OPENAI_TRANSCRIPTION_MODELS = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
SPEECH_MODEL = "piper"
OPENAI_SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
                           "verse", "marin", "cedar"})


class AudioService:
    def __init__(self, models: SpeechModels, executor: AudioExecutor, max_seconds: float):
        self.models = models
        self.executor = executor
        self.max_seconds = max_seconds

    @classmethod
    def from_config(cls, config, locate: Locate | None = None) -> AudioService:
        """Nothing loads here: a text-only server pays nothing for audio. Options
        that can never work (a --voice that is not there) raise ValueError now.
        `locate` finds --whisper-model and --voice by their names in the model store."""
        if config.max_audio_duration <= 0 or config.max_audio_size <= 0:
            raise ValueError("--max-audio-duration and --max-audio-size must be more than 0")
        models = SpeechModels(config.whisper_model, config.voice, config.threads, config.audio_parallel, locate)
        models.check()
        return cls(models, AudioExecutor(config.audio_parallel, config.audio_queue), config.max_audio_duration)

    # -- speech to text ------------------------------------------------------------
    def check_transcription_model(self, requested: str | None) -> None:
        names = (self.models.whisper_name, *OPENAI_TRANSCRIPTION_MODELS)
        if requested and requested not in names:
            raise NotFound(f"model {requested!r} does not transcribe here; use one of {', '.join(map(repr, names))}",
                           param="model", code="model_not_found")

    def transcribe(self, file: BinaryIO, request: TranscriptionRequest) -> AsyncIterator:
        """A `Transcript` (language, duration) once the audio is decoded, then its
        segments as they are decoded. Raises at once when the queue is full."""
        check_installed("av", "faster_whisper")

        def job(stop: threading.Event):
            audio = decode_upload(file, self.max_seconds)  # a bad upload is refused before any model loads
            model = self.models.whisper()
            check_request(model, self.models.whisper_name, request)
            yield from transcribe(model, audio, request, stop)

        return self.executor.stream(job)

    # -- text to speech ------------------------------------------------------------
    def check_speech_model(self, requested: str | None) -> None:
        names = (SPEECH_MODEL, *OPENAI_SPEECH_MODELS)
        if requested and requested not in names:
            raise NotFound(f"model {requested!r} does not speak here; use one of {', '.join(map(repr, names))}",
                           param="model", code="model_not_found")

    def voice(self, requested: str | None) -> Voice:
        return self.models.voice(None if requested in OPENAI_VOICES else requested)

    def speak(self, voice: Voice, request: SpeechRequest, response_format: str, streaming: bool) -> AsyncIterator[bytes]:
        """The audio's bytes: sentence by sentence when `streaming`, else in one piece."""
        check_installed("av", "piper")
        check_format(response_format)

        def job(stop: threading.Event):
            piper = self.models.piper(voice)
            encoder = SpeechEncoder(response_format, voice.sample_rate, streaming)
            for samples in synthesize(piper, request, stop):
                data = encoder.add(samples)
                if data:
                    yield data
            if not stop.is_set():
                yield encoder.finish()

        return self.executor.stream(job)

    def shutdown(self) -> None:
        self.executor.shutdown()
