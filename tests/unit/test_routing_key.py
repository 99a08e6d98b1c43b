"""routing_request: the prompt text per dialect, token ids, and prefix stability."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.router.routing_key import routing_request

DIGEST = r"[0-9a-f]{12}"


def text(path, body):
    return routing_request(path, body, {}).text


def test_openai_chat_messages():
    body = {"model": "m", "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]}
    assert text("/v1/chat/completions", body) == "<system>Be terse.\n<user>Hi\n"
    assert text("/chat/completions", body) == "<system>Be terse.\n<user>Hi\n"


def test_openai_chat_tools_come_first_with_sorted_keys():
    body = {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert text("/v1/chat/completions", body) == (
        '<tools>[{"function":{"name":"f","parameters":{}},"type":"function"}]\n<user>Hi\n'
    )


def test_openai_chat_content_parts():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    other = {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}}
    parts = [{"type": "text", "text": "look "}, image, {"type": "text", "text": "!"}]
    body = {"messages": [{"role": "user", "content": parts}]}
    got = text("/v1/chat/completions", body)
    assert re.fullmatch(rf"<user>look \[image_url:{DIGEST}\]!\n", got)
    body["messages"][0]["content"][1] = other
    assert text("/v1/chat/completions", body) != got  # another image, another key


def test_openai_chat_tool_calls_and_results():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]}
    assert text("/v1/chat/completions", body) == (
        '<user>go\n<assistant>[call:{"function":{"arguments":"{}","name":"f"},"id":"c1","type":"function"}]\n<tool>42\n'
    )


@pytest.mark.parametrize("path", ["/v1/completions", "/completions", "/completion"])
@pytest.mark.parametrize(
    "prompt, expect, tokens",
    [
        ("Once upon", "Once upon", None),
        (["first", "second"], "first", None),
        ([1, 2, 23], "<tokens>1 2 23 ", [1, 2, 23]),
        ([[5, 6], [7]], "<tokens>5 6 ", [5, 6]),
        ([], "", None),
        (None, "", None),
    ],
)
def test_completion_prompts(path, prompt, expect, tokens):
    request = routing_request(path, {"prompt": prompt} if prompt is not None else {}, {})
    assert (request.text, request.token_ids) == (expect, tokens)


def test_llama_server_mixed_prompt():
    assert text("/completion", {"prompt": [12, " hello", 34]}) == "<tokens>12  hello34 "


def test_token_prompts_keep_token_boundaries():
    assert not text("/v1/completions", {"prompt": [1, 23]}).startswith(text("/v1/completions", {"prompt": [1, 2]}))


def test_anthropic_messages():
    body = {
        "system": "Be terse.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
        ],
    }
    assert text("/v1/messages", body) == "<system>Be terse.\n<user>Hi\n<assistant>Hello\n"
    body["system"] = [
        {"type": "text", "text": "Be "},
        {"type": "text", "text": "terse.", "cache_control": {"type": "ephemeral"}},
    ]
    assert text("/messages", body) == "<system>Be terse.\n<user>Hi\n<assistant>Hello\n"


def test_anthropic_tools_and_blocks_ignore_cache_control():
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}
    body = {"tools": [{"name": "f", "input_schema": {}}], "messages": [{"role": "assistant", "content": [use]}]}
    got = text("/v1/messages", body)
    assert re.fullmatch(rf'<tools>\[{{"input_schema":{{}},"name":"f"}}\]\n<assistant>\[tool_use:{DIGEST}\]\n', got)
    body["messages"][0]["content"][0] = {**use, "cache_control": {"type": "ephemeral"}}
    assert text("/v1/messages", body) == got


def test_ollama_chat_and_generate():
    chat = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi", "images": ["AAAA"]}]}
    assert re.fullmatch(rf"<system>S\n<user>Hi\[image:{DIGEST}\]\n", text("/api/chat", chat))
    assert text("/api/generate", {"system": "S", "prompt": "Why?"}) == "<system>S\nWhy?"
    assert text("/api/generate", {"prompt": "Why?"}) == "Why?"
    assert re.fullmatch(rf"\[image:{DIGEST}\]Why\?", text("/api/generate", {"prompt": "Why?", "images": ["AAAA"]}))


def test_responses_input_string_and_items():
    assert text("/v1/responses", {"instructions": "Be brief.", "input": "Hi"}) == "<system>Be brief.\n<user>Hi\n"
    body = {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Yo"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "42"},
        {"type": "reasoning", "summary": []},
    ]}
    assert re.fullmatch(
        rf"<user>Hi\n<assistant>Yo\n<function_call>f\(\{{\}}\)\n<function_call_output>42\n<reasoning>{DIGEST}\n",
        text("/responses", body),
    )


def test_embeddings_route_by_their_input():
    assert text("/v1/embeddings", {"input": "y"}) == "y"


@pytest.mark.parametrize("path", ["/infill", "/health", "/v1/models"])
def test_other_routes_have_no_text(path):
    assert text(path, {"prompt": "x", "input": "y", "messages": [{"role": "user", "content": "z"}]}) == ""


def test_odd_bodies_never_raise():
    assert text("/v1/chat/completions", []) == ""
    assert text("/v1/chat/completions", {"messages": "nope"}) == ""
    assert re.fullmatch(rf"<message>\[part:{DIGEST}\]\n", text("/v1/chat/completions", {"messages": [7]}))
    assert text("/v1/chat/completions", {"messages": [{"content": "x"}]}) == "<message>x\n"
    assert text("/v1/messages", {"system": 5, "messages": None}) == f"<system>[part:{_digest_of(5)}]\n"


def _digest_of(value) -> str:
    return re.search(DIGEST, text("/v1/chat/completions", {"messages": [value]})).group()


def test_path_query_and_trailing_slash():
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    request = routing_request("/v1/chat/completions/?stream=1", body, {})
    assert (request.path, request.text) == ("/v1/chat/completions/?stream=1", "<user>Hi\n")


def test_headers_are_lower_cased_and_body_kept():
    body = {"messages": []}
    request = routing_request("/v1/chat/completions", body, {"X-Worker-Id": "w1", "Authorization": "k"})
    assert request.headers == {"x-worker-id": "w1", "authorization": "k"}
    assert request.body is body
    assert request.token_ids is None


def test_tokenize_result_is_stored():
    seen = []

    def tokenize(path, body):
        seen.append((path, body))
        return [9, 8, 7]

    body = {"messages": [{"role": "user", "content": "Hi"}]}
    assert routing_request("/v1/chat/completions", body, {}, tokenize=tokenize).token_ids == [9, 8, 7]
    assert seen == [("/v1/chat/completions", body)]
    # a tokenizer that cannot render it: token-id prompts still carry their ids
    assert routing_request("/v1/completions", {"prompt": [4, 5]}, {}, tokenize=lambda p, b: None).token_ids == [4, 5]
    assert routing_request("/v1/completions", {"prompt": "x"}, {}, tokenize=lambda p, b: None).token_ids is None


# -- prefix stability ----------------------------------------------------------------

CONVERSATION = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello, how can I help?"},
    {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": "Sunny."},
]


def bodies(path, turns):
    if path == "/v1/messages":
        # clients move cache_control from turn to turn; the key must not see it
        system = [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}] if len(turns) % 2 else "S"
        return {"system": system, "messages": turns}
    if path == "/v1/responses":
        return {"instructions": "S", "input": turns}
    tools = [{"type": "function", "function": {"name": "w"}}]
    return {"tools": tools, "messages": [{"role": "system", "content": "S"}, *turns]}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat", "/v1/messages", "/v1/responses"])
def test_a_growing_conversation_keeps_its_prefix(path):
    texts = [text(path, bodies(path, CONVERSATION[:n])) for n in range(1, len(CONVERSATION) + 1)]
    for before, after in zip(texts, texts[1:]):
        assert after.startswith(before) and len(after) > len(before)


messages = st.lists(
    st.fixed_dictionaries({
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "content": st.one_of(
            st.text(max_size=8),
            st.lists(st.one_of(
                st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5)),
                st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, st.text(max_size=5)),
            ), max_size=3),
        ),
    }),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(turns=messages, path=st.sampled_from(["/v1/chat/completions", "/api/chat", "/v1/messages", "/v1/responses"]))
def test_any_conversation_is_prefix_stable(turns, path):
    texts = [text(path, bodies(path, turns[:n])) for n in range(len(turns) + 1)]
    for before, after in zip(texts, texts[1:]):
        assert after.startswith(before)
