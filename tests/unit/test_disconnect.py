"""A client that disconnects while a non-streaming answer is being generated
frees its slot: on every dialect's non-streaming generation route, the engine
request is aborted within a step and the handler ends quietly (a 499 that
goes nowhere, never a 500 or a logged traceback).

Each test drives the ASGI app directly with a hand-written `receive` that
delivers the body, then, once the request is generating, `http.disconnect`.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from inferd.models.loader import load_model
from polling import async_wait_for
from served import served, small_config

CTX = 512  # the tiny model's whole context: long generations
LONG = 400  # tokens: seconds of generation on the tiny model, far past the disconnect

CHAT = [{"role": "user", "content": "hi"}]

# (path, body): one long non-streaming generation per dialect route.
ROUTES = {
    "openai-chat": ("/v1/chat/completions", {"model": "tiny", "messages": CHAT, "max_tokens": LONG,
                                             "temperature": 0, "ignore_eos": True}),
    "openai-completions": ("/v1/completions", {"model": "tiny", "prompt": "Once upon a time", "max_tokens": LONG,
                                               "temperature": 0, "ignore_eos": True}),
    "anthropic-messages": ("/v1/messages", {"model": "tiny", "messages": CHAT, "max_tokens": LONG,
                                            "temperature": 0}),
    "responses": ("/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": LONG, "temperature": 0}),
    "ollama-chat": ("/api/chat", {"model": "tiny", "messages": CHAT, "stream": False,
                                  "options": {"num_predict": -1, "temperature": 0}}),
    "ollama-generate": ("/api/generate", {"model": "tiny", "prompt": "Once upon a time", "stream": False,
                                          "options": {"num_predict": -1, "temperature": 0}}),
    "llamacpp-completion": ("/completion", {"prompt": "Once upon a time", "n_predict": -1, "temperature": 0,
                                            "ignore_eos": True}),
}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture(scope="module")
def server(loaded):
    with served(loaded, small_config(ctx_size=CTX, parallel=2)) as server:
        yield server


def http_scope(path: str, body: bytes) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("inferd", 80),
        "headers": [(b"host", b"inferd"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    }


async def disconnect_while_generating(app, engine, path: str, body: dict) -> tuple[list[dict], bool]:
    """POST `body` to `path`, disconnect once the engine has it; returns the
    messages the app sent and whether the engine and the handler were done
    soon after the disconnect."""
    raw = json.dumps(body).encode()
    sent: list[dict] = []
    body_given = asyncio.Event()
    submitted = asyncio.Event()

    async def receive() -> dict:
        if not body_given.is_set():
            body_given.set()
            return {"type": "http.request", "body": raw, "more_body": False}
        # The handler asks again only once its request is in the engine and it
        # watches the connection: the client leaves then.
        submitted.set()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    handler = asyncio.create_task(app(http_scope(path, raw), receive, send))
    try:
        # Without the watch the handler never asks again, and the request runs to its end.
        await async_wait_for(lambda: submitted.is_set() or handler.done(), timeout=30)
        # Well within the seconds the whole generation would take.
        freed = await async_wait_for(
            lambda: handler.done() and engine.stats().running == 0 and engine.stats().waiting == 0, timeout=3.0)
        return sent, bool(freed)
    finally:
        if not handler.done():
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)
        await async_wait_for(lambda: engine.stats().running == 0 and engine.stats().waiting == 0, timeout=10)


@pytest.mark.parametrize("route", list(ROUTES))
def test_disconnect_frees_the_slot(server, route, caplog):
    path, body = ROUTES[route]
    engine = server.state.engine
    with caplog.at_level(logging.WARNING):
        sent, freed = asyncio.run(disconnect_while_generating(server.app, engine, path, body))
    assert freed, f"{path}: the engine still generates for a client that went away"
    starts = [m for m in sent if m["type"] == "http.response.start"]
    # The answer goes nowhere; 499 (client closed request) is what the metrics count.
    assert [m["status"] for m in starts] == [499], starts
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_an_answer_that_finishes_first_is_sent_whole(server):
    """The disconnect watch never cuts a client that stays."""
    engine = server.state.engine
    raw = json.dumps({"prompt": "Once", "n_predict": 4, "temperature": 0, "ignore_eos": True}).encode()
    sent: list[dict] = []

    async def scenario():
        given = False
        stay = asyncio.Event()  # never set: the client stays until the answer is sent

        async def receive():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await stay.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await asyncio.wait_for(server.app(http_scope("/completion", raw), receive, send), timeout=30)

    asyncio.run(scenario())
    assert sent[0]["status"] == 200
    body = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
    assert body["tokens_predicted"] == 4 and body["stop"] is True
    assert engine.stats().running == 0
