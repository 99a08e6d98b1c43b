"""Text to speech with Piper: one request's options, checked, and its audio
sentence by sentence (Piper splits the text into sentences itself)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from inferd.audio.requirements import require
from inferd.http.errors import BadRequest

MAX_INPUT = 4096  # characters, as OpenAI's speech route allows
MIN_SPEED, MAX_SPEED = 0.25, 4.0
MAX_NOISE = 2.0  # past Piper's defaults (0.667, 0.8) speech turns to babble long before this


@dataclass(frozen=True)
class SpeechRequest:
    input: str
    speed: float = 1.0
    # Piper's noise (its own server's names): how much the voice's sound and its phonemes'
    # lengths vary from one synthesis to the next; None is the voice's own, 0 speaks the
    # same text the same way every time.
    noise_scale: float | None = None
    noise_w_scale: float | None = None

    def __post_init__(self):
        if not self.input.strip():
            raise BadRequest("input is empty: give the text to speak", param="input")
        if len(self.input) > MAX_INPUT:
            raise BadRequest(f"input is {len(self.input)} characters; at most {MAX_INPUT} are spoken at once",
                             param="input")
        if not MIN_SPEED <= self.speed <= MAX_SPEED:
            raise BadRequest(f"speed must be between {MIN_SPEED} and {MAX_SPEED}", param="speed")
        for name in ("noise_scale", "noise_w_scale"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= MAX_NOISE:
                raise BadRequest(f"{name} must be between 0 and {MAX_NOISE} (0: the same audio every time)",
                                 param=name)


def synthesize(voice, request: SpeechRequest, stop: threading.Event) -> Iterator[np.ndarray]:
    """Each sentence's samples (float32 at the voice's rate); stops early when `stop` is set."""
    piper = require("piper")
    # Piper's length scale is time per phoneme: twice the speed is half the length.
    config = piper.SynthesisConfig(length_scale=(voice.config.length_scale or 1.0) / request.speed,
                                   noise_scale=request.noise_scale, noise_w_scale=request.noise_w_scale)
    for chunk in voice.synthesize(request.input, config):
        yield chunk.audio_float_array
        if stop.is_set():
            return
