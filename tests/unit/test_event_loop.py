"""Heavy text work never holds the event loop: while a large text is being
tokenized, /health still answers; and a prompt that cannot fit the context is
refused before any tokenization is paid for."""

from __future__ import annotations

import asyncio

import pytest

from inferd.models.loader import load_model
from served import served, small_config

BIG = "the quick brown fox jumps over the lazy dog. " * 50_000  # 2.25 MB


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    # The body limit admits the big texts; the context (128 tokens) cannot hold them.
    with served(load_model(str(tiny_model_dir), dtype="float32"), small_config(max_body_size=16 * 2**20)) as server:
        yield server


@pytest.mark.parametrize(("path", "body"), [
    ("/tokenize", {"content": BIG}),
    ("/v1/messages/count_tokens", {"model": "tiny", "messages": [{"role": "user", "content": BIG}]}),
    ("/v1/responses/input_tokens", {"model": "tiny", "input": BIG}),
], ids=["tokenize", "anthropic-count", "responses-count"])
def test_health_answers_while_a_large_text_is_tokenized(server, path, body):
    async def go():
        async with server.client() as c:
            heavy = asyncio.create_task(c.post(path, json=body))
            await asyncio.sleep(0.05)  # let the heavy request reach its handler
            health = await c.get("/health")
            answered_first = not heavy.done()
            return health.status_code, answered_first, (await heavy).status_code

    assert asyncio.run(go()) == (200, True, 200)


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": BIG}], "max_tokens": 1}),
    ("/v1/completions", {"prompt": BIG, "max_tokens": 1}),
    ("/v1/messages", {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": BIG}]}),
    ("/api/generate", {"model": "tiny", "prompt": BIG, "stream": False}),
    ("/completion", {"prompt": BIG, "n_predict": 1}),
], ids=["chat", "completions", "anthropic", "ollama", "llamacpp"])
def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(server, monkeypatch, path, body):
    tokenizer = server.state.engine.tokenizer
    encoded = []
    original = tokenizer.encode
    monkeypatch.setattr(tokenizer, "encode", lambda text, *a, **k: encoded.append(len(text)) or original(text, *a, **k))

    async def go():
        async with server.client() as c:
            return await c.post(path, json=body)

    r = asyncio.run(go())
    assert r.status_code == 400
    assert "more than the model's context of 128 tokens" in r.text
    assert [n for n in encoded if n >= len(BIG)] == []
