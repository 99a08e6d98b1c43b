"""POST /v1/messages in process on the tiny model: exact response and event
shapes, the tool round trip, validation in Anthropic's error envelope, and
count_tokens against the chat prompt."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd.api.anthropic.errors import anthropic_error
from inferd.api.anthropic.stream import BlockWriter
from inferd.chat.template import ChatTemplate
from inferd.chat.tool_parsers import ToolCallDelta
from inferd.engine.errors import QueueFullError
from inferd.models.loader import load_model
from inferd.serving.chat_output import ChoiceDelta
from inferd.serving.generation import engine_unavailable
from served import client, served, small_config

# Shows every piece the conversion produces: roles, text, tool calls, tool results, tool names.
TEMPLATE = (
    "{% for m in messages %}[{{ m.role }}]"
    "{% if m.content is string %}{{ m.content }}"
    "{% else %}{{ m.content | map(attribute='text') | join('+') }}{% endif %}"
    "{% for c in m.tool_calls or [] %}<{{ c.id }}:{{ c.function.name }}:{{ c.function.arguments.city }}>{% endfor %}"
    "{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %}{% endfor %}"
    "{% if tools %}|tools={{ tools | map(attribute='function') | map(attribute='name') | join(',') }}{% endif %}"
    "[assistant]"
)

WEATHER = {
    "name": "get_weather", "description": "current weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}},
                     "required": ["city"]},
}
FORCE_WEATHER = {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}, "max_tokens": 80}
HI = {"model": "tiny", "max_tokens": 5, "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def app(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    with served(loaded, small_config(ctx_size=512), template=ChatTemplate(TEMPLATE, None, None)) as server:
        yield server.app


def post(app, path, body):
    async def go():
        async with client(app) as c:
            return await c.post(path, json=body)

    return asyncio.run(go())


def events(response) -> list[tuple[str, dict]]:
    """(event name, data) per SSE event; the name line must match the data's type."""
    out = []
    for frame in response.text.split("\n\n"):
        if not frame.strip():
            continue
        name_line, data_line = frame.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert name == data["type"]
        out.append((name, data))
    return out


def test_a_message_has_anthropic_shape_and_matches_the_chat_route(app):
    r = post(app, "/v1/messages", HI)
    chat = post(app, "/v1/chat/completions", {**HI, "messages": HI["messages"]}).json()
    body = r.json()
    assert r.status_code == 200
    assert body["id"].startswith("msg_") and len(body["id"]) == 36
    text = chat["choices"][0]["message"]["content"]
    assert {k: v for k, v in body.items() if k not in ("id", "usage")} == {
        "type": "message", "role": "assistant", "model": "tiny", "content": [{"type": "text", "text": text}],
        "stop_reason": "max_tokens", "stop_sequence": None,
    }
    usage = body["usage"]
    assert usage["output_tokens"] == 5 and usage["cache_creation_input_tokens"] == 0
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == chat["usage"]["prompt_tokens"]


def test_the_stream_follows_anthropics_event_order(app):
    whole = post(app, "/messages", HI).json()
    r = post(app, "/v1/messages", {**HI, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    got = events(r)
    names = [name for name, _ in got]
    deltas = names.count("content_block_delta")
    assert deltas >= 1
    assert names == ["message_start", "content_block_start", "ping", *["content_block_delta"] * deltas,
                     "content_block_stop", "message_delta", "message_stop"]
    start = got[0][1]["message"]
    assert {k: v for k, v in start.items() if k not in ("id", "usage")} == {
        "type": "message", "role": "assistant", "model": "tiny", "content": [], "stop_reason": None,
        "stop_sequence": None}
    assert start["usage"]["output_tokens"] == 0
    assert got[1][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    text = "".join(data["delta"]["text"] for name, data in got if name == "content_block_delta")
    assert [data["delta"]["type"] for name, data in got if name == "content_block_delta"] == ["text_delta"] * deltas
    assert text == whole["content"][0]["text"]
    assert got[-3][1] == {"type": "content_block_stop", "index": 0}
    assert got[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert got[-2][1]["usage"]["output_tokens"] == 5


def test_a_client_stop_sequence_is_reported_as_one(app):
    first = post(app, "/v1/messages", HI).json()["content"][0]["text"][0]
    body = post(app, "/v1/messages", {**HI, "stop_sequences": [first]}).json()
    assert (body["content"], body["stop_reason"], body["stop_sequence"]) == ([], "stop_sequence", first)


def test_a_forced_tool_call_is_a_tool_use_block_with_parsed_input(app):
    body = post(app, "/v1/messages", {**HI, **FORCE_WEATHER}).json()
    (block,) = body["content"]
    assert block["id"].startswith("call_")
    assert {k: v for k, v in block.items() if k != "id"} == {
        "type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}
    assert (body["stop_reason"], body["stop_sequence"]) == ("tool_use", None)


def test_a_streamed_tool_call_is_one_tool_use_block_of_json_deltas(app):
    got = events(post(app, "/v1/messages", {**HI, **FORCE_WEATHER, "stream": True}))
    names = [name for name, _ in got]
    deltas = names.count("content_block_delta")
    assert names == ["message_start", "content_block_start", "ping", *["content_block_delta"] * deltas,
                     "content_block_stop", "message_delta", "message_stop"]
    block = got[1][1]["content_block"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", {})
    parts = [data["delta"] for name, data in got if name == "content_block_delta"]
    assert {p["type"] for p in parts} == {"input_json_delta"}
    assert json.loads("".join(p["partial_json"] for p in parts)) == {"city": "Paris"}
    assert got[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


def test_tool_use_and_tool_result_round_trip_into_the_prompt(app):
    history = {
        "model": "tiny", "system": [{"type": "text", "text": "be brief"}], "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "and?"}]},
        ],
    }
    expected = ("[system]be brief[user]weather?[assistant]checking<toolu_1:get_weather:Paris>"
                "[tool]sunny(toolu_1)[user]and?|tools=get_weather[assistant]")
    counted = post(app, "/v1/messages/count_tokens", history)
    assert counted.status_code == 200
    assert counted.json() == {"input_tokens": prompt_tokens(app, expected)}
    answered = post(app, "/v1/messages", {**history, "max_tokens": 2, "tool_choice": {"type": "none"}}).json()
    # tool_choice none leaves the tools out of the prompt, as on the chat route.
    without_tools = expected.replace("|tools=get_weather", "")
    assert answered["usage"]["input_tokens"] + answered["usage"]["cache_read_input_tokens"] == \
        prompt_tokens(app, without_tools)


def prompt_tokens(app, text: str) -> int:
    return len(app.state.inferd.engine.tokenizer.encode(text))


def test_count_tokens_equals_the_chat_prompt_token_count(app):
    messages = [{"role": "user", "content": "hello there"}]
    counted = post(app, "/v1/messages/count_tokens", {"model": "tiny", "system": "sys", "messages": messages}).json()
    chat = post(app, "/v1/chat/completions", {"messages": [{"role": "system", "content": "sys"}, *messages],
                                              "max_tokens": 1}).json()
    assert counted == {"input_tokens": chat["usage"]["prompt_tokens"]}


def error_of(r) -> tuple[int, dict]:
    return r.status_code, r.json()


def test_missing_max_tokens_is_an_anthropic_400(app):
    body = {k: v for k, v in HI.items() if k != "max_tokens"}
    assert error_of(post(app, "/v1/messages", body)) == (
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}})


@pytest.mark.parametrize(("thinking", "message"), [
    ({"type": "enabled", "budget_tokens": 5}, "thinking.budget_tokens (5) must be less than max_tokens (5)"),
    ({"type": "enabled"}, "thinking.budget_tokens: Field required"),
])
def test_a_thinking_budget_must_fit_below_max_tokens(app, thinking, message):
    assert error_of(post(app, "/v1/messages", {**HI, "thinking": thinking})) == (
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}})


def test_a_thinking_budget_below_max_tokens_is_accepted(app):
    r = post(app, "/v1/messages", {**HI, "thinking": {"type": "enabled", "budget_tokens": 4}})
    assert r.status_code == 200 and r.json()["usage"]["output_tokens"] == 5


def test_a_tool_choice_of_type_tool_needs_a_name(app):
    r = post(app, "/v1/messages", {**HI, "tools": [WEATHER], "tool_choice": {"type": "tool"}})
    assert error_of(r) == (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": 'tool_choice of type "tool" needs the tool\'s name'}})


def test_schema_errors_and_unknown_models_use_the_anthropic_envelope(app):
    status, body = error_of(post(app, "/v1/messages", {**HI, "messages": []}))
    assert (status, body["type"], body["error"]["type"]) == (400, "error", "invalid_request_error")
    assert body["error"]["message"].startswith("messages:")
    answer = post(app, "/v1/messages", {**HI, "model": "claude-nope"})  # one model served: it answers
    assert (answer.status_code, answer.json()["model"]) == (200, "tiny")
    app.state.inferd.served.strict = True  # --strict-model-names
    try:
        status, body = error_of(post(app, "/v1/messages", {**HI, "model": "claude-nope"}))
    finally:
        app.state.inferd.served.strict = False
    assert (status, body["type"], body["error"]["type"]) == (404, "error", "not_found_error")
    assert "'claude-nope' is not served here" in body["error"]["message"]


def test_the_chat_route_keeps_the_openai_envelope(app):
    r = post(app, "/v1/chat/completions", {"messages": []})
    assert r.status_code == 400 and set(r.json()) == {"error"}


def test_a_full_queue_is_overloaded_529():
    err = anthropic_error(engine_unavailable(QueueFullError("queue full")))
    assert (err.status, err.type, err.message, err.headers) == (529, "overloaded_error", "queue full",
                                                                {"Retry-After": "1"})


def test_block_writer_gives_each_kind_of_output_its_own_block():
    writer = BlockWriter()
    frames = writer.delta_events(ChoiceDelta(reasoning="hm", content="hi"))
    frames += writer.delta_events(ChoiceDelta(tool_calls=[ToolCallDelta(index=0, id="call_1", name="f")]))
    frames += writer.delta_events(ChoiceDelta(tool_calls=[ToolCallDelta(index=0, arguments='{"a":1}')]))
    frames += writer.close()
    got = [json.loads(f.split("\ndata: ")[1]) for f in frames]
    assert got == [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                                       "signature": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"a":1}'}},
        {"type": "content_block_stop", "index": 2},
    ]


def test_errors_before_routing_use_each_dialects_envelope():
    """401 and 415 come from middleware; Anthropic and Ollama paths still get their own shapes."""

    async def go():
        with served(None, api_keys=frozenset({"k"})) as loading:
            async with loading.client() as client:
                anthropic = await client.post("/v1/messages", json={})
                ollama = await client.post("/api/chat", json={})
                openai = await client.post("/v1/chat/completions", json={})
                media = await client.post("/v1/messages", content=b"x",
                                          headers={"x-api-key": "k", "content-type": "text/plain"})
                return anthropic, ollama, openai, media

    anthropic, ollama, openai, media = asyncio.run(go())
    assert anthropic.status_code == 401 and anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "authentication_error"
    assert ollama.status_code == 401 and set(ollama.json()) == {"error"}
    assert openai.status_code == 401 and openai.json()["error"]["type"] == "authentication_error"
    assert media.status_code == 415 and media.json()["error"]["type"] == "invalid_request_error"
    assert media.json()["type"] == "error"
