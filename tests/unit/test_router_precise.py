"""Precise mode's wiring: prompt token ids as a worker computes them, hashed
with the request's cache salt, and a KV-event subscription for each worker."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from inferd.config import RouterOptions
from inferd.models.loader import load_model
from inferd.prefix_hash import prefix_block_hashes, root_hash
from inferd.router.assemble import build_router_state, start_router, stop_router
from inferd.router.kv_index import KvIndex
from inferd.router.policies.base import Decision, RoutingRequest
from inferd.router.policies.precise import PrecisePolicy
from inferd.router.prompt_tokens import PromptTokenizer
from inferd.router.worker import Worker
from served import served, small_config

CHAT = {"model": "tiny", "max_tokens": 1, "messages": [
    {"role": "system", "content": "be brief"}, {"role": "user", "content": "what is a prefix cache?"}]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    with served(load_model(str(tiny_model_dir), dtype="float32"), small_config(ctx_size=1024)) as server:
        yield server.app


def ask(app, path: str, body: dict) -> dict:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
            r = await c.post(path, json=body)
            assert r.status_code == 200, r.text
            return r.json()

    return asyncio.run(go())


@pytest.mark.parametrize("body", [CHAT, {**CHAT, "tools": TOOLS}, {**CHAT, "tools": TOOLS, "tool_choice": "none"}],
                         ids=["plain", "tools", "tool-choice-none"])
def test_chat_prompt_tokens_are_the_workers(worker, tiny_model_dir, body):
    tokenize = PromptTokenizer.for_model(str(tiny_model_dir))
    assert len(tokenize("/v1/chat/completions", body)) == ask(worker, "/v1/chat/completions", body)["usage"][
        "prompt_tokens"]


def test_messages_and_completions_prompt_tokens_are_the_workers(worker, tiny_model_dir):
    tokenize = PromptTokenizer.for_model(str(tiny_model_dir))
    messages = {"model": "tiny", "system": "be brief", "messages": [{"role": "user", "content": "hello"}]}
    counted = ask(worker, "/v1/messages/count_tokens", messages)["input_tokens"]
    assert len(tokenize("/v1/messages", {**messages, "max_tokens": 4})) == counted
    completion = {"model": "tiny", "prompt": "once upon a time", "max_tokens": 1}
    assert len(tokenize("/v1/completions", completion)) == ask(worker, "/v1/completions", completion)["usage"][
        "prompt_tokens"]


def test_what_cannot_be_rendered_has_no_tokens(tiny_model_dir):
    tokenize = PromptTokenizer.for_model(str(tiny_model_dir))
    assert tokenize("/v1/chat/completions", {"messages": "not a list"}) is None
    assert tokenize("/v1/messages", {"messages": []}) is None  # no max_tokens: the worker's 400
    assert tokenize("/api/generate", {"prompt": "hi"}) is None


def test_precise_mode_follows_each_workers_kv_events(tiny_model_dir):
    config = RouterOptions(worker=["http://127.0.0.1:1"], policy="precise", tokenizer=str(tiny_model_dir),
                           health_interval=0)
    state = build_router_state(config)

    async def main():
        await start_router(state)
        try:
            worker = state.fleet.get("http://127.0.0.1:1")
            assert worker.capabilities == frozenset({"kv-events"})
            assert state.subscriber.following() == ["http://127.0.0.1:1"]
            state.fleet.remove(worker.id)
            await asyncio.sleep(0)
            assert state.subscriber.following() == []
        finally:
            await stop_router(state)

    asyncio.run(main())
    assert state.policy.fallback.name == "precise"


# -- hashing the prompt as the worker does ---------------------------------------------

TOKENS = list(range(3, 19))  # four blocks of 4


def kv_snapshot(hashes):
    return {"type": "snapshot", "block_size": 4, "hashes": list(hashes), "active_blocks": 0}


class Fallback:
    name = "fallback"

    def choose(self, request, candidates):
        return Decision(candidates[-1], "fallback")


def choose(body, token_ids=TOKENS) -> Decision:
    index = KvIndex()
    index.apply("salted", kv_snapshot(prefix_block_hashes(TOKENS, 4, parent=root_hash("tenant-a"))))
    index.apply("plain", kv_snapshot(prefix_block_hashes(TOKENS, 4)))
    policy = PrecisePolicy(index=index, fallback=Fallback())
    request = RoutingRequest(path="/v1/completions", body=body, text="", token_ids=token_ids)
    return policy.choose(request, [Worker(id="salted", url="http://s"), Worker(id="plain", url="http://p")])


@pytest.mark.parametrize("body, worker, matched", [
    ({"cache_salt": "tenant-a"}, "salted", 1.0),
    ({}, "plain", 1.0),
    ({"cache_salt": None}, "plain", 1.0),
    ({"cache_salt": 7}, "plain", 1.0),  # not a string: hashed unsalted (the worker refuses the request anyway)
    ({"cache_salt": "tenant-b"}, "plain", 0.0),  # a salt nobody holds: no overlap anywhere (tie on id)
])
def test_the_prompt_is_hashed_with_the_bodys_cache_salt(body, worker, matched):
    decision = choose(body)
    assert (decision.worker.id, decision.reason, decision.matched) == (worker, "kv-cost", matched)


def test_token_ids_no_worker_accepts_go_to_the_fallback():
    assert choose({}, token_ids=[3, -1, 4, 5]).reason == "fallback"
