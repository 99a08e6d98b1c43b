"""POST /v1/messages through the official Anthropic SDK, against a real
`inferd serve` process on the tiny random-weight model."""

from __future__ import annotations

import anthropic
import pytest

from server import ALIAS

HELLO = [{"role": "user", "content": "Hello"}]
# This SDK version no longer types temperature; the server still takes it.
GREEDY = {"temperature": 0}
STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}


@pytest.fixture(scope="module")
def sdk(tiny_server):
    # The SDK appends /v1/messages to the server's root.
    with anthropic.Anthropic(base_url=tiny_server.base_url, api_key="unused", max_retries=0, timeout=60.0) as c:
        yield c


@pytest.fixture(scope="module")
def chat_answer(client):
    """The same greedy request on the OpenAI route: both dialects share one path."""
    return client.chat.completions.create(model=ALIAS, messages=HELLO, temperature=0, max_tokens=6)


def test_messages_create_answers_as_the_chat_route_does(sdk, chat_answer):
    message = sdk.messages.create(model=ALIAS, messages=HELLO, max_tokens=6, extra_body=GREEDY)
    choice = chat_answer.choices[0]
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == ALIAS
    assert [(b.type, b.text) for b in message.content] == [("text", choice.message.content)]
    assert (message.stop_reason, message.stop_sequence) == (STOP_REASONS[choice.finish_reason], None)
    assert message.usage.output_tokens == chat_answer.usage.completion_tokens
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == chat_answer.usage.prompt_tokens


def test_a_raw_stream_keeps_anthropics_event_order(sdk, chat_answer):
    with sdk.messages.create(model=ALIAS, messages=HELLO, max_tokens=6, extra_body=GREEDY, stream=True) as stream:
        events = list(stream)
    names = [e.type for e in events]
    deltas = names.count("content_block_delta")
    assert deltas >= 1
    # The SDK drops ping events; the wire test below sees them.
    assert names == ["message_start", "content_block_start", *["content_block_delta"] * deltas,
                     "content_block_stop", "message_delta", "message_stop"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == chat_answer.choices[0].message.content
    assert events[-2].delta.stop_reason == STOP_REASONS[chat_answer.choices[0].finish_reason]


def test_the_wire_names_every_event_and_pings_after_the_first_block(http):
    body = {"model": ALIAS, "messages": HELLO, "max_tokens": 6, "stream": True, **GREEDY}
    r = http.post("/v1/messages", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    names = [line.removeprefix("event: ") for line in r.text.splitlines() if line.startswith("event: ")]
    deltas = names.count("content_block_delta")
    assert names == ["message_start", "content_block_start", "ping", *["content_block_delta"] * deltas,
                     "content_block_stop", "message_delta", "message_stop"]


def test_messages_stream_accumulates_the_same_message(sdk, chat_answer):
    with sdk.messages.stream(model=ALIAS, messages=HELLO, max_tokens=6, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == chat_answer.choices[0].message.content
    assert [(b.type, b.text) for b in final.content] == [("text", text)]
    assert final.usage.output_tokens == chat_answer.usage.completion_tokens


def test_count_tokens_matches_the_chat_prompt(sdk, chat_answer):
    assert sdk.messages.count_tokens(model=ALIAS, messages=HELLO).input_tokens == chat_answer.usage.prompt_tokens


def test_errors_reach_the_sdk_as_its_own_exception_types(sdk):
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(model="claude-not-here", messages=HELLO, max_tokens=4)
    assert missing.value.status_code == 404
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        sdk.messages.create(model=ALIAS, messages=HELLO, max_tokens=4,
                            thinking={"type": "enabled", "budget_tokens": 4})
    assert bad.value.body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "thinking.budget_tokens (4) must be less than max_tokens (4)"}}
