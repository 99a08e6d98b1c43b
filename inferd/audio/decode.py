"""An uploaded file to the samples Whisper reads: mono float32 at 16 kHz.

PyAV (FFmpeg's libraries, which faster-whisper brings) reads the container,
whatever the file is called: WAV, FLAC, MP3, OGG, WebM, M4A and the rest of
what FFmpeg knows. Length is checked from the container's header when it
has one, and again while decoding, so a long file is refused before it is
held in memory.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from inferd.audio.errors import BadAudio
from inferd.audio.requirements import require

SAMPLE_RATE = 16000
FORMATS = "WAV, FLAC, MP3, OGG, WebM, M4A"


def decode_upload(file: BinaryIO, max_seconds: float) -> np.ndarray:
    av = require("av")
    file.seek(0, 2)
    if file.tell() == 0:
        raise BadAudio("file is empty: send an audio file")
    file.seek(0)
    try:
        container = av.open(file, mode="r", metadata_errors="ignore")
    except av.FFmpegError:
        raise BadAudio(f"file is not audio this server can decode; send {FORMATS} or another format FFmpeg reads") from None
    with container:
        if not container.streams.audio:
            raise BadAudio("file has no audio stream")
        declared = container.duration / av.time_base if container.duration else 0.0
        if declared > max_seconds:
            raise BadAudio(_too_long(declared, max_seconds))
        stream = container.streams.audio[0]
        # 16-bit first, as faster-whisper's own decode_audio does, so a file
        # transcribes the same here as through the library called directly.
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        limit = int(max_seconds * SAMPLE_RATE)
        parts, total = [], 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray().reshape(-1))
                    total += parts[-1].size
                if total > limit:
                    raise BadAudio(_too_long(total / SAMPLE_RATE, max_seconds, at_least=True))
            for out in resampler.resample(None):
                parts.append(out.to_ndarray().reshape(-1))
        except av.FFmpegError as error:
            raise BadAudio(f"the audio could not be decoded: {error}") from None
    samples = np.concatenate(parts).astype(np.float32) / 32768.0 if parts else np.zeros(0, np.float32)
    if samples.size == 0:
        raise BadAudio("file holds no audio samples")
    if samples.size > limit:
        raise BadAudio(_too_long(samples.size / SAMPLE_RATE, max_seconds))
    return samples


def _too_long(seconds: float, max_seconds: float, at_least: bool = False) -> str:
    more = "at least " if at_least else ""
    return (f"audio is {more}{seconds:.0f} s long; this server transcribes at most {max_seconds:.0f} s "
            f"(--max-audio-duration): split it into shorter files")
