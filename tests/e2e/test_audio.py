"""Speech on a real `inferd serve` (the shared tiny-model server: its audio
is the bundled Whisper tiny.en and Piper voice), driven by the official
OpenAI SDK: a round trip through both models, the transcription formats
(text and vtt are pinned byte for byte in tests/unit/test_audio_formats.py),
speech whole and streamed, bad uploads, and `inferd router` in front.

The models load once, on the server's first audio request, and serve every
test here; the clips are spoken by the server itself. Whisper reads 30-second
windows, so a one-word clip is the cheap transcription where accuracy is
not the point."""

from __future__ import annotations

import base64
import io
import json
import re

import av
import httpx
import jiwer
import numpy as np
import openai
import pytest

from router_fakes import ServerThread
from server import assert_still_serving

from inferd.config import RouterOptions
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from inferd.router.health import check_fleet

# Ten fixed sentences: the round trip's reference.
SENTENCES = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
]
SHORT = "The weather is nice today. Please open the window."
# Piper without its noise speaks a text the same way every time, so the round trip's WER is one figure.
SAME_EVERY_TIME = {"noise_scale": 0, "noise_w_scale": 0}


def words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.fixture(scope="module")
def spoken(client) -> bytes:
    """The ten sentences, spoken by the server as one WAV."""
    return client.audio.speech.create(model="tts-1", voice="alloy", input=" ".join(SENTENCES), response_format="wav",
                                      extra_body={"stream": False, **SAME_EVERY_TIME}).content


@pytest.fixture(scope="module")
def yes(client) -> bytes:
    """One word: the cheapest transcription, for every check that is not about accuracy."""
    return client.audio.speech.create(model="tts-1", voice="alloy", input="Yes.", response_format="wav",
                                      extra_body={"stream": False, **SAME_EVERY_TIME}).content


def decoded(data: bytes) -> tuple[int, int]:
    """(sample rate, samples) of an audio file, read with PyAV."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        return stream.rate, sum(frame.samples for frame in container.decode(stream))


def test_whisper_hears_what_piper_says_with_word_timestamps(client, spoken):
    result = client.audio.transcriptions.create(model="whisper-1", file=("ten.wav", spoken),
                                                response_format="verbose_json", timestamp_granularities=["word", "segment"])
    error = jiwer.wer(words(" ".join(SENTENCES)), words(result.text))
    assert error <= 0.10, (error, result.text)
    assert result.language == "english" and 15 < result.duration < 45
    assert result.usage.type == "duration" and result.usage.seconds == result.duration
    assert words(" ".join(w.word for w in result.words)) == words(result.text)
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and all(w.start <= w.end <= result.duration + 0.5 for w in result.words)
    assert [s.id for s in result.segments] == list(range(len(result.segments)))
    assert words("".join(s.text for s in result.segments)) == words(result.text)


def test_without_noise_the_same_text_is_the_same_audio(client, yes):
    again = client.audio.speech.create(model="tts-1", voice="alloy", input="Yes.", response_format="wav",
                                       extra_body={"stream": False, **SAME_EVERY_TIME}).content
    assert again == yes


def test_a_whole_wav_carries_its_exact_sizes(spoken):
    assert spoken[:4] == b"RIFF" and spoken[8:16] == b"WAVEfmt "
    riff, = np.frombuffer(spoken[4:8], "<u4")
    data, = np.frombuffer(spoken[40:44], "<u4")
    assert (riff, data) == (len(spoken) - 8, len(spoken) - 44)
    assert decoded(spoken)[0] == 24000


def test_srt(client, yes):
    srt = client.audio.transcriptions.create(model="whisper-1", file=("yes.wav", yes), response_format="srt")
    assert re.fullmatch(r"1\n00:00:00,000 --> 00:00:0\d,\d{3}\nYes\.\n", srt), srt


def test_a_streamed_transcription_is_deltas_then_done(client, yes):
    events = list(client.audio.transcriptions.create(model="whisper-1", file=("yes.wav", yes), stream=True))
    assert [e.type for e in events] == ["transcript.text.delta", "transcript.text.done"]
    assert events[0].delta == events[1].text == "Yes."


def test_speech_streams_sentence_by_sentence(tiny_server):
    with tiny_server.openai().audio.speech.with_streaming_response.create(
            model="tts-1", voice="en_US-joe-medium", input=SHORT, response_format="pcm") as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert "content-length" not in response.headers  # sent as it is made
        pcm = b"".join(response.iter_bytes())
    seconds = len(pcm) / 2 / 24000
    assert len(pcm) % 2 == 0 and 1.5 < seconds < 10


@pytest.mark.parametrize("response_format", ["mp3", "opus", "flac"])
def test_speech_in_compressed_formats(client, response_format):
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello there.",
                                       response_format=response_format)
    rate, samples = decoded(audio.content)
    assert rate in (24000, 48000) and 0.3 < samples / rate < 3


def test_speed_changes_the_length(client):
    def seconds(speed):
        pcm = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello there.",
                                         response_format="pcm", speed=speed).content
        return len(pcm) / 2 / 24000

    assert seconds(2.0) < 0.7 * seconds(1.0)


def test_speech_as_server_sent_events(http):
    r = http.post("/v1/audio/speech", json={"input": "Yes. No.", "response_format": "pcm", "stream_format": "sse"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * (len(events) - 1) + ["speech.audio.done"]
    assert len(events) >= 3  # a delta per sentence
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert 0.3 < len(pcm) / 2 / 24000 < 5


def two_hours_of_silence() -> bytes:
    out = io.BytesIO()
    rate = 1000  # few samples to write; the length is what is refused
    with av.open(out, mode="w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 2 * 3600 * rate), np.int16), format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


BAD_UPLOADS = [  # (file name, its bytes, other fields, the 400's message)
    ("notes.wav", b"these are meeting notes, not audio\n" * 20, {},
     "file is not audio this server can decode; send WAV, FLAC, MP3, OGG, WebM, M4A or another format FFmpeg reads"),
    ("empty.wav", b"", {}, "file is empty: send an audio file"),
    ("silence.flac", two_hours_of_silence, {},
     "audio is 7200 s long; this server transcribes at most 3600 s (--max-audio-duration): split it into shorter files"),
    ("yes.wav", "yes", {"response_format": "docx"}, "response_format must be one of json, text, srt, verbose_json, vtt"),
]


def test_bad_uploads_are_400s_and_the_server_goes_on(http, client, yes):
    for name, data, fields, message in BAD_UPLOADS:
        data = yes if data == "yes" else data() if callable(data) else data
        r = http.post("/v1/audio/transcriptions", files={"file": (name, data)}, data={"model": "whisper-1", **fields})
        assert (r.status_code, r.json()["error"]["message"]) == (400, message), name
        assert_still_serving(http)
    again = client.audio.transcriptions.create(model="whisper-1", file=("yes.wav", yes))  # response_format json
    assert again.text == "Yes." and again.usage.type == "duration" and 0.3 < again.usage.seconds < 3


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the SDK marks translations deprecated
def test_an_english_only_model_cannot_translate(client, yes):
    with pytest.raises(openai.BadRequestError) as error:
        client.audio.translations.create(model="whisper-1", file=("yes.wav", yes))
    assert "English-only and cannot translate" in error.value.body["message"]


@pytest.fixture(scope="module")
def router(tiny_server):
    """`inferd router`'s app in front of the shared server (in this process: a
    router process would only add its start-up)."""
    state = build_router_state(RouterOptions(worker=[tiny_server.base_url], health_interval=0))
    thread = ServerThread(build_router_app(state)).start()
    thread.call(check_fleet(state.fleet, state.client, state.worker_headers))
    yield thread
    thread.stop()


def test_the_router_forwards_uploads_untouched_and_streams_speech(router, yes):
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    # A form's "stream" field makes the router stream the answer, as "stream": true in JSON does.
    events = list(client.audio.transcriptions.create(model="whisper-1", file=("yes.wav", yes), stream=True))
    assert [(e.type, getattr(e, "delta", None) or e.text) for e in events] == [
        ("transcript.text.delta", "Yes."), ("transcript.text.done", "Yes.")]
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input="Yes. No.",
                                                            response_format="wav") as response:
        assert "content-length" not in response.headers
        rate, samples = decoded(response.read())
    assert rate == 24000 and 0.3 < samples / rate < 5
    with httpx.Client(base_url=router.url) as http:
        assert [v["id"] for v in http.get("/v1/audio/voices").json()["data"]] == ["en_US-joe-medium"]
        big = http.post("/v1/audio/transcriptions", files={"file": ("big.wav", b"\0" * (26 * 2**20))})
        assert big.status_code == 413
        assert big.json()["error"]["message"] == "upload exceeds 26214400 bytes (--max-audio-size)"
