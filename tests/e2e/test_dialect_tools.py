"""Tools through the Anthropic and Ollama SDKs on the bundled model: a forced
Anthropic tool_use validates against its input schema, whole and streamed, and
a tool result round-trips into an answer in both dialects."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest

ollama = pytest.importorskip("ollama")

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def claude(bundled_server):
    with anthropic.Anthropic(base_url=bundled_server.base_url, api_key="unused", max_retries=0, timeout=120.0) as c:
        yield c


def test_anthropic_forced_tool_use_validates(claude, bundled_server):
    message = claude.messages.create(
        model=bundled_server.model_name, max_tokens=80, messages=ASK, tool_choice={"type": "any"},
        tools=[{"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA}],
    )
    assert message.stop_reason == "tool_use"
    uses = [b for b in message.content if b.type == "tool_use"]
    assert uses and all(u.name == "get_weather" for u in uses)
    for use in uses:
        jsonschema.validate(use.input, WEATHER_SCHEMA)


def test_anthropic_streamed_tool_use_matches(claude, bundled_server):
    request = dict(
        model=bundled_server.model_name, max_tokens=80, messages=ASK, extra_body={"temperature": 0},
        tool_choice={"type": "tool", "name": "get_weather"},
        tools=[{"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA}],
    )
    whole = claude.messages.create(**request)
    with claude.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert [(b.name, b.input) for b in streamed.content if b.type == "tool_use"] == \
        [(b.name, b.input) for b in whole.content if b.type == "tool_use"]
    assert streamed.stop_reason == "tool_use"


def test_anthropic_tool_result_round_trips(claude, bundled_server):
    messages = ASK + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris", "unit": "c"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 and sunny"}]},
    ]
    tools = [{"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA}]
    count = claude.messages.count_tokens(model=bundled_server.model_name, messages=messages, tools=tools)
    message = claude.messages.create(model=bundled_server.model_name, max_tokens=20, messages=messages, tools=tools)
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == count.input_tokens
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_ollama_tool_result_round_trips(bundled_server):
    sdk = ollama.Client(host=bundled_server.base_url)
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                             "parameters": WEATHER_SCHEMA}}
    messages = ASK + [
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
        {"role": "tool", "content": "21 and sunny", "tool_name": "get_weather"},
    ]
    response = sdk.chat(model=bundled_server.model_name, messages=messages, tools=[tool],
                        options={"temperature": 0, "num_predict": 20})
    assert response.done and response.prompt_eval_count > 60
    for call in response.message.tool_calls or []:
        assert call.function.name == "get_weather"
        json.dumps(call.function.arguments)
