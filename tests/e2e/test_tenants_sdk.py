"""API keys against a real `inferd serve` with the official SDKs: each SDK
raises its own error for 401, 403 and 429; cancel and interrupt from a second
connection end OpenAI, Anthropic and Ollama streams with the dialect's own
terminal event; leases come back after 100 clients leave mid-stream; trace
ids reach the log; `inferd keys` works online, and offline on the running
server's data dir without a restart. (A restart on the same data dir is
tested in process: tests/unit/test_tenants_http.py.)"""

from __future__ import annotations

import asyncio
import threading
import uuid

import anthropic
import httpx
import ollama
import openai
import pytest

from conftest import TENANT_ADMIN
from inferd.cli import main
from polling import wait_for

ADMIN = {"Authorization": f"Bearer {TENANT_ADMIN}"}
MESSAGES = [{"role": "user", "content": "hi"}]
LONG = 400  # tokens: seconds of generation on the tiny model


def new_key(server, **fields) -> tuple[str, str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    with server.http() as http:
        r = http.post("/api/keys", json={"name": name, **fields}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return name, r.json()["secret"]


def openai_client(server, secret):
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=secret, max_retries=0, timeout=60.0)


def anthropic_client(server, secret):
    return anthropic.Anthropic(base_url=server.base_url, api_key=secret, max_retries=0, timeout=60.0)


def ollama_client(server, secret):
    return ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {secret}"})


def test_each_sdk_raises_its_own_error(tenant_server):
    with pytest.raises(openai.AuthenticationError):
        openai_client(tenant_server, "inferd-not-a-key").models.list()
    _, narrow = new_key(tenant_server, scopes=["another-model"])
    with pytest.raises(openai.PermissionDeniedError) as denied:
        openai_client(tenant_server, narrow).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert "may not use model" in denied.value.message

    _, one = new_key(tenant_server, limits={"rpm": 1, "tpm": 10_000})
    client = openai_client(tenant_server, one)
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert raw.headers["x-ratelimit-limit-requests"] == "1" and raw.headers["x-ratelimit-remaining-requests"] == "0"
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 10_000 and raw.headers["x-request-id"]
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert limited.value.code == "rate_limit_exceeded" and int(limited.value.response.headers["retry-after"]) >= 1
    with pytest.raises(anthropic.RateLimitError) as limited:
        anthropic_client(tenant_server, one).messages.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    with pytest.raises(ollama.ResponseError) as limited:
        ollama_client(tenant_server, one).chat(model="tiny", messages=MESSAGES, options={"num_predict": 2})
    assert limited.value.status_code == 429 and "requests per minute" in limited.value.error


def _stream_then(server, secret, dialect: str, how: str) -> tuple[list, Exception | None]:
    """Start a long stream in `dialect`; once it has produced output, `how` it from a second connection."""
    trace = f"{dialect}-{how}-{uuid.uuid4().hex[:6]}"
    got, failure = [], None
    headers = {"x-request-id": trace}

    def consume():
        nonlocal failure
        try:
            if dialect == "openai":
                stream = openai_client(server, secret).chat.completions.create(
                    model="tiny", messages=MESSAGES, max_tokens=LONG, stream=True, extra_headers=headers,
                    extra_body={"ignore_eos": True})
            elif dialect == "anthropic":
                stream = anthropic_client(server, secret).messages.create(
                    model="tiny", messages=MESSAGES, max_tokens=LONG, stream=True, extra_headers=headers)
            else:
                stream = ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {secret}", **headers}) \
                    .chat(model="tiny", messages=MESSAGES, stream=True, options={"num_predict": LONG})
            for event in stream:
                got.append(event)
        except Exception as error:  # what the SDK raised is what the test checks
            failure = error

    reader = threading.Thread(target=consume)
    reader.start()
    with server.http() as http:
        def producing():
            r = http.get(f"/v1/requests/{trace}", headers=ADMIN)
            return r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 3

        assert wait_for(producing, timeout=30), f"{trace} never produced output"
        r = http.post(f"/v1/requests/{trace}/{how}", headers=ADMIN)
        assert r.status_code == 200, r.text
    reader.join(30)
    assert not reader.is_alive()
    with server.http() as http:
        card = http.get(f"/v1/requests/{trace}", headers=ADMIN).json()
    assert card["state"] == {"cancel": "cancelled", "interrupt": "interrupted"}[how]
    assert 3 <= card["usage"]["completion_tokens"] < LONG
    return got, failure


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "ollama"])
def test_cancel_ends_the_stream_with_the_dialects_error(tenant_server, dialect):
    _, secret = new_key(tenant_server)
    got, failure = _stream_then(tenant_server, secret, dialect, "cancel")
    assert got, "the stream had started"
    expected = {"openai": openai.APIError, "anthropic": anthropic.APIError, "ollama": ollama.ResponseError}[dialect]
    assert isinstance(failure, expected), repr(failure)
    assert "cancelled" in str(failure)


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "ollama"])
def test_interrupt_ends_the_stream_normally_with_the_output_so_far(tenant_server, dialect):
    _, secret = new_key(tenant_server)
    got, failure = _stream_then(tenant_server, secret, dialect, "interrupt")
    assert failure is None, repr(failure)
    if dialect == "openai":
        assert got[-1].choices[0].finish_reason == "stop"
        assert "".join(c.choices[0].delta.content or "" for c in got if c.choices)
    elif dialect == "anthropic":
        assert [e.type for e in got][-2:] == ["message_delta", "message_stop"]
        assert got[-2].delta.stop_reason == "end_turn"
    else:
        assert got[-1].done and got[-1].done_reason == "stop"


def test_leases_come_back_after_a_hundred_clients_leave_mid_stream(tenant_server):
    name, secret = new_key(tenant_server, limits={"max_concurrent": 100})
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": LONG, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {secret}"}

    async def leave_mid_stream(client):
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status_code == 200
            async for _ in r.aiter_bytes():
                return  # the first bytes, then gone

    async def hundred():
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=tenant_server.base_url, timeout=60.0, limits=limits) as client:
            await asyncio.gather(*(leave_mid_stream(client) for _ in range(100)))

    asyncio.run(hundred())
    with tenant_server.http() as http:
        r = http.patch(f"/api/keys/{name}", json={"limits": {"max_concurrent": 1}}, headers=ADMIN)
        assert r.status_code == 200

        def usable():
            one = http.post("/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 1},
                            headers=headers)
            return one.status_code == 200

        assert wait_for(usable, timeout=30), "the key's leases were never given back"
        assert wait_for(lambda: not http.get("/v1/requests?state=running", headers=ADMIN).json()["data"], timeout=30)


def test_trace_ids_reach_the_log_and_keys_are_managed_from_the_command_line(tenant_server, capsys):
    mark = tenant_server.log_mark()
    _, secret = new_key(tenant_server)
    with tenant_server.http() as http:
        r = http.post("/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 1},
                      headers={"Authorization": f"Bearer {secret}", "x-request-id": "trace-in-the-log"})
    assert r.headers["x-request-id"] == "trace-in-the-log"
    assert wait_for(lambda: "trace=trace-in-the-log" in tenant_server.log_since(mark), timeout=10)

    def keys(*args) -> tuple[int, str, str]:
        code = main(["keys", *args, "--url", tenant_server.base_url, "--api-key", TENANT_ADMIN])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = keys("add", "from-cli", "--rpm", "3", "--scope", "tiny")
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("inferd-")
    with tenant_server.http() as http:
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    code, out, _ = keys("list")
    assert "from-cli" in out and "rpm=3" in out and secret not in out
    assert keys("rm", "from-cli")[0] == 0
    code, _, err = keys("rm", "from-cli")
    assert code == 1 and "no key named 'from-cli'" in err


    # offline, on the running server's data dir: seen within a second, no restart
    data_dir = str(tenant_server.log_path.parent / f"data-{tenant_server.log_path.stem}")
    assert main(["keys", "add", "offline-key", "--data-dir", data_dir]) == 0
    offline = capsys.readouterr().out.strip()

    def status() -> int:
        with tenant_server.http() as http:
            return http.get("/v1/models", headers={"Authorization": f"Bearer {offline}"}).status_code

    assert wait_for(lambda: status() == 200, timeout=2)
    assert main(["keys", "rm", "offline-key", "--data-dir", data_dir]) == 0
    assert wait_for(lambda: status() == 401, timeout=2)
