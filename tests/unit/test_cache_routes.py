"""/v1/cache/stats and /v1/cache/reset: prefix-cache hits show up, and a
reset makes the next identical prompt start cold."""

from __future__ import annotations

import asyncio

import pytest

from inferd.models.loader import load_model
from served import Served, served, small_config

BLOCK_SIZE = 4
PROMPT = "a prompt long enough to fill several blocks"  # byte tokens: one per character, plus <bos>
PROMPT_TOKENS = len(PROMPT) + 1
LOOKED_UP_BLOCKS = (PROMPT_TOKENS - 1) // BLOCK_SIZE  # the last token is always computed, never looked up
COMPLETION = {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture
def server(loaded):
    with served(loaded, small_config(block_size=BLOCK_SIZE)) as server:
        yield server


def run(server: Served, calls):
    """Send (method, path, json) calls in order, on one app and one event loop."""

    async def go():
        async with server.client() as client:
            responses = []
            for method, path, body in calls:
                r = await client.request(method, path, json=body)
                assert r.status_code == 200, r.text
                responses.append(r.json())
            return responses

    return asyncio.run(go())


def cached_tokens(completion: dict) -> int:
    return completion["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_stats_start_empty(server):
    [stats] = run(server, [("GET", "/v1/cache/stats", None)])
    assert stats == {
        "kv_blocks_total": server.state.engine.engine.pool.num_blocks, "kv_blocks_used": 0, "block_size": BLOCK_SIZE,
        "kv_usage": 0.0, "prefix_cache_queries": 0, "prefix_cache_hits": 0, "prefix_cache_hit_rate": 0.0,
    }


def test_a_repeated_prompt_is_a_prefix_hit(server):
    first, after_first, second, after_second = run(server, [
        ("POST", "/v1/completions", COMPLETION),
        ("GET", "/v1/cache/stats", None),
        ("POST", "/v1/completions", COMPLETION),
        ("GET", "/v1/cache/stats", None),
    ])
    assert first["usage"]["prompt_tokens"] == PROMPT_TOKENS
    assert cached_tokens(first) == 0
    assert (after_first["prefix_cache_queries"], after_first["prefix_cache_hits"]) == (LOOKED_UP_BLOCKS, 0)
    assert cached_tokens(second) == LOOKED_UP_BLOCKS * BLOCK_SIZE
    assert after_second["prefix_cache_queries"] == 2 * LOOKED_UP_BLOCKS
    assert after_second["prefix_cache_hits"] == LOOKED_UP_BLOCKS
    assert after_second["prefix_cache_hit_rate"] == 0.5
    assert after_second["kv_blocks_used"] == 0  # finished requests keep their blocks cached, not held


def test_reset_drops_the_cached_blocks_and_the_next_prompt_starts_cold(server):
    [warm] = run(server, [("POST", "/v1/completions", COMPLETION)])
    assert cached_tokens(warm) == 0
    hashed = asyncio.run(server.state.engine.call(lambda e: sum(h is not None for h in e.pool.hash_of)))
    assert hashed >= LOOKED_UP_BLOCKS

    reset, cold, reset_again = run(server, [
        ("POST", "/v1/cache/reset", None),
        ("POST", "/v1/completions", COMPLETION),
        ("POST", "/v1/cache/reset", None),
    ])
    assert reset == {"dropped_blocks": hashed}
    assert cached_tokens(cold) == 0
    assert cold["choices"][0]["text"] == warm["choices"][0]["text"]
    assert reset_again == {"dropped_blocks": hashed}  # the cold run cached the same blocks again


def test_cache_routes_wait_for_the_model():
    async def go():
        with served(None) as loading:  # no engine yet: still loading
            async with loading.client() as client:
                return await client.get("/v1/cache/stats"), await client.post("/v1/cache/reset")

    for r in asyncio.run(go()):
        assert r.status_code == 503
        assert r.headers["retry-after"] == "2"
        assert r.json()["error"]["code"] == "loading"
