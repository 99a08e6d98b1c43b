"""The chat route in process: template variables, template failures, priority
header, and SSE keep-alive comments."""

from __future__ import annotations

import asyncio

import pytest

from inferd.chat.template import ChatTemplate
from inferd.http.keepalive import with_keepalive
from inferd.models.loader import load_model
from served import served

# Shows whether the template variables arrived, and refuses a role it does not know.
TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}"
    "[{{ m.role }}]{{ m.content }}{% endfor %}|thinking={{ enable_thinking | default('unset') }}"
)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture
def client(loaded):
    with served(loaded, template=ChatTemplate(TEMPLATE, None, None)) as server:
        yield server.client()


def run(coro):
    return asyncio.run(coro)


MESSAGES = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, "[system]be brief[user]hi|thinking=True"),  # a template that reads it thinks unless told not to
        ({"chat_template_kwargs": {"enable_thinking": False}}, "[system]be brief[user]hi|thinking=False"),
        ({"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}, "[system]be brief[user]hi|thinking=True"),
    ],
    ids=["none", "top-level", "extra_body"],
)
def test_template_variables_reach_the_template(client, extra, expected):
    async def go():
        async with client:
            r = await client.post("/apply-template", json={"messages": MESSAGES, **extra})
            return r.status_code, r.json()

    assert run(go()) == (200, {"prompt": expected})


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/apply-template"])
@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs",
         "chat_template_kwargs: Value error, chat_template_kwargs may not set 'messages'"),
        ({"extra_body": {"chat_template_kwargs": {"add_generation_prompt": False}}}, "extra_body.chat_template_kwargs",
         "chat_template_kwargs may not set 'add_generation_prompt'"),
        ({"extra_body": "text"}, "extra_body", "extra_body must be an object"),
    ],
    ids=["reserved", "reserved-in-extra_body", "extra_body-not-an-object"],
)
def test_template_variables_the_client_may_not_set_are_a_400(client, path, extra, param, message):
    async def go():
        async with client:
            r = await client.post(path, json={"messages": MESSAGES, "max_tokens": 1, **extra})
            return r.status_code, r.json()["error"]

    status, error = run(go())
    assert (status, error["type"], error["param"]) == (400, "invalid_request_error", param)
    assert error["message"].startswith(message)


def test_a_template_that_raises_is_a_400_before_generation(client):
    async def go():
        async with client:
            bad = await client.post("/v1/chat/completions", json={
                "messages": [{"role": "tool", "content": "42", "tool_call_id": "x"}], "max_tokens": 2})
            good = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2})
            return bad, good

    bad, good = run(go())
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "messages"
    assert "no tools here" in bad.json()["error"]["message"]
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 2


def test_priority_header_is_validated(client):
    async def go():
        async with client:
            ok = await client.post("/v1/chat/completions", headers={"X-Priority": "high"},
                                   json={"messages": MESSAGES, "max_tokens": 1})
            bad = await client.post("/v1/chat/completions", headers={"X-Priority": "urgent"},
                                    json={"messages": MESSAGES, "max_tokens": 1})
            return ok.status_code, bad.status_code, bad.json()["error"]

    ok, bad, err = run(go())
    assert (ok, bad) == (200, 400)
    assert err["param"] == "X-Priority" and "high, normal or low" in err["message"]


def test_keepalive_comments_fill_silences_and_events_pass_through():
    keepalive = ": keep-alive\n\n"

    async def go():
        resume = asyncio.Event()

        async def slow():
            yield "data: 1\n\n"
            await resume.wait()  # silent until the reader has had two keep-alives
            yield "data: 2\n\n"

        events = []
        async for event in with_keepalive(slow(), interval=0.02):
            events.append(event)
            if events.count(keepalive) == 2:
                resume.set()
        return events

    assert run(go()) == ["data: 1\n\n", keepalive, keepalive, "data: 2\n\n"]


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"[" * 100_000 + b"]" * 100_000, "request body is not valid JSON: it is nested too deeply"),
     (b'{"messages": "\xff"}', "request body is not valid UTF-8: invalid start byte at byte 14")],
    ids=["deep", "invalid-utf8"],
)
@pytest.mark.parametrize(("path", "read"), [("/v1/chat/completions", lambda b: b["error"]["message"]),
                                            ("/v1/messages", lambda b: b["error"]["message"]),
                                            ("/api/chat", lambda b: b["error"])])
def test_an_unreadable_body_is_a_400_that_says_why(client, body, message, path, read):
    async def go():
        async with client:
            r = await client.post(path, content=body, headers={"content-type": "application/json"})
            return r.status_code, read(r.json())

    assert run(go()) == (400, message)


@pytest.mark.parametrize(("path", "body", "read"), [
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": {"$ref": "#"}}}},
     lambda b: b["error"]["message"]),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4, "grammar": "root ::= root"},
     lambda b: b["error"]["message"]),
    ("/api/chat", {"model": "tiny", "messages": MESSAGES[1:], "stream": False, "format": {"$ref": "#"}},
     lambda b: b["error"]),
], ids=["openai-schema", "openai-gbnf", "ollama-format"])
def test_a_grammar_that_can_never_produce_output_is_a_400_before_generation(client, path, body, read):
    async def go():
        async with client:
            r = await client.post(path, json=body)
            return r.status_code, read(r.json())

    status, message = run(go())
    assert status == 400
    assert "can never produce any output" in message
