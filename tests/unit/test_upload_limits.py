"""Body limits per path: JSON everywhere up to --max-body-size; multipart
uploads only on the paths of the upload table, up to their own limit; and
the router reads an upload's text fields without touching its file."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from inferd.api.registry import upload_limits
from inferd.config import RouterOptions, ServeConfig
from inferd.http.body_limits import BodyLimits, UploadLimit
from inferd.http.errors import error_response
from inferd.http.form_fields import form_fields, is_form

UPLOAD = "/v1/audio/transcriptions"


async def echo(request):
    body = await request.body()
    return JSONResponse({"bytes": len(body), "type": request.headers.get("content-type", "").split(";")[0]})


def limited_app():
    app = Starlette(routes=[Route(UPLOAD, echo, methods=["POST"]), Route("/v1/chat/completions", echo, methods=["POST"])])
    return BodyLimits(app, max_body_size=1000, respond=lambda path, err: error_response(err),
                      uploads={UPLOAD: UploadLimit(100_000, "--max-audio-size")})


def post(path: str, **kwargs) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=limited_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, **kwargs)

    return asyncio.run(go())


def test_an_upload_path_takes_multipart_past_the_json_limit():
    r = post(UPLOAD, data={"model": "whisper-1"}, files={"file": ("a.wav", b"x" * 50_000, "audio/wav")})
    assert r.status_code == 200 and r.json()["type"] == "multipart/form-data"


def test_a_file_of_exactly_the_limit_fits_with_its_form():
    r = post(UPLOAD, data={"model": "whisper-1", "response_format": "json"},
             files={"file": ("a.wav", b"x" * 100_000, "audio/wav")})
    assert r.status_code == 200


def test_an_upload_past_its_limit_is_a_413_naming_the_option():
    r = post(UPLOAD, files={"file": ("a.wav", b"x" * 200_000, "audio/wav")})
    assert r.status_code == 413
    assert r.json()["error"]["message"] == "upload exceeds 100000 bytes (--max-audio-size)"


def test_json_to_an_upload_path_is_a_415_that_says_multipart():
    r = post(UPLOAD, json={"model": "whisper-1"})
    assert r.status_code == 415
    assert "multipart/form-data" in r.json()["error"]["message"]


def test_multipart_anywhere_else_is_still_a_415_that_says_json():
    r = post("/v1/chat/completions", files={"file": ("a.wav", b"x", "audio/wav")})
    assert r.status_code == 415
    assert r.json()["error"]["message"] == "send the body as JSON with Content-Type: application/json"


def test_a_chunked_upload_is_counted_against_its_own_limit():
    async def chunks(n):
        for _ in range(n):
            yield b"x" * 10_000

    headers = {"content-type": "multipart/form-data; boundary=abc"}
    assert post(UPLOAD, content=chunks(5), headers=headers).status_code == 200
    r = post(UPLOAD, content=chunks(20), headers=headers)
    assert r.status_code == 413 and "--max-audio-size" in r.json()["error"]["message"]


@pytest.mark.parametrize("config", [ServeConfig(max_audio_size=123), RouterOptions(max_audio_size=123)],
                         ids=["serve", "router"])
def test_the_table_comes_from_the_registry(config):
    table = upload_limits(config)
    audio = ("/v1/audio/transcriptions", "/audio/transcriptions", "/v1/audio/translations", "/audio/translations")
    assert {p: table.get(p) for p in audio} == {p: UploadLimit(123, "--max-audio-size") for p in audio}
    assert not {"/v1/audio/speech", "/v1/chat/completions"} & set(table)  # JSON routes stay JSON


def test_the_router_reads_text_fields_and_skips_files():
    request = httpx.Request("POST", "http://x/", data={"model": "whisper-1", "stream": "true"},
                            files={"file": ("a.wav", b"RIFF" + b"\0" * 5000, "audio/wav")})
    body, content_type = request.read(), request.headers["content-type"]
    assert is_form(content_type) and not is_form("application/json")
    assert form_fields(body, content_type) == {"model": "whisper-1", "stream": "true"}


def test_a_broken_form_gives_no_fields_and_no_error():
    assert form_fields(b"not a form", "multipart/form-data; boundary=abc") == {}
    assert form_fields(b"", "multipart/form-data") == {}
