"""The chat request's template variables: what a client may set, and a clear
400 for what it may not (never a 500 from inside the render)."""

from __future__ import annotations

import pytest

from inferd.http.errors import BadRequest
from inferd.serving.chat_request import ChatCompletionRequest

MESSAGES = [{"role": "user", "content": "hi"}]


def request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=MESSAGES, **fields)


def test_template_variables_merge_extra_body_then_top_level_then_reasoning_effort():
    req = request(extra_body={"chat_template_kwargs": {"a": 1, "b": 1}}, chat_template_kwargs={"b": 2},
                  reasoning_effort="low")
    assert req.template_kwargs() == {"a": 1, "b": 2, "reasoning_effort": "low"}


@pytest.mark.parametrize("name", ["messages", "tools", "add_generation_prompt"])
def test_a_variable_the_server_sets_itself_is_refused_naming_it(name):
    with pytest.raises(ValueError, match=f"chat_template_kwargs may not set {name!r}"):
        request(chat_template_kwargs={name: []})
    with pytest.raises(BadRequest, match=f"chat_template_kwargs may not set {name!r}") as caught:
        request(extra_body={"chat_template_kwargs": {name: []}}).template_kwargs()
    assert caught.value.param == "extra_body.chat_template_kwargs"


@pytest.mark.parametrize("extra_body", ["text", 3, ["a"]])
def test_extra_body_must_be_an_object(extra_body):
    with pytest.raises(BadRequest, match="extra_body must be an object") as caught:
        request(extra_body=extra_body).template_kwargs()
    assert caught.value.param == "extra_body"


def test_nested_chat_template_kwargs_must_be_an_object():
    with pytest.raises(BadRequest, match="extra_body.chat_template_kwargs must be an object"):
        request(extra_body={"chat_template_kwargs": "x"}).template_kwargs()
