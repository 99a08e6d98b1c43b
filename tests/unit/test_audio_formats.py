"""A transcript in each response_format: exact bytes for text, srt and vtt,
OpenAI's fields for json and verbose_json."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from inferd.audio import formats
from inferd.audio.transcribe import Transcript


def segment(id_, start, end, text, words=()):
    return SimpleNamespace(id=id_, seek=0, start=np.float64(start), end=np.float64(end), text=text, tokens=[1, 2],
                           temperature=0.0, avg_logprob=-0.25, compression_ratio=1.1, no_speech_prob=0.01,
                           words=[SimpleNamespace(word=w, start=s, end=e) for w, s, e in words])


@pytest.fixture
def transcript():
    return Transcript(language="en", duration=3725.5, segments=[
        segment(1, 0.0, 1.5, " Hello there.", [(" Hello", 0.0, 0.6), (" there.", 0.6, 1.5)]),
        segment(2, 3661.25, 3662.0, " Bye.", [(" Bye.", 3661.25, 3662.0)]),
    ])


def test_json_is_the_text_and_the_audio_length(transcript):
    assert formats.as_json(transcript) == {"text": "Hello there. Bye.", "usage": {"type": "duration", "seconds": 3725.5}}


def test_text_is_the_text_and_a_newline(transcript):
    assert formats.as_text(transcript) == "Hello there. Bye.\n"


def test_srt_numbers_cues_from_one_with_comma_milliseconds(transcript):
    assert formats.as_srt(transcript) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
        "2\n01:01:01,250 --> 01:01:02,000\nBye.\n"
    )


def test_vtt_has_its_header_and_dot_milliseconds(transcript):
    assert formats.as_vtt(transcript) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n01:01:01.250 --> 01:01:02.000\nBye.\n"
    )


def test_verbose_json_with_words_and_segments(transcript):
    body = formats.as_verbose_json(transcript, "transcribe", ("word", "segment"))
    assert body["task"] == "transcribe" and body["language"] == "english" and body["duration"] == 3725.5
    assert body["text"] == "Hello there. Bye."
    assert body["words"] == [{"word": "Hello", "start": 0.0, "end": 0.6}, {"word": "there.", "start": 0.6, "end": 1.5},
                             {"word": "Bye.", "start": 3661.25, "end": 3662.0}]
    assert [s["id"] for s in body["segments"]] == [0, 1]  # OpenAI counts segments from 0
    assert body["segments"][1] == {"id": 1, "seek": 0, "start": 3661.25, "end": 3662.0, "text": " Bye.",
                                   "tokens": [1, 2], "temperature": 0.0, "avg_logprob": -0.25,
                                   "compression_ratio": 1.1, "no_speech_prob": 0.01}
    assert all(type(s["start"]) is float for s in body["segments"])  # numpy floats never reach the wire
    assert body["usage"] == {"type": "duration", "seconds": 3725.5}


def test_verbose_json_leaves_out_what_was_not_asked_for(transcript):
    assert "words" not in formats.as_verbose_json(transcript, "transcribe", ("segment",))
    assert "segments" not in formats.as_verbose_json(transcript, "transcribe", ("word",))


def test_a_translation_is_in_english_whatever_was_spoken():
    spoken = Transcript(language="de", duration=1.0, segments=[segment(1, 0, 1, " Good day.")])
    assert formats.as_verbose_json(spoken, "translate", ("segment",))["language"] == "english"
    assert formats.as_verbose_json(spoken, "transcribe", ("segment",))["language"] == "german"
