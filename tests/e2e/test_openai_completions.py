"""POST /v1/completions through the official OpenAI SDK, against a real
`inferd serve` process on the tiny random-weight model."""

from __future__ import annotations

import json

import openai
import pytest

from server import ALIAS

BOS = 2  # the tiny model's byte tokenizer (tests/conftest.py): <bos> is 2,


def byte_ids(text: str) -> list[int]:
    """...and byte b is token 3 + b; text prompts get <bos> prepended."""
    return [BOS] + [3 + b for b in text.encode()]


def greedy(prompt, max_tokens: int = 8, **overrides) -> dict:
    request = dict(model=ALIAS, prompt=prompt, temperature=0, max_tokens=max_tokens, extra_body={"ignore_eos": True})
    request.update(overrides)
    return request


def test_a_string_prompt(client):
    r = client.completions.create(**greedy("Hello", 11))
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.model == ALIAS
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.finish_reason == "length"
    assert choice.logprobs is None
    assert choice.text
    assert r.usage.prompt_tokens == len(byte_ids("Hello"))
    assert r.usage.completion_tokens == 11
    assert r.usage.total_tokens == r.usage.prompt_tokens + 11


def test_a_token_id_prompt_is_the_same_as_its_text(client):
    as_text = client.completions.create(**greedy("Hello", 9))
    as_ids = client.completions.create(**greedy(byte_ids("Hello"), 9))
    assert as_ids.choices[0].text == as_text.choices[0].text
    assert as_ids.usage.prompt_tokens == as_text.usage.prompt_tokens == len(byte_ids("Hello"))


@pytest.mark.parametrize(
    ("prompts", "n"),
    [
        (["Hello", "abc"], 1),
        (["Hello", "abc"], 2),
        ([byte_ids("Hello"), byte_ids("abc"), byte_ids("xyz!")], 1),
    ],
    ids=["texts", "texts-n2", "token-id-lists"],
)
def test_a_list_of_prompts_gives_choices_in_prompt_order(client, prompts, n):
    singles = [client.completions.create(**greedy(p, 7)) for p in prompts]
    r = client.completions.create(**greedy(prompts, 7, n=n))

    assert [c.index for c in r.choices] == list(range(len(prompts) * n))
    for c in r.choices:
        assert c.text == singles[c.index // n].choices[0].text
        assert c.finish_reason == "length"
    # Each prompt counts once however many choices it has.
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert r.usage.completion_tokens == 7 * len(prompts) * n
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_echo_prepends_the_prompt(client):
    plain = client.completions.create(**greedy("Once upon a time", 6))
    echoed = client.completions.create(**greedy("Once upon a time", 6, echo=True))
    assert echoed.choices[0].text == "Once upon a time" + plain.choices[0].text
    assert echoed.usage.completion_tokens == 6


def test_echo_of_a_token_id_prompt_is_its_text(client):
    r = client.completions.create(**greedy(byte_ids("abc"), 3, echo=True))
    plain = client.completions.create(**greedy("abc", 3))
    assert r.choices[0].text == "<bos>abc" + plain.choices[0].text


@pytest.mark.parametrize("k", [1, 3])
def test_logprobs_shape(client, k):
    n_tokens = 6
    r = client.completions.create(**greedy("Hello", n_tokens, logprobs=k))
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n_tokens
    assert "".join(lp.tokens) == r.choices[0].text
    offsets, at = [], 0
    for token in lp.tokens:
        offsets.append(at)
        at += len(token)
    assert lp.text_offset == offsets
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0.0
        # Up to k alternatives: distinct token ids may decode to the same piece.
        assert 1 <= len(top) <= k
        # Greedy: the chosen token is the most likely alternative.
        assert top[token] == pytest.approx(logprob)
        assert max(top.values()) == pytest.approx(logprob)


def test_no_logprobs_unless_asked(client):
    r = client.completions.create(**greedy("Hello", 3))
    assert r.choices[0].logprobs is None


@pytest.mark.parametrize(
    "request_",
    [
        greedy("Hello", 12),
        greedy(["Hello", "abc"], 5, n=2),
        greedy("Hello", 4, echo=True),
        greedy("Hello", 4, temperature=1.5, seed=9),
    ],
    ids=["one", "two-prompts-n2", "echo", "seeded"],
)
def test_a_stream_carries_the_same_choices_as_the_whole_response(client, request_):
    whole = client.completions.create(**request_)
    with client.completions.create(**request_, stream=True, stream_options={"include_usage": True}) as stream:
        chunks = list(stream)

    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("cmpl-")
    *body, last = chunks
    assert last.choices == []
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in body)
    for choice in whole.choices:
        mine = [c.choices[0] for c in body if c.choices[0].index == choice.index]
        assert "".join(m.text for m in mine) == choice.text
        finishes = [m.finish_reason for m in mine]
        assert finishes[-1] == "length"
        assert finishes.count(None) == len(finishes) - 1, "exactly one finish_reason, on the choice's last chunk"


def test_a_stop_string_ends_the_completion(client):
    text = client.completions.create(**greedy("Hello", 6)).choices[0].text
    stop = text[1:3]
    r = client.completions.create(**greedy("Hello", 6, stop=[stop]))
    assert r.choices[0].text == text[:text.find(stop)]
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("overrides", "param", "words"),
    [
        ({"echo": True, "logprobs": 2}, "echo", "echo together with logprobs"),
        ({"suffix": "end"}, "suffix", "suffix is not supported"),
        ({"prompt": []}, "prompt", "prompt must not be an empty list"),
        ({"prompt": [BOS, 999]}, "prompt", "token id 999 is outside the vocabulary [0, 272)"),
    ],
    ids=["echo+logprobs", "suffix", "empty-list", "token-out-of-vocab"],
)
def test_unsupported_combinations_are_400(client, overrides, param, words):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(**{**greedy("Hello", 3), **overrides})
    assert err.value.type == "invalid_request_error"
    assert err.value.param == param
    assert words in err.value.body["message"]


def test_the_raw_sse_stream_has_openais_wire_shape(http):
    body = {"model": ALIAS, "prompt": "Hello", "max_tokens": 3, "temperature": 0, "ignore_eos": True, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    assert chunks and all(c["object"] == "text_completion" for c in chunks)
    for chunk in chunks:
        # OpenAI's completion choice schema requires these keys, finish_reason as null until the end.
        for choice in chunk["choices"]:
            assert {"index", "text", "logprobs", "finish_reason"} <= set(choice), choice
