"""`inferd router` over two real `inferd serve` workers on the tiny model,
driven by the official OpenAI and Anthropic SDKs."""

from __future__ import annotations

import anthropic
import pytest

from router_process import RouterProcess
from server import ALIAS, TINY_CTX, ServerProcess

HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def workers(tiny_model_dir, server_logs):
    started = []
    try:
        for i in range(2):
            started.append(ServerProcess(tiny_model_dir, parallel=2, ctx_size=TINY_CTX, alias=[ALIAS],
                                         log_path=server_logs / f"router-smoke-worker-{i}.log").start())
        yield started
    finally:
        for w in started:
            w.stop()


@pytest.fixture(scope="module")
def router(workers, server_logs):
    with RouterProcess([w.base_url for w in workers], policy="round-robin",
                       log_path=server_logs / "router-smoke.log") as r:
        yield r


@pytest.fixture(scope="module")
def client(router):
    with router.openai() as c:
        yield c


def greedy(**overrides) -> dict:
    return dict(model=ALIAS, messages=HELLO, temperature=0, max_tokens=6, extra_body={"ignore_eos": True}, **overrides)


def test_chat_answers_as_a_worker_does_and_requests_take_turns(router, workers, client):
    with workers[0].openai() as direct:
        expected = direct.chat.completions.create(**greedy())
    seen = []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(**greedy())
        answer = raw.parse()
        seen.append(raw.headers["x-inferd-worker"])
        assert answer.choices[0].message.content == expected.choices[0].message.content
        assert answer.usage.completion_tokens == 6
    assert sorted(seen) == sorted(w.base_url for w in workers)


def test_chat_streams_through_the_router(client):
    whole = client.chat.completions.create(**greedy())
    with client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **greedy()) as stream:
        chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content


def test_anthropic_messages_through_the_router(router, client):
    chat = client.chat.completions.create(**greedy())
    with anthropic.Anthropic(base_url=router.base_url, api_key="unused", max_retries=0, timeout=60.0) as sdk:
        message = sdk.messages.create(model=ALIAS, messages=HELLO, max_tokens=6, extra_body={"temperature": 0})
        assert [(b.type, b.text) for b in message.content] == [("text", chat.choices[0].message.content)]
        with sdk.messages.stream(model=ALIAS, messages=HELLO, max_tokens=6, extra_body={"temperature": 0}) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text == message.content[0].text
    assert final.stop_reason == message.stop_reason


def test_the_router_lists_its_fleet_and_their_models(router, workers, client):
    fleet = {w["url"]: w for w in router.fleet()}
    assert sorted(fleet) == sorted(w.base_url for w in workers)
    assert {(w["state"], w["model"], w["source"]) for w in fleet.values()} == \
        {("ready", workers[0].model_name, "static")}
    # --alias renames the served model; the bundled model is in the workers' store, loaded on demand
    assert [m.id for m in client.models.list()] == [ALIAS, "gemma-3-270m"]
    assert router.health().json() == {"status": "ok", "workers": 2}
