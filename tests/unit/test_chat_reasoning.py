"""reasoning_content on the chat route: a tiny model whose vocabulary has
<think> tokens, a template that opens thinking, and a budget that closes it."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from tokenizers import Tokenizer as InnerTokenizer

from inferd.chat.template import ChatTemplate
from inferd.models.loader import load_model
from served import client, served

A = 3 + ord("a")
END_THINK = 260


@pytest.fixture(scope="module")
def app(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-reasoning") / "model"
    shutil.copytree(tiny_model_dir, folder)
    inner = InnerTokenizer.from_file(str(folder / "tokenizer.json"))
    inner.add_special_tokens(["<think>", "</think>"])
    inner.save(str(folder / "tokenizer.json"))
    loaded = load_model(str(folder), dtype="float32")
    # Like reasoning models' templates with thinking on: the prompt opens <think>.
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}<think>\n", None, None)
    with served(loaded, template=template) as server:
        yield server.app


REQUEST = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 6, "temperature": 0,
           "logit_bias": {str(A): 100, str(END_THINK): -100}, "thinking_budget_tokens": 3}


def post(app, body):
    async def go():
        async with client(app) as c:
            return await c.post("/v1/chat/completions", json=body)

    return asyncio.run(go())


def test_reasoning_is_split_from_content_and_the_budget_closes_it(app):
    r = post(app, REQUEST).json()
    message = r["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("aaa", "aa")
    assert r["usage"]["completion_tokens"] == 6  # 3 reasoning + </think> + 2 content


def test_streamed_reasoning_matches(app):
    r = post(app, {**REQUEST, "stream": True})
    reasoning, content = "", ""
    for line in r.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                reasoning += choice["delta"].get("reasoning_content") or ""
                content += choice["delta"].get("content") or ""
    assert (reasoning, content) == ("aaa", "aa")


def test_budget_aliases_first_wins_and_zero_closes_at_once(app):
    body = {**REQUEST, "thinking_budget_tokens": None, "thinking_token_budget": 0, "thinking_budget": 5}
    message = post(app, body).json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (None, "aaaaa")


def test_budget_above_max_tokens_is_a_400(app):
    r = post(app, {**REQUEST, "thinking_budget_tokens": 50})
    assert r.status_code == 400 and "thinking_budget" in r.json()["error"]["message"]
