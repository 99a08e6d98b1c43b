"""Uploads to Whisper's input: the formats clients send decode to mono
16 kHz; empty, non-audio and too-long files are refused with the reason."""

from __future__ import annotations

import io
import wave

import av
import numpy as np
import pytest

from inferd.audio.decode import SAMPLE_RATE, decode_upload
from inferd.audio.errors import BadAudio
from inferd.audio.encode import wav_header

RATE = 24000


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)


def encoded(container: str, codec: str, seconds: float = 1.0, rate: int = RATE) -> io.BytesIO:
    out = io.BytesIO()
    with av.open(out, mode="w", format=container) as c:
        stream = c.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(tone(seconds)[None, :], format="s16", layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            c.mux(packet)
    out.seek(0)
    return out


def wav_file(samples: np.ndarray, rate: int = RATE) -> io.BytesIO:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(samples.tobytes())
    out.seek(0)
    return out


@pytest.mark.parametrize(("container", "codec"), [
    ("flac", "flac"), ("mp3", "libmp3lame"), ("ogg", "libopus"), ("webm", "libopus"), ("ipod", "aac"),
], ids=["flac", "mp3", "ogg", "webm", "m4a"])
def test_each_upload_format_decodes_to_16khz_mono(container, codec):
    samples = decode_upload(encoded(container, codec), max_seconds=60)
    assert samples.dtype == np.float32 and samples.ndim == 1
    # Encoders pad a little; the length is the tone's, to within 0.1 s.
    assert abs(samples.size - SAMPLE_RATE) < 0.1 * SAMPLE_RATE
    assert 0.1 < np.abs(samples).max() < 0.5


def test_wav_decodes_exactly():
    samples = decode_upload(wav_file(tone(2.0)), max_seconds=60)
    assert samples.size == 2 * SAMPLE_RATE


def test_an_empty_file_says_so():
    with pytest.raises(BadAudio, match="file is empty"):
        decode_upload(io.BytesIO(b""), max_seconds=60)


def test_text_named_wav_is_not_audio():
    with pytest.raises(BadAudio, match="not audio this server can decode; send WAV, FLAC, MP3, OGG, WebM, M4A"):
        decode_upload(io.BytesIO(b"hello, this is a text file\n" * 40), max_seconds=60)


def test_a_file_longer_than_the_limit_is_refused_from_its_header():
    with pytest.raises(BadAudio, match=r"audio is 90 s long; this server transcribes at most 60 s \(--max-audio-duration\)"):
        decode_upload(encoded("flac", "flac", seconds=90), max_seconds=60)


def test_a_streamed_wav_with_no_length_in_its_header_is_refused_too():
    # Its header says "unknown length": FFmpeg estimates it, and decoding stops past the limit.
    data = wav_header(RATE, None) + tone(5.0).tobytes()
    with pytest.raises(BadAudio, match=r"audio is (at least )?5 s long; this server transcribes at most 3 s"):
        decode_upload(io.BytesIO(data), max_seconds=3)


def test_errors_name_the_file_field():
    with pytest.raises(BadAudio) as error:
        decode_upload(io.BytesIO(b""), max_seconds=60)
    assert (error.value.status, error.value.param, error.value.code) == (400, "file", "invalid_audio")
