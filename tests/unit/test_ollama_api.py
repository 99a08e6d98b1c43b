"""Ollama's API in process on the tiny model: NDJSON and single-object
answers, options, format, the info routes and errors in Ollama's envelope."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from inferd.api.ollama.chat import template_request
from inferd.api.ollama.protocol import Message, Options
from inferd.api.ollama.results import StreamedCalls
from inferd.api.ollama.sampling import max_tokens, sampling_params
from inferd.chat.template import ChatTemplate
from inferd.chat.tool_parsers import ToolCallDelta
from inferd.http.errors import BadRequest
from inferd.models.loader import load_model
from inferd.serving.state import ServerState
from served import client, served, small_config

# Shows in the prompt (and so in prompt_eval_count) what reached the template.
TEMPLATE = (
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    "{% if tools %}[tools={{ tools | length }}]{% endif %}"
    "|thinking={{ enable_thinking | default('unset') }}[assistant]"  # true unless a request says: it reads it
)
CTX = 128
GREEDY = {"temperature": 0}
FINAL_KEYS = {"model", "created_at", "done", "done_reason", "total_duration", "load_duration", "prompt_eval_count",
              "prompt_eval_duration", "eval_count", "eval_duration"}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture
def server(loaded):
    with served(loaded, small_config(ctx_size=CTX), template=ChatTemplate(TEMPLATE, None, None)) as server:
        yield server


def prompt_tokens(state: ServerState, text: str) -> int:
    return len(state.engine.tokenizer.encode(text))


def call(app, method: str, path: str, body: dict | None = None) -> httpx.Response:
    async def go():
        async with client(app) as c:
            return await c.request(method, path, json=body)

    return asyncio.run(go())


def ndjson(response: httpx.Response) -> list[dict]:
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.text.endswith("\n")
    return [json.loads(line) for line in response.text.splitlines()]


def chat_body(**extra) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **extra}


def check_final(final: dict) -> None:
    assert FINAL_KEYS <= set(final)
    assert final["done"] is True
    assert final["load_duration"] == 0
    for key in ("total_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(final[key], int) and final[key] >= 0
    # prompt and eval durations split the total (each rounded to a nanosecond)
    assert abs(final["total_duration"] - final["prompt_eval_duration"] - final["eval_duration"]) <= 1
    assert final["created_at"].endswith("Z")


# -- /api/chat ------------------------------------------------------------------


def test_chat_streams_ndjson_ending_with_the_counts(server):
    state, app = server.state, server.app
    lines = ndjson(call(app, "POST", "/api/chat", chat_body(options={**GREEDY, "num_predict": 5})))
    *parts, final = lines
    assert parts and all(p["done"] is False and p["model"] == "tiny" for p in parts)
    assert all(set(p) == {"model", "created_at", "message", "done"} for p in parts)
    assert all(p["message"]["role"] == "assistant" for p in parts)
    check_final(final)
    assert final["message"] == {"role": "assistant", "content": ""}
    assert final["prompt_eval_count"] == prompt_tokens(state, "[user]hi|thinking=True[assistant]")
    assert final["eval_count"] == 5
    assert final["done_reason"] == "length"

    whole = call(app, "POST", "/api/chat", chat_body(stream=False, options={**GREEDY, "num_predict": 5}))
    assert whole.headers["content-type"] == "application/json"
    body = whole.json()
    check_final(body)
    assert body["message"] == {"role": "assistant", "content": "".join(p["message"]["content"] for p in parts)}
    assert (body["prompt_eval_count"], body["eval_count"], body["done_reason"]) == (final["prompt_eval_count"], 5, "length")


def test_num_predict_minus_one_runs_until_the_context_is_full(server):
    state, app = server.state, server.app
    body = call(app, "POST", "/api/chat", chat_body(stream=False, options={**GREEDY, "num_predict": -1})).json()
    prompt = prompt_tokens(state, "[user]hi|thinking=True[assistant]")
    assert (body["prompt_eval_count"], body["eval_count"], body["done_reason"]) == (prompt, CTX - prompt, "length")


def test_num_ctx_smaller_than_the_servers_bounds_the_answer(server):
    state, app = server.state, server.app
    prompt = prompt_tokens(state, "[user]hi|thinking=True[assistant]")
    small = call(app, "POST", "/api/chat", chat_body(stream=False, options={**GREEDY, "num_ctx": prompt + 3})).json()
    assert (small["eval_count"], small["done_reason"]) == (3, "length")
    large = call(app, "POST", "/api/chat", chat_body(stream=False, options={**GREEDY, "num_ctx": 100_000, "num_predict": 4}))
    assert large.json()["eval_count"] == 4
    full = call(app, "POST", "/api/chat", chat_body(stream=False, options={"num_ctx": prompt}))
    assert full.status_code == 400
    assert full.json() == {"error": f"the prompt is {prompt} tokens, which leaves no room in num_ctx {prompt}"}


def test_think_and_tools_reach_the_template(server):
    state, app = server.state, server.app
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = call(app, "POST", "/api/chat", chat_body(stream=False, think=True, tools=tools,
                                                    options={**GREEDY, "num_predict": 1})).json()
    assert body["prompt_eval_count"] == prompt_tokens(state, "[user]hi[tools=1]|thinking=True[assistant]")


def test_template_request_carries_history_thinking_and_tool_calls():
    messages = [
        Message(role="user", content="weather?"),
        Message(role="assistant", content="", thinking="look it up",
                tool_calls=[{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]),
        Message(role="tool", content="cold", tool_name="weather"),
    ]
    req = template_request(messages, None, "high")
    assert req.chat_template_kwargs == {"enable_thinking": True}
    assert req.template_kwargs() == {"enable_thinking": True, "reasoning_effort": "high"}
    assistant, tool = req.messages[1], req.messages[2]
    assert assistant.reasoning_content == "look it up"
    assert [(c.id, c.function.name, c.function.arguments) for c in assistant.tool_calls] == [
        ("call_1_0", "weather", '{"city": "Oslo"}')]
    assert (tool.role, tool.name, tool.content) == ("tool", "weather", "cold")
    assert template_request(messages[:1], None, False).chat_template_kwargs == {"enable_thinking": False}
    assert template_request(messages[:1], None, None).chat_template_kwargs is None


def test_format_schema_and_json_constrain_the_output(server):
    app = server.app
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    body = call(app, "POST", "/api/chat", chat_body(stream=False, format=schema, options={**GREEDY, "num_predict": 20})).json()
    assert body["done_reason"] == "stop"
    assert json.loads(body["message"]["content"]) in ({"ok": True}, {"ok": False})
    # Random weights never close a free-form object; the grammar still makes it start as one.
    body = call(app, "POST", "/api/chat", chat_body(stream=False, format="json", options={**GREEDY, "num_predict": 3})).json()
    assert body["message"]["content"].startswith("{")
    bad = call(app, "POST", "/api/chat", chat_body(format="yaml"))
    assert bad.status_code == 400 and set(bad.json()) == {"error"}


def test_empty_messages_load_the_model_without_generating(server):
    app = server.app
    body = call(app, "POST", "/api/chat", {"model": "tiny:latest", "messages": []}).json()
    assert body["done"] is True and body["done_reason"] == "load"
    assert body["message"] == {"role": "assistant", "content": ""} and body["model"] == "tiny:latest"


def test_images_are_refused_with_a_clear_400(server):
    app = server.app
    message = {"role": "user", "content": "what is this?", "images": ["aGVsbG8="]}
    r = call(app, "POST", "/api/chat", {"model": "tiny", "messages": [message]})
    assert (r.status_code, r.json()) == (400, {"error": "this model takes text only; remove the images from the request"})
    r = call(app, "POST", "/api/generate", {"model": "tiny", "prompt": "x", "images": ["aGVsbG8="]})
    assert (r.status_code, r.json()) == (400, {"error": "this model takes text only; remove the images from the request"})


def test_an_unknown_model_is_a_404_naming_the_served_one(server):
    app = server.app
    server.state.served.strict = True  # --strict-model-names; without it the one model served answers
    r = call(app, "POST", "/api/chat", chat_body(model="llama3"))
    assert (r.status_code, r.json()) == (404, {"error": 'model "llama3" not found; this server serves "tiny"'})
    r = call(app, "POST", "/api/show", {"model": "llama3"})
    assert r.status_code == 404


def test_invalid_requests_use_ollamas_error_envelope(server):
    app = server.app
    r = call(app, "POST", "/api/generate", {"model": "tiny", "prompt": 3})
    assert (r.status_code, r.json()) == (400, {"error": "prompt: Input should be a valid string"})
    r = call(app, "POST", "/api/chat", chat_body(options={"num_predict": 0}))
    assert r.status_code == 400
    assert r.json() == {"error": "options.num_predict must be a positive count, or -1 to generate until the context is full"}


# -- /api/generate --------------------------------------------------------------


def test_generate_raw_sends_the_prompt_as_is_and_returns_context(server):
    state, app = server.state, server.app
    body = call(app, "POST", "/api/generate", {"model": "tiny", "prompt": "abc", "raw": True, "stream": False,
                                                "options": {**GREEDY, "num_predict": 4}}).json()
    check_final(body)
    prompt_ids = state.engine.tokenizer.encode("abc")
    assert body["prompt_eval_count"] == len(prompt_ids)
    assert body["eval_count"] == 4 and body["done_reason"] == "length"
    assert body["context"][:len(prompt_ids)] == prompt_ids and len(body["context"]) == len(prompt_ids) + 4
    assert state.engine.tokenizer.decode(body["context"][len(prompt_ids):]) == body["response"]


def test_generate_puts_system_before_the_prompt_through_the_template(server):
    state, app = server.state, server.app
    lines = ndjson(call(app, "POST", "/api/generate", {"model": "tiny", "prompt": "hi", "system": "be brief",
                                                       "options": {**GREEDY, "num_predict": 3}}))
    *parts, final = lines
    assert all(set(p) == {"model", "created_at", "response", "done"} and p["done"] is False for p in parts)
    check_final(final)
    assert final["response"] == ""
    assert final["prompt_eval_count"] == prompt_tokens(state, "[system]be brief[user]hi|thinking=True[assistant]")
    assert final["eval_count"] == 3
    assert len(final["context"]) == final["prompt_eval_count"] + 3


def test_generate_refuses_what_it_cannot_do(server):
    app = server.app
    r = call(app, "POST", "/api/generate", {"model": "tiny", "prompt": "def f(", "suffix": "return 1"})
    assert (r.status_code, r.json()) == (400, {"error": '"tiny" does not support insert (suffix)'})
    r = call(app, "POST", "/api/generate", {"model": "tiny", "prompt": "x", "template": "{{ .Prompt }}"})
    assert r.status_code == 400 and r.json()["error"].startswith("template overrides are not supported")
    r = call(app, "POST", "/api/generate", {"model": "tiny"})
    assert r.json()["done_reason"] == "load"


# -- info routes ----------------------------------------------------------------


def test_tags_ps_show_and_version(server, loaded):
    app = server.app
    details = {"parent_model": "", "format": "safetensors", "family": "gemma3_text", "families": ["gemma3_text"],
               "parameter_size": f"{sum(p.numel() for p in loaded.model.parameters()) / 1e3:.1f}K",
               "quantization_level": "F32"}
    model, *stored = call(app, "GET", "/api/tags").json()["models"]  # the served model, then the stored ones
    assert "gemma-3-270m:latest" in {m["name"] for m in stored}
    assert set(model) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert (model["name"], model["model"], model["details"]) == ("tiny", "tiny", details)
    assert model["size"] > 0 and len(model["digest"]) == 64

    [running] = call(app, "GET", "/api/ps").json()["models"]
    assert running == {**model, "expires_at": "9999-12-31T23:59:59Z", "size_vram": 0, "context_length": CTX}

    show = call(app, "POST", "/api/show", {"model": "tiny"}).json()
    assert set(show) == {"modelfile", "parameters", "template", "details", "model_info", "capabilities", "modified_at"}
    assert show["template"] == TEMPLATE and show["details"] == details
    assert show["capabilities"] == ["completion", "tools"]
    assert show["model_info"]["general.architecture"] == "gemma3_text"
    assert show["model_info"]["gemma3_text.context_length"] == CTX
    assert show["modelfile"].startswith(f"FROM {loaded.path}\n")
    assert call(app, "POST", "/api/show", {"name": "tiny:latest"}).status_code == 200

    assert call(app, "GET", "/api/version").json() == {"version": __import__("inferd").__version__}


def test_a_chat_model_without_pooling_does_not_embed(server):
    app = server.app
    for path, body in (("/api/embed", {"model": "tiny", "input": "x"}), ("/api/embeddings", {"model": "tiny", "prompt": "x"})):
        r = call(app, "POST", path, body)
        assert r.status_code == 400
        assert r.json()["error"].startswith("model 'tiny' cannot compute embeddings: serve one beside the chat model "
                                            "with --embedding-model")


# -- pure pieces ----------------------------------------------------------------


def test_options_become_sampling_params():
    options = Options(temperature=0.2, top_k=5, top_p=0.5, min_p=0.1, seed=7, stop=["END"], repeat_penalty=1.3,
                      presence_penalty=0.4, frequency_penalty=0.6)
    p = sampling_params(options, 9, ["<turn>"])
    assert (p.max_tokens, p.temperature, p.top_k, p.top_p, p.min_p, p.seed) == (9, 0.2, 5, 0.5, 0.1, 7)
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.3, 0.4, 0.6)
    assert p.stop == ["END", "<turn>"]
    defaults = sampling_params(Options(), None, [])
    assert (defaults.temperature, defaults.top_k, defaults.top_p, defaults.min_p) == (0.8, 40, 0.95, 0.05)


def test_max_tokens_from_num_predict_and_num_ctx():
    assert max_tokens(Options(), 50, 10, 100) == 50
    assert max_tokens(Options(num_predict=-1), 50, 10, 100) is None
    assert max_tokens(Options(num_predict=-2), 50, 10, 100) is None
    assert max_tokens(Options(num_predict=30, num_ctx=20), None, 10, 100) == 10
    assert max_tokens(Options(num_predict=5, num_ctx=20), None, 10, 100) == 5
    assert max_tokens(Options(num_ctx=500), None, 10, 100) is None
    with pytest.raises(BadRequest):
        max_tokens(Options(num_predict=0), None, 10, 100)


def test_streamed_tool_call_deltas_become_whole_calls():
    calls = StreamedCalls()
    calls.add([ToolCallDelta(index=0, id="c0", name="weather"), ToolCallDelta(index=0, arguments='{"city": ')])
    calls.add([ToolCallDelta(index=0, arguments='"Oslo"}'), ToolCallDelta(index=1, name="time", arguments="{}")])
    assert calls.take() == [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
                            {"function": {"name": "time", "arguments": {}}}]
    assert calls.take() == []


def test_a_prompt_longer_than_the_context_is_a_400_before_streaming(server):
    app = server.app
    r = call(app, "POST", "/api/generate", {"model": "tiny", "prompt": "x" * (CTX + 10), "raw": True})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert set(r.json()) == {"error"} and str(CTX) in r.json()["error"]


DEEP_JSON = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("body", [b'{"model": "tiny", "prompt": "\xff\xfe"}', DEEP_JSON], ids=["invalid-utf8", "deep"])
@pytest.mark.parametrize("path", ["/api/chat", "/api/generate", "/api/show"])
def test_an_unreadable_body_is_a_400_in_ollamas_envelope(server, path, body):
    async def go():
        async with server.client() as c:
            return await c.post(path, content=body, headers={"content-type": "application/json"})

    r = asyncio.run(go())
    assert r.status_code == 400
    assert list(r.json()) == ["error"] and "body" in r.json()["error"]
