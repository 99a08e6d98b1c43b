"""The HTTP server as a client meets it: error statuses in the OpenAI envelope
(and the server still serving after each), health, ports and Unix sockets,
client disconnects, SIGTERM draining, concurrent async streams."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from polling import wait_for
from server import ALIAS, TINY_CTX, TINY_PARALLEL, ServerProcess, assert_still_serving

HELLO = [{"role": "user", "content": "Hello"}]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
JSON_HEADERS = {"content-type": "application/json"}


# llama-server's context error: its type, and the numbers clients trim a conversation by.
CONTEXT_ERROR = "exceed_context_size_error"


def assert_error(r: httpx.Response, status: int, type_: str, param: str | None = None) -> str:
    """An OpenAI error envelope with exactly its four fields (and the context error's
    two numbers); returns the message."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    numbers = {"n_prompt_tokens", "n_ctx"} if type_ == CONTEXT_ERROR else set()
    assert set(body["error"]) == {"message", "type", "param", "code"} | numbers
    assert body["error"]["type"] == type_
    assert body["error"]["param"] == param
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]["message"]


def assert_no_traceback(server: ServerProcess, mark: int) -> None:
    """A refused or abandoned request is routine: the server logs no exception for it."""
    # An absence cannot be waited for: give anything logged just after the response a moment to land.
    time.sleep(0.1)
    logged = server.log_since(mark)
    assert "Traceback" not in logged, f"the server logged an exception:\n{logged[-3000:]}"


# -- refused requests ------------------------------------------------------------------

CHAT_OK = {"messages": HELLO, "max_tokens": 2, "temperature": 0}

REFUSALS = [
    # id, path, request keyword arguments, status, type, param, words in the message
    ("malformed-json", CHAT, dict(content=b'{"messages": [', headers=JSON_HEADERS),
     400, "invalid_request_error", None, "request body is not valid JSON"),
    ("json-not-an-object", CHAT, dict(json=[1, 2, 3]), 400, "invalid_request_error", "body", None),
    ("messages-wrong-type", CHAT, dict(json={"messages": "Hello"}), 400, "invalid_request_error", "messages", None),
    ("messages-missing", CHAT, dict(json={"max_tokens": 3}),
     400, "invalid_request_error", "messages", "Field required"),
    ("messages-empty", CHAT, dict(json={"messages": []}), 400, "invalid_request_error", "messages", None),
    ("max-tokens-wrong-type", CHAT, dict(json={**CHAT_OK, "max_tokens": "many"}),
     400, "invalid_request_error", "max_tokens", None),
    ("max-tokens-zero", CHAT, dict(json={**CHAT_OK, "max_tokens": 0}),
     400, "invalid_request_error", "max_tokens", None),
    ("temperature-wrong-type", COMPLETIONS, dict(json={"prompt": "Hi", "temperature": "hot"}),
     400, "invalid_request_error", "temperature", None),
    ("temperature-out-of-range", CHAT, dict(json={**CHAT_OK, "temperature": 5}),
     400, "invalid_request_error", "temperature", "temperature must be in [0, 2]"),
    ("prompt-wrong-type", COMPLETIONS, dict(json={"prompt": {"text": "Hi"}}),
     400, "invalid_request_error", "prompt", None),
    ("n-9", CHAT, dict(json={**CHAT_OK, "n": 9}), 400, "invalid_request_error", "n", "less than or equal to 8"),
    ("n-9-completions", COMPLETIONS, dict(json={"prompt": "Hi", "n": 9}),
     400, "invalid_request_error", "n", "less than or equal to 8"),
    ("top-logprobs-without-logprobs", CHAT, dict(json={**CHAT_OK, "top_logprobs": 2}),
     400, "invalid_request_error", "body", "top_logprobs requires logprobs"),
    # A JSON body is taken whatever its declared type (tests/e2e/test_llama_server_compat.py); other bodies are not.
    ("no-content-type", CHAT, dict(content=b"model=x&messages=y"),
     415, "invalid_request_error", None, "Content-Type: application/json"),
    ("text-plain", CHAT, dict(content=b"hello", headers={"content-type": "text/plain"}),
     415, "invalid_request_error", None, "Content-Type: application/json"),
    ("unknown-model", CHAT, dict(json={**CHAT_OK, "model": "nope"}), 404, "not_found_error", "model", "'nope'"),
]


@pytest.mark.parametrize(
    ("path", "kwargs", "status", "type_", "param", "words"),
    [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS],
)
def test_a_bad_request_is_refused_in_the_openai_envelope_and_the_server_carries_on(
    http, tiny_server, path, kwargs, status, type_, param, words,
):
    mark = tiny_server.log_mark()
    message = assert_error(http.post(path, **kwargs), status, type_, param)
    if words:
        assert words in message
    assert_still_serving(http)
    assert_no_traceback(tiny_server, mark)


def test_an_unknown_route_is_404_in_the_envelope(http):
    assert_error(http.get("/v1/nothing-here"), 404, "not_found_error")
    assert_still_serving(http)


def test_the_wrong_method_is_405_in_the_envelope(http):
    assert_error(http.get(CHAT), 405, "invalid_request_error")
    assert_still_serving(http)


def _prompt_tokens(http, path: str, body: dict) -> int:
    r = http.post(path, json={**body, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("stream", [False, True])
def test_prompt_plus_max_tokens_beyond_the_context_is_400_naming_the_numbers(http, tiny_server, path, stream):
    body = {"messages": HELLO} if path == CHAT else {"prompt": "Hello"}
    prompt = _prompt_tokens(http, path, body)
    mark = tiny_server.log_mark()
    r = http.post(path, json={**body, "max_tokens": TINY_CTX, "temperature": 0, "stream": stream})
    # Refused before the first token: a plain JSON error even when a stream was asked for.
    message = assert_error(r, 400, CONTEXT_ERROR)
    assert (r.json()["error"]["n_prompt_tokens"], r.json()["error"]["n_ctx"]) == (prompt, TINY_CTX)
    assert f"the context size is {TINY_CTX} tokens" in message
    assert f"but {prompt + TINY_CTX} were requested ({prompt} in the prompt, {TINY_CTX} to generate)" in message
    assert f"lower max_tokens to at most {TINY_CTX - prompt}" in message
    assert_still_serving(http)
    assert_no_traceback(tiny_server, mark)


def test_a_prompt_longer_than_the_context_is_400(http, tiny_server):
    mark = tiny_server.log_mark()
    r = http.post(COMPLETIONS, json={"prompt": "a" * 300, "max_tokens": 1})
    message = assert_error(r, 400, CONTEXT_ERROR)
    assert (r.json()["error"]["n_prompt_tokens"], r.json()["error"]["n_ctx"]) == (301, TINY_CTX)
    assert f"the prompt has 301 tokens but the context size is {TINY_CTX}" in message
    assert_still_serving(http)
    assert_no_traceback(tiny_server, mark)


def test_the_largest_request_that_fits_the_context_runs(http):
    prompt = _prompt_tokens(http, COMPLETIONS, {"prompt": "Hello"})
    r = http.post(COMPLETIONS, json={"prompt": "Hello", "max_tokens": TINY_CTX - prompt, "temperature": 0,
                                     "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == TINY_CTX - prompt


@pytest.mark.parametrize(
    ("path", "body", "status", "type_", "param"),
    [
        (CHAT, {**CHAT_OK, "model": "nope"}, 404, "not_found_error", "model"),
        (CHAT, {**CHAT_OK, "n": 9}, 400, "invalid_request_error", "n"),
        (CHAT, {**CHAT_OK, "temperature": -1}, 400, "invalid_request_error", "temperature"),
        (COMPLETIONS, {"prompt": "a" * 300}, 400, CONTEXT_ERROR, None),
    ],
    ids=["unknown-model", "n-9", "bad-temperature", "prompt-too-long"],
)
def test_a_stream_refused_before_its_first_token_is_a_plain_json_error(
    http, tiny_server, path, body, status, type_, param,
):
    mark = tiny_server.log_mark()
    with http.stream("POST", path, json={**body, "stream": True}) as r:
        r.read()
    assert not r.headers["content-type"].startswith("text/event-stream")
    assert_error(r, status, type_, param)
    assert_still_serving(http)
    assert_no_traceback(tiny_server, mark)


# -- --max-body-size ---------------------------------------------------------------------

BODY_LIMIT = 2048


@pytest.fixture(scope="module")
def small_body_server(tiny_model_dir, server_logs):
    server = ServerProcess(tiny_model_dir, parallel=1, ctx_size=128, max_body_size=BODY_LIMIT,
                           log_path=server_logs / "small-body.log")
    server.start()
    with server.http() as client:
        yield client
    server.stop()


def _padded_chat(size: int) -> bytes:
    """A valid chat request body of exactly `size` bytes."""
    base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0, "user": ""}
    pad = size - len(json.dumps(base).encode())
    assert pad >= 0
    return json.dumps({**base, "user": "x" * pad}).encode()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_max_body_size_is_413(small_body_server, chunked):
    body = _padded_chat(BODY_LIMIT + 1)
    content = iter([body[:1000], body[1000:]]) if chunked else body
    r = small_body_server.post(CHAT, content=content, headers=JSON_HEADERS)
    message = assert_error(r, 413, "invalid_request_error")
    assert message == f"request body exceeds {BODY_LIMIT} bytes (--max-body-size)"
    assert_still_serving(small_body_server)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_of_exactly_max_body_size_is_served(small_body_server, chunked):
    body = _padded_chat(BODY_LIMIT)
    content = iter([body[:1000], body[1000:]]) if chunked else body
    r = small_body_server.post(CHAT, content=content, headers=JSON_HEADERS)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1


# -- health, ports, sockets --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health", "/v1/health", "/healthz", "/"])
def test_health_reports_the_model_and_the_engine(http, tiny_server, tiny_model_dir, path):
    r = http.get(path)
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "model": ALIAS, "running": 0, "waiting": 0, "max_parallel": TINY_PARALLEL,
                        "slots_idle": TINY_PARALLEL, "slots_processing": 0, "ctx_size": TINY_CTX}
    assert tiny_server.model_name == ALIAS  # --alias renames the served model


def test_port_zero_serves_on_the_port_the_log_names(tiny_server, http):
    assert tiny_server.port > 0
    assert f"listening on http://127.0.0.1:{tiny_server.port}" in tiny_server.log()
    models = http.get("/v1/models")
    assert models.status_code == 200
    served = [card for card in models.json()["data"] if card["loaded"]]  # stored models follow, not loaded
    assert served == [
        {"id": name, "object": "model", "created": served[0]["created"], "owned_by": "inferd",
         "max_model_len": TINY_CTX, "loaded": True, "capabilities": served[0]["capabilities"],
         "aliases": [Path(tiny_server.model).name]}  # its own name answers too
        for name in (ALIAS,)  # --alias renames the served model
    ]
    assert served[0]["capabilities"][:2] == ["completion", "chat"]


def test_a_unix_socket_serves_http_and_the_openai_sdk(tiny_model_dir, server_logs):
    folder = tempfile.mkdtemp(prefix="inferd-", dir="/tmp")  # short: socket paths are limited to ~100 bytes
    sock = str(Path(folder) / "inferd.sock")
    try:
        with ServerProcess(tiny_model_dir, host=sock, parallel=1, ctx_size=128,
                           log_path=server_logs / "unix.log") as server:
            assert f"listening on {sock}" in server.log()
            with server.http() as client:
                health = client.get("/health")
                assert health.status_code == 200
                assert health.json()["status"] == "ok"
            with server.openai() as sdk:
                r = sdk.chat.completions.create(model=server.model_name, messages=HELLO, max_tokens=3, temperature=0,
                                                extra_body={"ignore_eos": True})
            assert r.usage.completion_tokens == 3
            assert "http://" not in server.log()  # no TCP listener besides
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- disconnects, SIGTERM, concurrency ------------------------------------------------


def test_closing_a_stream_aborts_its_generation(bundled_server):
    mark = bundled_server.log_mark()
    with bundled_server.http() as client:
        body = {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0, "ignore_eos": True, "stream": True}
        with client.stream("POST", COMPLETIONS, json=body) as r:
            assert r.status_code == 200
            events = r.iter_lines()
            data = []
            while len(data) < 2:
                line = next(events)
                if line.startswith("data: "):
                    data.append(json.loads(line.removeprefix("data: ")))
            assert all(d["choices"][0].get("finish_reason") is None for d in data)
            assert client.get("/health").json()["running"] == 1
        # Leaving the block closed the connection mid-stream. 2000 tokens take minutes
        # on a CPU; an aborted request leaves the engine within a few seconds.
        health = wait_for(lambda: client.get("/health").json()["running"] == 0, timeout=5.0, interval=0.05)
        assert health, f"still running after the client left: {client.get('/health').json()}"
        assert client.get("/health").json()["waiting"] == 0
    assert_no_traceback(bundled_server, mark)


def test_sigterm_lets_in_flight_requests_finish_then_exits_0(tiny_model_dir, server_logs):
    server = ServerProcess(tiny_model_dir, parallel=2, ctx_size=512, shutdown_timeout=60,
                           log_path=server_logs / "sigterm.log")
    server.start()
    results: dict[str, object] = {}
    body = {"prompt": "Hello", "max_tokens": 500, "temperature": 0, "ignore_eos": True}

    def whole():
        try:
            with server.http() as client:
                results["whole"] = client.post(COMPLETIONS, json=body)
        except Exception as e:  # reported by the assertions below
            results["whole"] = e

    def streamed():
        try:
            with server.http() as client, client.stream("POST", COMPLETIONS, json={**body, "stream": True}) as r:
                results["stream"] = [line for line in r.iter_lines() if line]
        except Exception as e:
            results["stream"] = e

    threads = [threading.Thread(target=whole), threading.Thread(target=streamed)]
    try:
        for t in threads:
            t.start()
        assert wait_for(lambda: server.health().json()["running"] == 2, timeout=10.0, interval=0.005), \
            "the two requests never ran together"
        server.terminate()
        for t in threads:
            t.join(60)
        code = server.wait(30)
    finally:
        server.kill()

    r = results["whole"]
    assert isinstance(r, httpx.Response), f"the in-flight request failed: {r!r}"
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 500
    assert r.json()["choices"][0]["finish_reason"] == "length"

    lines = results["stream"]
    assert isinstance(lines, list), f"the in-flight stream failed: {lines!r}"
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert [c["choices"][0].get("finish_reason") for c in chunks if c["choices"][0].get("finish_reason")] == ["length"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == r.json()["choices"][0]["text"]

    assert code == 0, f"inferd serve exited with {code} after SIGTERM:\n{server.log_tail()}"


def test_four_concurrent_async_streams_all_complete(tiny_server, client):
    prompts = ["Hello", "abc", "Once upon a time", "xyz"]
    expected = [
        client.completions.create(model=ALIAS, prompt=p, max_tokens=24, temperature=0,
                                  extra_body={"ignore_eos": True}).choices[0].text
        for p in prompts
    ]

    async def one(sdk, prompt: str):
        stream = await sdk.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0, stream=True,
                                              stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        text, finishes, usage = "", [], None
        async for chunk in stream:
            for c in chunk.choices:
                text += c.text
                if c.finish_reason:
                    finishes.append(c.finish_reason)
            usage = chunk.usage or usage
        return text, finishes, usage

    async def main():
        async with tiny_server.async_openai() as sdk:
            return await asyncio.gather(*(one(sdk, p) for p in prompts))

    results = asyncio.run(main())
    for (text, finishes, usage), want in zip(results, expected):
        assert finishes == ["length"]
        assert usage.completion_tokens == 24
        assert text == want
