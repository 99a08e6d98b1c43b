"""Synthesized samples to the bytes of a response_format, a sentence at a time.

Everything leaves as 16-bit mono at 24 kHz, the rate OpenAI's speech route
uses (raw `pcm` carries no header, so clients assume it). wav and pcm are
written here; mp3, opus (in Ogg), aac (ADTS) and flac are encoded by PyAV,
FFmpeg's libraries that come with the audio extra. Streamed, a WAV header
cannot know the length yet and says "unknown" (0xFFFFFFFF), as streamed WAV
does; answered whole, it carries the exact sizes.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from inferd.audio.requirements import require
from inferd.http.errors import BadRequest

OUTPUT_RATE = 24000
SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
# response_format: (container, encoder)
_ENCODED = {"mp3": ("mp3", "libmp3lame"), "opus": ("ogg", "libopus"), "aac": ("adts", "aac"), "flac": ("flac", "flac")}
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm"}
_UNKNOWN = 0xFFFFFFFF


def check_format(response_format: str) -> None:
    if response_format not in SPEECH_FORMATS:
        raise BadRequest(f"response_format must be one of {', '.join(SPEECH_FORMATS)}", param="response_format")
    if response_format in _ENCODED and not encoder_available(_ENCODED[response_format][1]):
        raise BadRequest(f"response_format {response_format} needs an encoder this server's FFmpeg libraries "
                         "lack; ask for wav or pcm", param="response_format")


def encoder_available(codec: str) -> bool:
    av = require("av")
    try:
        av.codec.Codec(codec, "w")
    except (av.FFmpegError, ValueError):  # PyAV raises UnknownCodecError, a ValueError
        return False
    return True


def wav_header(sample_rate: int, data_bytes: int | None) -> bytes:
    data = _UNKNOWN if data_bytes is None else data_bytes
    riff = _UNKNOWN if data_bytes is None else 36 + data_bytes
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1, sample_rate,
                       sample_rate * 2, 2, 16, b"data", data)


class _Sink(io.RawIOBase):
    """Where a streamed container is written: not seekable, so the muxer never
    goes back to bytes already sent; each `take()` hands over what is new."""

    def __init__(self):
        self.buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.buffer += data
        return len(data)

    def take(self) -> bytes:
        data, self.buffer = bytes(self.buffer), bytearray()
        return data


class SpeechEncoder:
    """`add(samples)` per sentence (float32 at the voice's rate) and then
    `finish()`: each gives the bytes ready to send. Whole (`streaming`
    False), everything comes from `finish()`."""

    def __init__(self, response_format: str, sample_rate: int, streaming: bool):
        self.av = require("av")
        self.format, self.sample_rate, self.streaming = response_format, sample_rate, streaming
        self.resampler = self.av.AudioResampler(format="s16", layout="mono", rate=OUTPUT_RATE)
        self.pcm = bytearray()  # wav and pcm answered whole
        self.container = self.stream = None
        self.started = False
        if response_format in _ENCODED:
            container, codec = _ENCODED[response_format]
            self.sink = _Sink() if streaming else io.BytesIO()
            self.container = self.av.open(self.sink, mode="w", format=container)
            self.stream = self.container.add_stream(codec, rate=OUTPUT_RATE, layout="mono")

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]

    def add(self, samples: np.ndarray) -> bytes:
        frame = self.av.AudioFrame.from_ndarray(samples.astype(np.float32).reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.sample_rate
        return self._encode(self.resampler.resample(frame))

    def finish(self) -> bytes:
        data = self._encode(self.resampler.resample(None))
        if self.container is not None:
            for packet in self.stream.encode(None):
                self.container.mux(packet)
            self.container.close()
            return data + (self.sink.take() if self.streaming else self.sink.getvalue())
        if not self.streaming:
            header = wav_header(OUTPUT_RATE, len(self.pcm)) if self.format == "wav" else b""
            return header + bytes(self.pcm)
        return data

    def _encode(self, frames) -> bytes:
        if self.container is not None:
            for frame in frames:
                for packet in self.stream.encode(frame):
                    self.container.mux(packet)
            return self.sink.take() if self.streaming else b""
        pcm = b"".join(bytes(f.planes[0])[: f.samples * 2] for f in frames)
        if not self.streaming:
            self.pcm += pcm
            return b""
        if self.format == "wav" and not self.started:
            pcm = wav_header(OUTPUT_RATE, None) + pcm
        self.started = True
        return pcm
