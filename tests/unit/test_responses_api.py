"""POST /v1/responses and the stored-response routes in process on the tiny
model: exact response and event shapes, tool calls, chaining through the
store (checked by prompt token counts), and errors in the OpenAI envelope."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd.chat.template import ChatTemplate
from inferd.models.loader import load_model
from inferd.store.responses import ResponseStore
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
    "type": "function", "name": "get_weather", "description": "current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}},
                   "required": ["city"]},
}
FORCE_WEATHER = {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"},
                 "max_output_tokens": 80}
HI = {"model": "tiny", "input": "hi", "max_output_tokens": 5, "temperature": 0}
USAGE_KEYS = {"input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"}


@pytest.fixture(scope="module")
def app(tiny_model_dir, tmp_path_factory):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    with served(loaded, small_config(ctx_size=512), template=ChatTemplate(TEMPLATE, None, None)) as server:
        server.state.responses_store = ResponseStore.in_dir(tmp_path_factory.mktemp("data"), ttl=3600, max_rows=100)
        yield server.app


def call(app, method, path, body=None):
    async def go():
        async with client(app) as c:
            return await c.request(method, path, json=body)

    return asyncio.run(go())


def post(app, path, body):
    return call(app, "POST", path, body)


def prompt_tokens(app, text: str) -> int:
    return len(app.state.inferd.engine.tokenizer.encode(text))


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
    assert [data["sequence_number"] for _, data in out] == list(range(len(out)))
    return out


def chat_text(app, body: dict) -> str:
    chat = post(app, "/v1/chat/completions", body).json()
    return chat["choices"][0]["message"]["content"]


def test_a_response_has_openai_shape_and_matches_the_chat_route(app):
    r = post(app, "/v1/responses", {**HI, "instructions": "be brief"})
    assert r.status_code == 200
    body = r.json()
    text = chat_text(app, {"model": "tiny", "max_tokens": 5, "temperature": 0, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
    assert body["id"].startswith("resp_") and len(body["id"]) == 37
    (message,) = body["output"]
    assert message["id"].startswith("msg_")
    assert {k: v for k, v in message.items() if k != "id"} == {
        "type": "message", "role": "assistant", "status": "incomplete",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}
    assert isinstance(body["created_at"], int)
    assert {k: v for k, v in body.items() if k not in ("id", "created_at", "output", "usage")} == {
        "object": "response", "status": "incomplete", "error": None,
        "incomplete_details": {"reason": "max_output_tokens"}, "instructions": "be brief",
        "max_output_tokens": 5, "model": "tiny", "parallel_tool_calls": True, "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None}, "store": True, "temperature": 0.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": None,
        "truncation": "disabled", "user": None, "metadata": {},
    }
    prompt = prompt_tokens(app, "[system]be brief[user]hi[assistant]")
    assert body["usage"] == {
        "input_tokens": prompt, "input_tokens_details": {"cached_tokens": body["usage"]["input_tokens_details"]["cached_tokens"]},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + 5}


def test_the_stream_follows_the_responses_event_order(app):
    whole = post(app, "/responses", {**HI, "store": False}).json()
    r = post(app, "/v1/responses", {**HI, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    got = events(r)
    names = [name for name, _ in got]
    deltas = names.count("response.output_text.delta")
    assert deltas >= 1
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * deltas,
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.incomplete"]
    created, final = got[0][1]["response"], got[-1][1]["response"]
    assert (created["status"], created["output"], created["usage"]) == ("in_progress", [], None)
    assert got[1][1]["response"] == created
    assert (final["id"], final["created_at"]) == (created["id"], created["created_at"])
    item_id = got[2][1]["item"]["id"]
    assert got[2][1] == {"type": "response.output_item.added", "output_index": 0, "sequence_number": 2, "item": {
        "id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}
    assert got[3][1] == {"type": "response.content_part.added", "item_id": item_id, "output_index": 0,
                         "content_index": 0, "sequence_number": 3,
                         "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}
    text = "".join(data["delta"] for name, data in got if name == "response.output_text.delta")
    assert text == whole["output"][0]["content"][0]["text"]
    assert got[-4][1]["text"] == text
    assert got[-2][1]["item"] == final["output"][0]
    assert final["status"] == "incomplete" and final["usage"]["output_tokens"] == 5
    # A streamed response is stored once it finishes.
    assert call(app, "GET", f"/v1/responses/{final['id']}").json() == final


def test_a_forced_tool_call_is_a_function_call_item(app):
    body = post(app, "/v1/responses", {**HI, **FORCE_WEATHER}).json()
    (item,) = body["output"]
    assert item["id"].startswith("fc_") and item["call_id"].startswith("call_")
    assert {k: v for k, v in item.items() if k not in ("id", "call_id")} == {
        "type": "function_call", "status": "completed", "name": "get_weather", "arguments": item["arguments"]}
    assert json.loads(item["arguments"]) == {"city": "Paris"}
    assert (body["status"], body["incomplete_details"]) == ("completed", None)
    assert body["tools"] == [WEATHER] and body["tool_choice"] == FORCE_WEATHER["tool_choice"]


def test_a_streamed_tool_call_is_one_function_call_item_of_argument_deltas(app):
    got = events(post(app, "/v1/responses", {**HI, **FORCE_WEATHER, "stream": True}))
    names = [name for name, _ in got]
    deltas = names.count("response.function_call_arguments.delta")
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     *["response.function_call_arguments.delta"] * deltas, "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    added = got[2][1]["item"]
    assert (added["type"], added["name"], added["arguments"], added["status"]) == (
        "function_call", "get_weather", "", "in_progress")
    arguments = "".join(data["delta"] for name, data in got if name == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Paris"}
    assert got[-3][1] == {"type": "response.function_call_arguments.done", "item_id": added["id"],
                          "output_index": 0, "name": "get_weather", "arguments": arguments,
                          "sequence_number": len(got) - 3}
    assert got[-2][1]["item"] == {**added, "status": "completed", "arguments": arguments}
    assert got[-1][1]["response"]["output"] == [got[-2][1]["item"]]


def test_previous_response_id_puts_the_earlier_turn_in_the_prompt(app):
    first = post(app, "/v1/responses", {**HI, "instructions": "be brief"}).json()
    answer = first["output"][0]["content"][0]["text"]
    second = post(app, "/v1/responses", {**HI, "input": "more", "previous_response_id": first["id"]}).json()
    assert second["previous_response_id"] == first["id"]
    # Instructions apply to one response only; the earlier input and output carry over.
    expected = f"[user]hi[assistant]{answer}[user]more[assistant]"
    assert second["usage"]["input_tokens"] == prompt_tokens(app, expected)
    third = {"model": "tiny", "input": "again", "previous_response_id": second["id"]}
    counted = post(app, "/v1/responses/input_tokens", third).json()
    again = f"{expected}{second['output'][0]['content'][0]['text']}[user]again[assistant]"
    assert counted == {"object": "response.input_tokens", "input_tokens": prompt_tokens(app, again)}


def test_a_tool_round_trip_in_input_items_reaches_the_prompt(app):
    body = {"model": "tiny", "instructions": "sys", "tools": [WEATHER], "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}, {"type": "input_text", "text": "now"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "checking"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]}
    expected = ("[system]sys[user]weather?+now[assistant]checking<call_1:get_weather:Paris>"
                "[tool]sunny(call_1)|tools=get_weather[assistant]")
    counted = post(app, "/v1/responses/input_tokens", body)
    assert counted.json() == {"object": "response.input_tokens", "input_tokens": prompt_tokens(app, expected)}
    answered = post(app, "/v1/responses", {**body, "max_output_tokens": 1, "tool_choice": "none"}).json()
    assert answered["usage"]["input_tokens"] == prompt_tokens(app, expected.replace("|tools=get_weather", ""))


def test_a_json_schema_text_format_constrains_the_output(app):
    schema = WEATHER["parameters"]
    fmt = {"type": "json_schema", "name": "weather", "schema": schema, "strict": True}
    body = post(app, "/v1/responses", {**HI, "max_output_tokens": 60, "text": {"format": fmt}}).json()
    assert json.loads(body["output"][0]["content"][0]["text"]) == {"city": "Paris"}
    assert body["text"] == {"format": fmt}


def test_stored_responses_can_be_retrieved_cancelled_and_deleted(app):
    body = post(app, "/v1/responses", HI).json()
    path = f"/v1/responses/{body['id']}"
    assert call(app, "GET", path).json() == body
    assert call(app, "GET", f"/responses/{body['id']}").json() == body
    assert post(app, f"{path}/cancel", None).json() == body
    assert call(app, "DELETE", path).json() == {"id": body["id"], "object": "response.deleted", "deleted": True}
    assert call(app, "GET", path).status_code == 404
    assert call(app, "DELETE", path).status_code == 404


def test_store_false_is_not_kept(app):
    body = post(app, "/v1/responses", {**HI, "store": False}).json()
    assert body["store"] is False
    r = call(app, "GET", f"/v1/responses/{body['id']}")
    assert (r.status_code, r.json()) == (404, {"error": {
        "message": f"Response with id '{body['id']}' not found.", "type": "not_found_error", "param": None,
        "code": None}})


def test_an_unknown_previous_response_is_a_404(app):
    r = post(app, "/v1/responses", {**HI, "previous_response_id": "resp_nope"})
    assert (r.status_code, r.json()) == (404, {"error": {
        "message": "Response with id 'resp_nope' not found.", "type": "not_found_error",
        "param": "previous_response_id", "code": "previous_response_not_found"}})
    assert post(app, "/v1/responses/resp_nope/cancel", None).status_code == 404


@pytest.mark.parametrize(("body", "message", "param"), [
    ({"tools": [{"type": "web_search"}]}, "tools: only function tools are served here, not 'web_search'", "tools"),
    ({"tool_choice": "sometimes"}, "tool_choice must be auto, none, required or a function", "tool_choice"),
    ({"input": []}, "input: give at least one input item (or a previous_response_id)", "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "this model takes text only; remove the image parts from messages", "messages"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema: Field required",
     "text.format.schema"),
])
def test_requests_the_server_cannot_serve_are_400s(app, body, message, param):
    r = post(app, "/v1/responses", {**HI, **body})
    assert (r.status_code, r.json()) == (400, {"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": None}})
