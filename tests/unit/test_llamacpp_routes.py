"""llama-server's native routes, in process on the tiny model."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer as InnerTokenizer

from inferd.models.loader import load_model
from inferd.serving.chat_prompt import render_chat_prompt
from inferd.serving.chat_request import ChatCompletionRequest
from polling import async_wait_for
from served import client, served, small_config

CTX = 128
PARALLEL = 2
BOS, EOS = 2, 1
GREEDY = {"temperature": 0, "ignore_eos": True}


def byte_id(char: str) -> int:
    """The tiny tokenizer spells each byte b as token 3 + b."""
    return 3 + ord(char)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture(scope="module")
def server(loaded):
    with served(loaded, small_config(ctx_size=CTX, parallel=PARALLEL)) as server:
        yield server


@pytest.fixture(scope="module")
def app(server):
    return server.app


@pytest.fixture(scope="module")
def fim_app(tiny_model_dir, tmp_path_factory):
    """The tiny model with a tokenizer that has Qwen-style FIM markers (ids 259-261)."""
    folder = tmp_path_factory.mktemp("tiny-fim") / "model"
    shutil.copytree(tiny_model_dir, folder)
    inner = InnerTokenizer.from_file(str(folder / "tokenizer.json"))
    inner.add_special_tokens(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])
    inner.save(str(folder / "tokenizer.json"))
    with served(load_model(str(folder), dtype="float32"), small_config(ctx_size=CTX, parallel=PARALLEL)) as server:
        yield server.app


def run(app, steps):
    """Run `steps(client)` against the app in a fresh event loop."""

    async def main():
        async with client(app) as c:
            return await steps(c)

    return asyncio.run(main())


def post(app, path, body, headers=None):
    return run(app, lambda c: c.post(path, json=body, headers=headers))


def get(app, path):
    return run(app, lambda c: c.get(path))


def sse_events(text: str) -> list[dict]:
    assert not text.rstrip().endswith("[DONE]")  # the native stream has no [DONE] marker
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


def settings(**overrides) -> dict:
    base = {
        "n_predict": -1, "seed": 4294967295, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
        "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "stop": [], "max_tokens": -1,
        "ignore_eos": False, "stream": False, "n_probs": 0, "logit_bias": [], "cache_prompt": True,
    }
    return base | overrides


TIMING_KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
               "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}


# -- /completion ---------------------------------------------------------


def test_completion_reports_every_field(app):
    r = post(app, "/completion", {"prompt": "abc", "n_predict": 6, "cache_prompt": False, "return_tokens": True,
                                  "id_slot": 1, **GREEDY})
    assert r.status_code == 200
    body = r.json()
    timings = body.pop("timings")
    tokens = body["tokens"]
    assert len(tokens) == 6
    assert body == {
        "index": 0, "content": body["content"], "tokens": tokens, "stop": True, "model": "tiny",
        "generation_settings": settings(n_predict=6, max_tokens=6, temperature=0.0, ignore_eos=True, cache_prompt=False),
        "prompt": "<bos>abc", "has_new_line": "\n" in body["content"], "tokens_predicted": 6, "tokens_evaluated": 4,
        "truncated": False, "stop_type": "limit", "stopping_word": "", "tokens_cached": 0,
    }
    assert set(timings) == TIMING_KEYS
    assert (timings["cache_n"], timings["prompt_n"], timings["predicted_n"]) == (0, 4, 6)
    assert all(v >= 0 for v in timings.values())
    detok = post(app, "/detokenize", {"tokens": tokens}).json()
    assert body["content"] == detok["content"]


def test_completion_text_matches_the_openai_route(app):
    native = post(app, "/completion", {"prompt": "Once upon", "n_predict": 8, **GREEDY}).json()
    openai = post(app, "/v1/completions", {"prompt": "Once upon", "max_tokens": 8, **GREEDY}).json()
    assert native["content"] == openai["choices"][0]["text"]


def test_tokens_are_left_out_unless_asked_for(app):
    body = post(app, "/completion", {"prompt": "abc", "n_predict": 2, **GREEDY}).json()
    assert body["tokens"] == []


def test_prompt_shapes(app):
    def evaluated(prompt):
        body = post(app, "/completion", {"prompt": prompt, "n_predict": 1, **GREEDY}).json()
        return body["prompt"], body["tokens_evaluated"]

    assert evaluated([BOS, byte_id("a"), byte_id("b")]) == ("<bos>ab", 3)
    assert evaluated(["ab", byte_id("c")]) == ("<bos>abc", 4)  # starts with text: BOS added
    assert evaluated([byte_id("a"), "bc"]) == ("abc", 3)  # starts with an id: no BOS
    assert evaluated("") == ("<bos>", 1)


def test_several_prompts_answer_a_list(app):
    bodies = post(app, "/completion", {"prompt": ["ab", [BOS, byte_id("x")]], "n_predict": 2, **GREEDY}).json()
    assert [(b["index"], b["prompt"], b["tokens_predicted"]) for b in bodies] == [(0, "<bos>ab", 2), (1, "<bos>x", 2)]


def test_cache_prompt_reuses_whole_blocks(app):
    body = {"prompt": "cache me, please", "n_predict": 2, **GREEDY}  # 17 tokens with BOS
    first = post(app, "/completion", body).json()
    second = post(app, "/completion", body).json()
    cold = post(app, "/completion", body | {"cache_prompt": False}).json()
    assert first["tokens_cached"] == 0
    # 4 whole blocks of 4; the last prompt token is always computed afresh.
    assert second["tokens_cached"] == 16
    assert (second["timings"]["cache_n"], second["timings"]["prompt_n"]) == (16, 1)
    assert cold["tokens_cached"] == 0


def test_n_predict_minus_one_runs_until_the_context_is_full(app):
    body = post(app, "/completion", {"prompt": "abc", "n_predict": -1, **GREEDY}).json()
    assert (body["tokens_predicted"], body["stop_type"], body["truncated"]) == (CTX - 4, "limit", True)
    assert body["generation_settings"]["n_predict"] == -1


def test_max_tokens_stands_in_for_n_predict(app):
    body = post(app, "/completion", {"prompt": "abc", "max_tokens": 3, **GREEDY}).json()
    assert body["tokens_predicted"] == 3


def test_stop_word_ends_the_text_before_it(app):
    text = post(app, "/completion", {"prompt": "stop here", "n_predict": 6, **GREEDY}).json()["content"]
    stop = text[1:3]
    body = post(app, "/completion", {"prompt": "stop here", "n_predict": 6, "stop": [stop], **GREEDY}).json()
    assert (body["content"], body["stop_type"], body["stopping_word"]) == (text[:text.index(stop)], "word", stop)
    assert body["generation_settings"]["stop"] == [stop]


def test_eos_stop_is_counted_but_not_shown(app):
    body = post(app, "/completion", {"prompt": "abc", "n_predict": 5, "temperature": 0, "return_tokens": True,
                                     "logit_bias": {str(EOS): 100}}).json()
    assert (body["content"], body["tokens"], body["stop_type"], body["tokens_predicted"]) == ("", [], "eos", 1)
    assert body["generation_settings"]["logit_bias"] == [{"token": EOS, "bias": 100.0}]


def test_logit_bias_false_bans_a_token(app):
    request = {"prompt": "abc", "n_predict": 4, "return_tokens": True, **GREEDY}
    favourite = post(app, "/completion", request).json()["tokens"][0]
    banned = post(app, "/completion", request | {"logit_bias": [[favourite, False]]}).json()
    assert favourite not in banned["tokens"]
    assert banned["generation_settings"]["logit_bias"] == [{"token": favourite, "bias": False}]
    # Text stands for each of its tokens.
    by_text = post(app, "/completion", request | {"logit_bias": [["ab", False]]}).json()
    assert by_text["generation_settings"]["logit_bias"] == [
        {"token": byte_id("a"), "bias": False}, {"token": byte_id("b"), "bias": False},
    ]


def test_n_probs_gives_completion_probabilities(app):
    body = post(app, "/completion", {"prompt": "abc", "n_predict": 3, "n_probs": 2, "return_tokens": True,
                                     **GREEDY}).json()
    probs = body["completion_probabilities"]
    assert [p["id"] for p in probs] == body["tokens"]
    for p in probs:
        assert set(p) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert len(p["top_logprobs"]) == 2
        best, second = p["top_logprobs"]
        assert best["id"] == p["id"] and best["logprob"] == p["logprob"] >= second["logprob"]
        assert bytes(p["bytes"]).decode() == p["token"]


def test_seed_makes_sampling_repeatable(app):
    request = {"prompt": "abc", "n_predict": 8, "temperature": 1.5, "top_k": 0, "seed": 7, "return_tokens": True}
    first, second = (post(app, "/completion", request).json() for _ in range(2))
    assert first["tokens"] == second["tokens"]
    assert first["generation_settings"]["seed"] == 7


def test_stream_sends_partials_then_a_summary(app):
    r = post(app, "/completion", {"prompt": "abc", "n_predict": 4, "stream": True, **GREEDY})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    partials, summary = events[:-1], events[-1]
    predicted = 0
    for chunk in partials:  # a slow reader may get several tokens in one chunk
        predicted += len(chunk["tokens"])
        assert chunk == {"index": 0, "content": chunk["content"], "tokens": chunk["tokens"], "stop": False,
                         "tokens_predicted": predicted, "tokens_evaluated": 4}
    assert predicted == 4
    whole = post(app, "/completion", {"prompt": "abc", "n_predict": 4, **GREEDY}).json()
    assert "".join(c["content"] for c in partials) == whole["content"]
    assert summary["stop"] is True and summary["content"] == "" and summary["tokens"] == []
    assert (summary["tokens_predicted"], summary["tokens_evaluated"], summary["stop_type"]) == (4, 4, "limit")
    assert summary["generation_settings"]["stream"] is True
    assert set(summary["timings"]) == TIMING_KEYS


def test_stream_of_several_prompts_tags_chunks_by_index(app):
    r = post(app, "/completion", {"prompt": ["ab", "xy"], "n_predict": 3, "stream": True, **GREEDY})
    events = sse_events(r.text)
    summaries = sorted((e["index"], e["prompt"], e["tokens_predicted"]) for e in events if e["stop"])
    assert summaries == [(0, "<bos>ab", 3), (1, "<bos>xy", 3)]
    for index in (0, 1):
        assert sum(len(e["tokens"]) for e in events if e["index"] == index and not e["stop"]) == 3


def test_stream_with_probabilities_attaches_them_to_each_chunk(app):
    r = post(app, "/completion", {"prompt": "abc", "n_predict": 2, "stream": True, "n_probs": 1, **GREEDY})
    partials = sse_events(r.text)[:-1]
    assert [[p["id"] for p in c["completion_probabilities"]] for c in partials] == [c["tokens"] for c in partials]


def test_priority_header_is_checked(app):
    ok = post(app, "/completion", {"prompt": "abc", "n_predict": 1, **GREEDY}, headers={"X-Priority": "high"})
    bad = post(app, "/completion", {"prompt": "abc", "n_predict": 1}, headers={"X-Priority": "urgent"})
    assert ok.status_code == 200
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Priority"


@pytest.mark.parametrize(("body", "message", "param"), [
    ({"prompt": "abc", "n_predict": 0}, "n_predict 0 (evaluate the prompt only) is not supported; "
     "set n_predict to -1 or at least 1", "n_predict"),
    ({"prompt": "abc", "temperature": 5}, "temperature must be in [0, 2], got 5.0", "temperature"),
    ({"prompt": "abc", "repeat_penalty": 0}, "repeat_penalty must be in [0.001, 1000], got 0.0", "repeat_penalty"),
    ({"prompt": "abc", "logit_bias": [[5, True]]}, "logit_bias for 5 is true; give a number, or false to ban the token",
     "logit_bias"),
    ({"prompt": []}, "prompt must not be an empty list; send text or token ids", "prompt"),
    ({"prompt": [999]}, "prompt token id 999 is outside the vocabulary [0, 272)", None),
    ({"prompt": {"image": "abc"}}, "prompt: Value error, prompt must be text, a list of token ids and text, "
     "or a list of such prompts (JSON objects, such as multimodal prompts, are not supported)", "prompt"),
    ({"prompt": "abc", "n_probs": 21}, "n_probs: Input should be less than or equal to 20", "n_probs"),
])
def test_bad_input_is_a_400_and_the_server_keeps_serving(app, body, message, param):
    r = post(app, "/completion", body)
    assert r.status_code == 400
    assert r.json() == {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    assert post(app, "/completion", {"prompt": "abc", "n_predict": 1, **GREEDY}).status_code == 200


def test_a_prompt_past_the_context_is_llama_servers_context_error(app):
    r = post(app, "/completion", {"prompt": "abc", "n_predict": 200})
    assert r.status_code == 400
    assert r.json() == {"error": {
        "message": "the request exceeds the available context size: the context size is 128 tokens (--ctx-size), "
                   "but 204 were requested (4 in the prompt, 200 to generate); lower n_predict to at most 124",
        "type": "exceed_context_size_error", "param": None, "code": "context_length_exceeded",
        "n_prompt_tokens": 4, "n_ctx": 128}}


# -- /tokenize, /detokenize ------------------------------------------------


def test_tokenize_and_back(app):
    text = "há<bos>"
    plain = post(app, "/tokenize", {"content": text}).json()
    assert plain == {"tokens": [byte_id("h"), 3 + 0xC3, 3 + 0xA1, BOS]}
    assert post(app, "/detokenize", {"tokens": plain["tokens"]}).json() == {"content": text}
    with_bos = post(app, "/tokenize", {"content": "hi", "add_special": True}).json()
    assert with_bos == {"tokens": [BOS, byte_id("h"), byte_id("i")]}


def test_tokenize_with_pieces_gives_bytes_for_partial_characters(app):
    body = post(app, "/tokenize", {"content": "há<bos>", "with_pieces": True}).json()
    assert body == {"tokens": [
        {"id": byte_id("h"), "piece": "h"},
        {"id": 3 + 0xC3, "piece": [0xC3]},
        {"id": 3 + 0xA1, "piece": [0xA1]},
        {"id": BOS, "piece": "<bos>"},
    ]}


@pytest.mark.parametrize(("path", "body", "message", "param"), [
    ("/tokenize", {"content": "x", "parse_special": False},
     "parse_special false is not supported: special-token text is always parsed; drop parse_special", "parse_special"),
    ("/tokenize", {}, "content: Field required", "content"),
    ("/detokenize", {"tokens": [5, 4000]}, "tokens[1] = 4000 is outside the vocabulary [0, 259)", "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens: Input should be a valid list", "tokens"),
])
def test_tokenizer_routes_refuse_bad_input(app, path, body, message, param):
    r = post(app, path, body)
    assert r.status_code == 400
    assert r.json()["error"] == {"message": message, "type": "invalid_request_error", "param": param, "code": None}


@pytest.mark.parametrize(("path", "body", "message", "param"), [
    ("/tokenize", {"content": "a\ud800"},
     "body: Value error, content holds an unpaired UTF-16 surrogate; send valid Unicode text", "body"),
    ("/completion", {"prompt": [2, "\udc00"]},
     "body: Value error, prompt[1] holds an unpaired UTF-16 surrogate; send valid Unicode text", "body"),
    ("/apply-template", {"messages": [{"role": "user", "content": "\ud800"}]},
     "messages hold an unpaired UTF-16 surrogate; send valid Unicode text", "messages"),
])
def test_unpaired_surrogates_are_a_400(app, path, body, message, param):
    # json.dumps escapes the lone surrogate as \\udXXX, which is valid JSON.
    r = run(app, lambda c: c.post(path, content=json.dumps(body), headers={"content-type": "application/json"}))
    assert r.status_code == 400
    assert r.json()["error"] == {"message": message, "type": "invalid_request_error", "param": param, "code": None}


# -- /apply-template -------------------------------------------------------


def test_apply_template_is_the_chat_prompt(app, server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    prompt = post(app, "/apply-template", {"messages": messages}).json()
    assert prompt == {"prompt": render_chat_prompt(server.state.template, ChatCompletionRequest(messages=messages))}
    assert prompt["prompt"] == "<bos>Be brief.\n\nUser: hi\nAssistant:"
    chat = post(app, "/v1/chat/completions", {"messages": messages, "max_tokens": 1}).json()
    tokens = post(app, "/tokenize", {"content": prompt["prompt"]}).json()["tokens"]
    assert chat["usage"]["prompt_tokens"] == len(tokens)


def test_apply_template_needs_messages(app):
    r = post(app, "/apply-template", {})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


# -- /infill ---------------------------------------------------------------


def test_infill_without_fim_tokens_is_a_400(app):
    r = post(app, "/infill", {"input_prefix": "def f(", "input_suffix": ")\n"})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "this model has no fill-in-the-middle tokens (prefix/suffix/middle markers such as <|fim_prefix|>); "
                   "serve a code model trained for infill, or send the text to /completion instead",
        "type": "invalid_request_error", "param": None, "code": None,
    }


def test_infill_frames_prefix_suffix_and_middle(fim_app):
    body = post(fim_app, "/infill", {"input_prefix": "def f(", "input_suffix": ")\n", "prompt": "ret",
                                     "n_predict": 3, **GREEDY}).json()
    assert body["prompt"] == "<bos><|fim_prefix|>def f(<|fim_suffix|>)\n<|fim_middle|>ret"
    assert (body["tokens_evaluated"], body["tokens_predicted"], body["stop_type"]) == (1 + 1 + 6 + 1 + 2 + 1 + 3, 3, "limit")


def test_infill_puts_extra_context_first_and_streams(fim_app):
    r = post(fim_app, "/infill", {"input_extra": [{"filename": "a.py", "text": "x = 1"}], "input_prefix": "y",
                                  "input_suffix": "", "n_predict": 2, "stream": True, **GREEDY})
    summary = sse_events(r.text)[-1]
    assert summary["prompt"] == "<bos>--- a.py ---\nx = 1\n\n<|fim_prefix|>y<|fim_suffix|><|fim_middle|>"
    assert (summary["stop"], summary["tokens_predicted"]) == (True, 2)


# -- /slots, /props --------------------------------------------------------


def idle_slot(i: int) -> dict:
    return {
        "id": i, "id_task": -1, "n_ctx": CTX, "speculative": False, "is_processing": False,
        "n_prompt_tokens": 0, "n_prompt_tokens_processed": 0, "n_prompt_tokens_cache": 0,
        "params": {"n_predict": -1},
        "next_token": {"has_next_token": False, "n_remain": -1, "n_decoded": 0},
    }


def test_slots_say_whether_the_model_speculates():
    from inferd.api.llamacpp.slots import slots
    from inferd.engine.outputs import SlotState

    def state(enabled: bool):
        busy = SlotState(slot=1, request_id="r", prompt_tokens=3, computed_tokens=4, cached_tokens=0,
                         generated_tokens=1, max_tokens=5, priority="normal")
        inner = SimpleNamespace(max_model_len=CTX, speculator=SimpleNamespace(enabled=enabled))
        engine = SimpleNamespace(engine=inner, stats=lambda: SimpleNamespace(slots=[busy], max_running=2))
        return SimpleNamespace(config=SimpleNamespace(slots=True), require_engine=lambda: engine)

    assert [s["speculative"] for s in slots(state(True))] == [True, True]
    assert [s["speculative"] for s in slots(state(False))] == [False, False]


def test_slots_show_a_busy_slot_during_generation_and_idle_after(app):
    async def steps(client):
        request = {"prompt": "slots!", "n_predict": 110, "cache_prompt": False, **GREEDY}
        generation = asyncio.create_task(client.post("/completion", json=request))

        async def busy_slot():
            """The slots once one of them is decoding, with that one; with None if the generation ended first."""
            slots = (await client.get("/slots")).json()
            busy = next((s for s in slots if s["is_processing"] and s["next_token"]["n_decoded"] > 0), None)
            return (slots, busy) if busy is not None or generation.done() else None

        slots, busy = await async_wait_for(busy_slot, timeout=60) or (None, None)
        await generation
        return slots, busy, (await client.get("/slots")).json()

    during, busy, after = run(app, steps)
    assert busy is not None, "no busy slot seen while generating"
    decoded = busy["next_token"]["n_decoded"]
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}-0", busy["id_task"])
    assert busy == {
        "id": busy["id"], "id_task": busy["id_task"], "n_ctx": CTX, "speculative": False, "is_processing": True,
        "n_prompt_tokens": 7, "n_prompt_tokens_processed": 7, "n_prompt_tokens_cache": 0,
        "params": {"n_predict": 110},
        "next_token": {"has_next_token": True, "n_remain": 110 - decoded, "n_decoded": decoded},
    }
    assert 0 < decoded < 110
    assert [s["id"] for s in during] == [0, 1]
    assert idle_slot(1 - busy["id"]) in during
    assert after == [idle_slot(0), idle_slot(1)]


def test_no_slots_is_a_501(loaded):
    with served(loaded, small_config(ctx_size=CTX, parallel=PARALLEL, slots=False)) as no_slots:
        r = get(no_slots.app, "/slots")
    assert r.status_code == 501
    assert r.json() == {"error": {
        "message": "This server does not support slots endpoint: it was started with --no-slots; "
                   "restart it without --no-slots to enable /slots",
        "type": "not_supported_error", "param": None, "code": 501,
    }}


def test_props(app, server, tiny_model_dir):
    body = get(app, "/props").json()
    assert body == {
        "default_generation_settings": {"n_ctx": CTX, "params": settings()},
        "total_slots": PARALLEL,
        "model_path": str(tiny_model_dir),
        "chat_template": server.state.template.source,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "modalities": {"vision": False},
        "build_info": body["build_info"],
    }
    assert body["build_info"].startswith("inferd ")


def test_routes_answer_503_while_the_model_loads():
    with served(None) as loading:
        for method, path, body in [("post", "/completion", {"prompt": "x"}), ("post", "/tokenize", {"content": "x"}),
                                   ("get", "/props", None), ("get", "/slots", None)]:
            r = run(loading.app, lambda c: c.request(method.upper(), path, json=body))
            assert r.status_code == 503 and r.json()["error"]["code"] == "loading"


def test_completion_follows_a_json_schema_and_a_gbnf_grammar(app):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

    async def steps(client):
        by_schema = await client.post("/completion", json={"prompt": "x", "n_predict": 30, "json_schema": schema})
        by_grammar = await client.post("/completion", json={"prompt": "x", "n_predict": 30,
                                                             "grammar": 'root ::= "yes" | "no"'})
        bad = await client.post("/completion", json={"prompt": "x", "grammar": "root ::= ("})
        return by_schema, by_grammar, bad

    by_schema, by_grammar, bad = run(app, steps)
    assert json.loads(by_schema.json()["content"])["ok"] in (True, False)
    assert by_grammar.json()["content"] in ("yes", "no")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
