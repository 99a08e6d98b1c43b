"""The bad inputs of issue 15 (items 1, 4 and 8) against a real `inferd serve`
and a real router in front of it: each is refused with the exact status, in
the envelope of the route's dialect, with a message that says what to change;
afterwards the server still answers a normal request."""

from __future__ import annotations

import json

import pytest
from router_process import RouterProcess
from server import ALIAS

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": ALIAS, "messages": MESSAGES, "max_tokens": 4}
DEEP = b"[" * 100_000 + b"]" * 100_000
NOT_UTF8 = b'{"model": "tiny", "prompt": "\xff\xfe"}'
SELF_REFERENCE = {"$ref": "#"}


def json_schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


# (id, path, body: a JSON value or raw bytes, status, the words the message must hold)
ROWS = [
    # item 1: a loop guard the engine cannot afford
    ("huge-loop-guard", "/v1/chat/completions", {**CHAT, "max_pattern_size": 10**12, "min_count": 2}, 400,
     ("max_pattern_size", "1024")),
    # item 4: template variables the server sets itself
    *((f"reserved-{name}-chat", "/v1/chat/completions", {**CHAT, "chat_template_kwargs": {name: 1}}, 400,
       ("chat_template_kwargs", repr(name), "remove it")) for name in ("messages", "tools", "add_generation_prompt")),
    *((f"reserved-{name}-apply-template", "/apply-template", {"messages": MESSAGES, "chat_template_kwargs": {name: 1}},
       400, ("chat_template_kwargs", repr(name), "remove it")) for name in ("messages", "tools", "add_generation_prompt")),
    ("extra-body-not-an-object", "/v1/chat/completions", {**CHAT, "extra_body": [1]}, 400,
     ("extra_body must be an object",)),
    ("extra-body-on-apply-template", "/apply-template", {"messages": MESSAGES, "extra_body": "x"}, 400,
     ("extra_body must be an object",)),
    # item 4: bodies no parser should choke on, on Ollama's routes
    *((f"not-utf8-{name}", f"/api/{name}", NOT_UTF8, 400, ("not valid UTF-8",)) for name in ("chat", "generate")),
    *((f"deep-json-{name}", f"/api/{name}", DEEP, 400, ("nested too deeply",)) for name in ("chat", "generate")),
    # item 4: grammars that can never produce output, in every dialect that takes one
    ("self-referring-schema-chat", "/v1/chat/completions",
     {**CHAT, "response_format": json_schema_format(SELF_REFERENCE)}, 400, ("JSON schema", "never produce")),
    ("self-referring-schema-responses", "/v1/responses",
     {"model": ALIAS, "input": "hi", "max_output_tokens": 4,
      "text": {"format": {"type": "json_schema", "name": "answer", "schema": SELF_REFERENCE}}}, 400,
     ("JSON schema", "never produce")),
    ("self-referring-schema-ollama", "/api/chat",
     {"model": ALIAS, "messages": MESSAGES, "stream": False, "format": SELF_REFERENCE}, 400,
     ("JSON schema", "never produce")),
    ("root-is-root-chat", "/v1/chat/completions", {**CHAT, "grammar": "root ::= root"}, 400,
     ("GBNF grammar", "never produce")),
    ("root-is-root-completion", "/completion", {"prompt": "hi", "n_predict": 4, "grammar": "root ::= root"}, 400,
     ("GBNF grammar", "never produce")),
    ("huge-regex-repeat", "/v1/chat/completions", {**CHAT, "regex": "a{1000000}"}, 400,
     ("1000000", "at most", "lower the count")),
    # item 8: a request that can never fit is a 400 with the limit, not a 503 to retry
    ("4000-prompts", "/v1/completions", {"model": ALIAS, "prompt": ["hi"] * 4000, "max_tokens": 1}, 400,
     ("prompts", "at most")),
]


def post(http, path: str, body):
    if isinstance(body, bytes):
        return http.post(path, content=body, headers={"content-type": "application/json"})
    return http.post(path, json=body)


def error_message(path: str, body: dict) -> str:
    """The message of an error body, checking it is in the envelope of `path`'s dialect."""
    if path.startswith("/api/"):
        assert set(body) == {"error"} and isinstance(body["error"], str)
        return body["error"]
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == "invalid_request_error"
        return body["error"]["message"]
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


@pytest.mark.parametrize("path, body, status, words", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_a_bad_input_is_refused_in_its_dialect_with_what_to_change(http, path, body, status, words):
    r = post(http, path, body)
    assert r.status_code == status, r.text[:500]
    message = error_message(path, r.json())
    for word in words:
        assert word in message, message


def test_after_every_bad_input_a_normal_request_still_answers(http):
    r = http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200, r.text[:500]
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


@pytest.fixture(scope="module")
def router(tiny_server, server_logs):
    router = RouterProcess(workers=[tiny_server.base_url], log_path=server_logs / "bad-inputs-router.log")
    router.start()
    yield router
    router.stop()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses", "/completion", "/api/chat"])
def test_the_router_refuses_deep_json_with_a_400_in_the_routes_dialect(router, path):
    with router.http() as http:
        r = post(http, path, DEEP)
    assert r.status_code == 400, r.text[:500]
    assert "nested too deeply" in error_message(path, json.loads(r.content))
