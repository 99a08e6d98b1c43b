"""A transcript in each response_format OpenAI's transcription route answers:
json, text, srt, verbose_json and vtt."""

from __future__ import annotations

from inferd.audio.transcribe import Transcript, language_name

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
MEDIA_TYPES = {"json": "application/json", "verbose_json": "application/json", "text": "text/plain",
               "srt": "application/x-subrip", "vtt": "text/vtt"}


def usage(transcript: Transcript) -> dict:
    return {"type": "duration", "seconds": _seconds(transcript.duration)}


def as_json(transcript: Transcript) -> dict:
    return {"text": transcript.text, "usage": usage(transcript)}


def as_verbose_json(transcript: Transcript, task: str, granularities: tuple[str, ...]) -> dict:
    body = {
        "task": task,
        # A translation's language is its output's, always English.
        "language": "english" if task == "translate" else language_name(transcript.language),
        "duration": _seconds(transcript.duration),
        "text": transcript.text,
    }
    if "segment" in granularities:
        body["segments"] = [segment_json(s) for s in transcript.segments]
    if "word" in granularities and task == "transcribe":
        body["words"] = [{"word": w.word.strip(), "start": _seconds(w.start), "end": _seconds(w.end)}
                         for s in transcript.segments for w in (s.words or ())]
    body["usage"] = usage(transcript)
    return body


def segment_json(segment) -> dict:
    return {
        "id": segment.id - 1,  # faster-whisper counts from 1, OpenAI from 0
        "seek": segment.seek,
        "start": _seconds(segment.start),
        "end": _seconds(segment.end),
        "text": segment.text,
        "tokens": list(segment.tokens),
        "temperature": segment.temperature if segment.temperature is not None else 0.0,
        "avg_logprob": float(segment.avg_logprob),
        "compression_ratio": float(segment.compression_ratio),
        "no_speech_prob": float(segment.no_speech_prob),
    }


def _seconds(value) -> float:
    return round(float(value), 3)  # faster-whisper's times may be numpy floats


def as_text(transcript: Transcript) -> str:
    return transcript.text + "\n"


def as_srt(transcript: Transcript) -> str:
    cues = [f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
            for i, s in enumerate(transcript.segments, start=1)]
    return "\n".join(cues)


def as_vtt(transcript: Transcript) -> str:
    cues = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in transcript.segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def _clock(seconds: float, decimal: str) -> str:
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"
