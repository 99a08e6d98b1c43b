"""POST /v1/chat/completions through the official OpenAI SDK, against a real
`inferd serve` process on the tiny random-weight model."""

from __future__ import annotations

import json
import uuid

import openai
import pytest

from server import ALIAS

HELLO = [{"role": "user", "content": "Hello"}]


def greedy(max_tokens: int = 8, **overrides) -> dict:
    """A greedy request that always runs to max_tokens."""
    request = dict(model=ALIAS, messages=HELLO, temperature=0, max_tokens=max_tokens, extra_body={"ignore_eos": True})
    request.update(overrides)
    return request


def sampled(seed: int, max_tokens: int = 24, **overrides) -> dict:
    """A seeded sampled request (reproducible, and more varied than greedy on this model)."""
    return greedy(max_tokens, temperature=1.5, seed=seed, **overrides)


def collect_stream(client, **request) -> list:
    with client.chat.completions.create(stream=True, **request) as stream:
        return list(stream)


# -- non-streaming -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "length_field", "n_tokens"),
    [
        ("served", "max_tokens", 1),
        ("served", "max_tokens", 13),
        (ALIAS, "max_tokens", 32),
        (ALIAS, "max_completion_tokens", 5),
    ],
)
def test_greedy_request_generates_exactly_the_tokens_asked_for(client, tiny_server, model, length_field, n_tokens):
    model = tiny_server.model_name if model == "served" else model
    request = greedy(model=model)
    del request["max_tokens"]
    request[length_field] = n_tokens
    r = client.chat.completions.create(**request)

    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model  # the name the client asked for, alias included
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "length"
    assert choice.logprobs is None
    assert isinstance(choice.message.content, str) and choice.message.content
    assert r.usage.completion_tokens == n_tokens
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_served_name_and_alias_run_the_same_model(client, tiny_server):
    by_name = client.chat.completions.create(**greedy(12, model=tiny_server.model_name))
    by_alias = client.chat.completions.create(**greedy(12, model=ALIAS))
    assert by_alias.choices[0].message.content == by_name.choices[0].message.content
    assert by_alias.usage.prompt_tokens == by_name.usage.prompt_tokens


def test_max_completion_tokens_wins_over_max_tokens(client):
    r = client.chat.completions.create(**greedy(9, max_completion_tokens=4))
    assert r.usage.completion_tokens == 4
    assert r.choices[0].finish_reason == "length"


def test_the_same_greedy_request_twice_repeats_its_text_and_reuses_the_prompt_cache(client):
    # A fresh conversation, so only a template prefix can be cached before the first request.
    messages = [{"role": "user", "content": f"Say something about {uuid.uuid4().hex}, please."}]
    first = client.chat.completions.create(**greedy(10, messages=messages))
    second = client.chat.completions.create(**greedy(10, messages=messages))

    assert second.choices[0].message.content == first.choices[0].message.content
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    cached_first = first.usage.prompt_tokens_details.cached_tokens
    cached_second = second.usage.prompt_tokens_details.cached_tokens
    assert cached_second > 0
    assert cached_second > cached_first
    assert cached_second <= second.usage.prompt_tokens


def test_n_choices_with_a_seed_are_distinct_and_reproducible(client):
    request = sampled(seed=7, max_tokens=12, n=3)
    first = client.chat.completions.create(**request)
    second = client.chat.completions.create(**request)

    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.finish_reason for c in first.choices] == ["length"] * 3
    assert first.usage.completion_tokens == 3 * 12
    assert first.usage.total_tokens == first.usage.prompt_tokens + 36
    texts = [c.message.content for c in first.choices]
    assert len(set(texts)) > 1, f"each choice should sample with its own seed, got {texts}"
    assert [c.message.content for c in second.choices] == texts


def test_list_of_text_parts_is_the_same_as_the_parts_joined_by_newlines(client):
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]
    as_parts = client.chat.completions.create(**greedy(10, messages=[{"role": "user", "content": parts}]))
    as_text = client.chat.completions.create(**greedy(10, messages=[{"role": "user", "content": "Hello\nthere"}]))
    assert as_parts.usage.prompt_tokens == as_text.usage.prompt_tokens
    assert as_parts.choices[0].message.content == as_text.choices[0].message.content


def test_system_and_multi_turn_messages_are_accepted(client, http):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Again"},
    ]
    r = client.chat.completions.create(**greedy(6, messages=messages))
    assert r.usage.completion_tokens == 6
    prompt = http.post("/apply-template", json={"messages": messages}).json()["prompt"]
    assert prompt == "<bos>Be brief.\n\nUser: Hello\nAssistant: Hi.\nUser: Again\nAssistant:"
    tokens = http.post("/tokenize", json={"content": prompt, "add_special": True}).json()["tokens"]
    assert r.usage.prompt_tokens == len(tokens)


def test_an_image_part_is_refused_for_a_text_model(client):
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**greedy(4, messages=[{"role": "user", "content": content}]))
    assert err.value.status_code == 400
    assert err.value.param == "messages"
    assert "text only" in err.value.body["message"]


# -- stop strings ------------------------------------------------------------------


def _stop_case(client) -> tuple[dict, str, str]:
    """A seeded request, its full text, and a two-character stop string that first
    occurs mid-text after a clean (ASCII) prefix. Searches a few seeds for one."""
    for seed in range(1, 16):
        request = sampled(seed)
        text = client.chat.completions.create(**request).choices[0].message.content
        for k in range(2, len(text) - 1):
            stop = text[k - 1:k + 1]
            if text.find(stop) == k - 1 and stop.isascii() and stop.isprintable() and text[:k + 1].isascii():
                return request, text, stop
    pytest.fail("no seed gave a text with a usable stop string")


@pytest.mark.parametrize("form", ["string", "list"])
def test_a_stop_string_ends_the_text_before_it(client, form):
    request, text, stop = _stop_case(client)
    expected = text[:text.find(stop)]
    assert expected  # the stop lands mid-text, not at the start
    stop_field = stop if form == "string" else ["\x00never", stop]

    r = client.chat.completions.create(**request, stop=stop_field)
    assert r.choices[0].message.content == expected
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < request["max_tokens"]

    chunks = collect_stream(client, **request, stop=stop_field)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_a_stop_string_that_never_occurs_changes_nothing(client):
    request, text, _ = _stop_case(client)
    r = client.chat.completions.create(**request, stop=["\x00never"])
    assert r.choices[0].message.content == text
    assert r.choices[0].finish_reason == "length"


# -- logprobs ----------------------------------------------------------------------


@pytest.mark.parametrize("top", [0, 3, 20])
def test_logprobs_have_one_entry_per_token_and_top_alternatives(client, top):
    n_tokens = 6
    r = client.chat.completions.create(**greedy(n_tokens, logprobs=True, top_logprobs=top))
    content = r.choices[0].logprobs.content
    assert len(content) == n_tokens
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for entry in content:
        assert entry.logprob <= 0.0
        assert entry.bytes == list(entry.token.encode())
        assert len(entry.top_logprobs) == top
        alternatives = [t.logprob for t in entry.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True)
        for alt in entry.top_logprobs:
            assert alt.bytes == list(alt.token.encode())
        if top:  # greedy: the chosen token is the most likely one
            assert entry.token == entry.top_logprobs[0].token
            assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)


def test_streamed_logprobs_match_the_non_streamed_ones(client):
    request = greedy(5, logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**request).choices[0].logprobs.content
    chunks = collect_stream(client, **request)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in whole]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole])
    assert [[t.token for t in e.top_logprobs] for e in streamed] == [[t.token for t in e.top_logprobs] for e in whole]


# -- streaming ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [greedy(16), sampled(seed=3, max_tokens=16), sampled(seed=5, max_tokens=10, n=2)],
    ids=["greedy", "seeded", "seeded-n2"],
)
def test_a_stream_carries_the_same_choices_as_the_whole_response(client, request_):
    whole = client.chat.completions.create(**request_)
    chunks = collect_stream(client, **request_, stream_options={"include_usage": True})
    n = request_.get("n", 1)

    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.model for c in chunks} == {ALIAS}

    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == whole.usage.completion_tokens == n * request_["max_tokens"]
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in body)
    assert all(len(c.choices) == 1 for c in body)

    for i in range(n):
        mine = [c.choices[0] for c in body if c.choices[0].index == i]
        assert mine[0].delta.role == "assistant"
        assert "".join(ch.delta.content or "" for ch in mine) == whole.choices[i].message.content
        finishes = [ch.finish_reason for ch in mine]
        assert finishes[-1] == "length"
        assert finishes.count(None) == len(finishes) - 1, "exactly one finish_reason, on the choice's last chunk"


def test_a_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = collect_stream(client, **greedy(4))
    assert all(c.usage is None for c in chunks)
    assert all(len(c.choices) == 1 for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_the_raw_sse_stream_has_openais_wire_shape(http):
    body = {"model": ALIAS, "messages": HELLO, "max_tokens": 3, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    assert events.count("data: [DONE]") == 1
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    for chunk in chunks[:-1]:
        # OpenAI's chunk schema requires these keys on every choice, finish_reason as null until the end.
        for choice in chunk["choices"]:
            assert {"index", "delta", "finish_reason"} <= set(choice), choice
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


# -- model names -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_unknown_model_is_404_naming_the_served_model(client, tiny_server, stream):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(**greedy(4, model="gpt-5-ultra"), stream=stream)
    e = err.value
    assert e.status_code == 404
    assert e.type == "not_found_error"
    assert e.code == "model_not_found"
    assert e.param == "model"
    assert "'gpt-5-ultra'" in e.body["message"]
    assert repr(tiny_server.model_name) in e.body["message"]
    assert repr(ALIAS) in e.body["message"]


def test_no_model_field_means_the_served_model(http, tiny_server):
    r = http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == tiny_server.model_name


def test_the_model_list_names_the_model_by_its_alias(client, tiny_server):
    models = client.models.list()
    assert tiny_server.model_name == ALIAS  # --alias renames the served model, as in llama-server
    assert [m.id for m in models.data if m.loaded] == [ALIAS]  # stored ones follow
    assert {m.object for m in models.data} == {"model"}


def test_the_bundled_model_answers_a_question(bundled_server):
    with bundled_server.openai() as sdk:
        r = sdk.chat.completions.create(
            model=bundled_server.model_name, temperature=0, max_tokens=16,
            messages=[{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        )
    assert "Paris" in r.choices[0].message.content
    assert r.usage.completion_tokens <= 16
