"""Structured outputs and tool calls on the bundled model through the openai
SDK: constrained output always parses and validates; required tool calls are
well formed; streaming reassembles to the same call."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"]},
    {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                               "minItems": 1, "maxItems": 3}}, "required": ["tags"]},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "number", "minimum": -10, "maximum": 10}, "y": {"type": "number", "minimum": -10, "maximum": 10}},
        "required": ["x", "y"]}}, "required": ["point"]},
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                      "country": {"type": "string", "maxLength": 30}}, "required": ["city", "country"]},
    # A bounded number needs multipleOf: without it a small model can emit fraction digits without end.
    {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.25}},
     "required": ["score"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9},
                                                "maxItems": 4}}, "required": ["items"]},
    {"type": "object", "properties": {"value": {"type": ["string", "null"], "maxLength": 8}}, "required": ["value"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 1000}, "admin": {"type": "boolean"}},
        "required": ["id", "admin"]}}, "required": ["user"]},
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "integer", "minimum": 1,
                                                                                       "maximum": 5}},
     "required": ["answer", "confidence"]},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 2, "maxItems": 5},
    {"type": "object", "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 15},
                                      "year": {"type": "integer", "minimum": 1900, "maximum": 2100}},
     "required": ["title", "year"]},
    {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 2, "items": {
        "type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}, "required": ["matrix"]},
    {"type": "object", "properties": {"status": {"const": "done"}}, "required": ["status"]},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                      "b": {"type": "string", "maxLength": 5}, "c": {"type": "boolean"}},
     "required": ["a", "b", "c"]},
    {"type": "object", "properties": {"unit": {"enum": ["kg", "lb"]}, "amount": {"type": "number", "minimum": 0,
                                                                                 "maximum": 500}},
     "required": ["unit", "amount"]},
    {"type": "object", "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3},
                                         "done": {"type": "boolean"}}, "required": ["n", "done"]}}},
     "required": ["steps"]},
    {"type": "object", "properties": {"email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"}},
     "required": ["email"]},
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                        "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"]},
    },
}


@pytest.fixture(scope="module")
def sdk(bundled_server):
    with bundled_server.openai() as client:
        yield client


@pytest.mark.parametrize("schema", SCHEMAS, ids=[f"schema{i}" for i in range(len(SCHEMAS))])
def test_json_schema_output_parses_and_validates(sdk, schema):
    r = sdk.chat.completions.create(
        model="gemma-3-270m", max_tokens=200, temperature=0.7, seed=11,
        messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_json_object_output_is_an_object(sdk):
    r = sdk.chat.completions.create(
        model="gemma-3-270m", max_tokens=200, temperature=0, messages=[{"role": "user", "content": "A JSON object."}],
        response_format={"type": "json_object"}, extra_body={"max_pattern_size": 8, "min_count": 4},
    )
    content = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    assert content.startswith("{")


def test_an_invalid_schema_is_a_400_and_the_next_request_succeeds(sdk):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(
            model="gemma-3-270m", max_tokens=10, messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        )
    assert err.value.type == "invalid_request_error"
    ok = sdk.chat.completions.create(model="gemma-3-270m", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert ok.usage.completion_tokens >= 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_tool_choice_yields_a_valid_call(sdk, seed):
    r = sdk.chat.completions.create(
        model="gemma-3-270m", max_tokens=120, temperature=0.8, seed=seed, tools=[WEATHER], tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) >= 1  # "required": one call or more
    for call in choice.message.tool_calls:
        assert call.function.name == "get_weather" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_streamed_tool_call_reassembles_to_the_non_streamed_call(sdk):
    request = dict(
        model="gemma-3-270m", max_tokens=120, temperature=0, tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "Weather in Oslo, in celsius?"}],
    )
    whole = sdk.chat.completions.create(**request).choices[0].message.tool_calls[0]
    name, arguments, ids, finish = None, "", set(), None
    for chunk in sdk.chat.completions.create(**request, stream=True):
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                assert delta.index == 0
                if delta.id:
                    ids.add(delta.id)
                if delta.function and delta.function.name:
                    assert name is None  # the name comes once, first
                    name = delta.function.name
                if delta.function and delta.function.arguments:
                    arguments += delta.function.arguments
            finish = choice.finish_reason or finish
    assert (name, arguments) == (whole.function.name, whole.function.arguments)
    assert len(ids) == 1 and finish == "tool_calls"


def test_each_choice_of_a_streamed_n2_request_follows_the_schema(sdk):
    schema = SCHEMAS[3]
    texts = {0: "", 1: ""}
    for chunk in sdk.chat.completions.create(
        model="gemma-3-270m", max_tokens=60, temperature=1.0, seed=5, n=2, stream=True,
        messages=[{"role": "user", "content": "Pick a color."}],
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    ):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    for text in texts.values():
        jsonschema.validate(json.loads(text), schema)


def test_a_tool_result_round_trips_into_an_answer(sdk, bundled_server):
    call = {"id": "call_abc", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo", "unit": "c"})}}
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "12 degrees and sunny"},
    ]
    with bundled_server.http() as http:
        prompt = http.post("/apply-template", json={"messages": messages, "tools": [WEATHER]}).json()["prompt"]
    assert '"arguments": {"city": "Oslo", "unit": "c"}' in prompt and "Tool: 12 degrees and sunny" in prompt
    r = sdk.chat.completions.create(model="gemma-3-270m", max_tokens=30, temperature=0, tools=[WEATHER],
                                    messages=messages)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 40
