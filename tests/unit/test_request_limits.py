"""A request that can never be served is a 400 that names the limit, not a
503 whose Retry-After promises what no retry can give."""

from __future__ import annotations

import asyncio

import pytest

from inferd.models.loader import load_model
from served import served, small_config


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with served(load_model(str(tiny_model_dir), dtype="float32"), small_config(max_queue=4)) as server:
        yield server


def post(server, path: str, body: dict):
    async def go():
        async with server.client() as c:
            return await c.post(path, json=body)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/completions", {"prompt": ["a", "b", "c", "d", "e"], "max_tokens": 1}),
     ("/v1/completions", {"prompt": ["a", "b"], "n": 3, "max_tokens": 1}),
     ("/completion", {"prompt": ["a", "b", "c", "d", "e"], "n_predict": 1})],
    ids=["5-prompts", "2-prompts-x-3", "llama-5-prompts"],
)
def test_more_generations_than_the_queue_holds_is_a_400_naming_the_limit(server, path, body):
    r = post(server, path, body)
    assert r.status_code == 400
    assert "Retry-After" not in r.headers
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "at most 4 generations (--max-queue)" in error["message"]


def test_as_many_generations_as_the_queue_holds_run(server):
    r = post(server, "/v1/completions", {"prompt": ["a", "b"], "n": 2, "max_tokens": 1})
    assert r.status_code == 200
    assert len(r.json()["choices"]) == 4
