"""Property tests at the engine boundary: random request parameters, within
and beyond their documented ranges. Every request either runs to a finish
reason or is refused at once with a typed error that names what to change,
and a greedy neighbour running alongside gets exactly what it gets alone.

`engine`: an `EngineRequest` straight into `AsyncEngine.add_request`.
`http`: a chat request through the served app, grammars included, where a
refusal is a 400 in the OpenAI envelope.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from served import served, small_config

from inferd.config import EngineConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest, Priority
from inferd.engine.errors import RequestRejected
from inferd.engine.sampling_params import SamplingParams, SamplingParamsError
from inferd.models.loader import load_model

CTX = 32  # small, so a request that runs to the end of its context is cheap
NEIGHBOUR_PROMPT = [2, 60, 61, 62, 63]
NEIGHBOUR = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
SETTINGS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture(scope="module")
def engine(loaded):
    async_engine = AsyncEngine(Engine(loaded, EngineConfig(ctx_size=CTX, parallel=4, block_size=4)))
    yield async_engine
    async_engine.shutdown()


async def run_alone(engine, request: EngineRequest) -> list[int]:
    return [t async for out in engine.generate(request) for t in out.token_ids]


@pytest.fixture(scope="module")
def neighbour_alone(engine) -> list[int]:
    tokens = asyncio.run(run_alone(engine, EngineRequest("alone", NEIGHBOUR_PROMPT, NEIGHBOUR)))
    assert len(tokens) == NEIGHBOUR.max_tokens
    return tokens


def within(vocab: int) -> dict[str, st.SearchStrategy]:
    """Every parameter inside its documented range, edges included, and
    consistent with the others (min_tokens and thinking_budget <= 4 <= max_tokens,
    a loop guard that fits the context), so that alone it must run."""
    token = st.integers(0, vocab - 1)
    return {
        "max_tokens": st.none() | st.integers(4, CTX),
        "min_tokens": st.integers(0, 4),
        "temperature": st.floats(0.0, 2.0),
        "top_k": st.integers(-1, vocab + 10),
        "top_p": st.floats(0.0, 1.0, exclude_min=True),
        "min_p": st.floats(0.0, 1.0),
        # Above the floor where dividing a logit overflows: see the xfail test below.
        "repetition_penalty": st.floats(1e-3, 10.0),
        "presence_penalty": st.floats(-2.0, 2.0),
        "frequency_penalty": st.floats(-2.0, 2.0),
        "logit_bias": st.none() | st.dictionaries(token, st.floats(-100.0, 100.0) | st.just(-math.inf), max_size=4),
        "seed": st.none() | st.integers(-2**70, 2**70),
        "logprobs": st.none() | st.integers(0, 20),
        "stop": st.lists(st.text(min_size=1, max_size=4), max_size=3) | st.just(["z" * 512] * 32),
        "stop_token_ids": st.lists(token, max_size=4),
        "ignore_eos": st.booleans(),
        "include_stop_str_in_output": st.booleans(),
        "skip_special_tokens": st.booleans(),
        "thinking_budget": st.none() | st.integers(-1, 4),
    }


NOT_A_NUMBER = st.sampled_from([math.nan, math.inf, -math.inf])


def beyond(vocab: int) -> dict[str, st.SearchStrategy]:
    """For each parameter, values its validation must refuse whatever the others are."""
    return {
        "max_tokens": st.integers(-10**13, 0) | st.just(2.5) | st.just(True),
        "min_tokens": st.integers(-10**13, -1) | st.just(0.5),
        "temperature": st.floats(2.0, exclude_min=True) | st.floats(max_value=0.0, exclude_max=True) | NOT_A_NUMBER,
        "top_k": st.integers(-10**13, -2) | st.just(1.5),
        "top_p": st.floats(1.0, exclude_min=True) | st.floats(max_value=0.0) | NOT_A_NUMBER,
        "min_p": st.floats(1.0, exclude_min=True) | st.floats(max_value=0.0, exclude_max=True) | NOT_A_NUMBER,
        "repetition_penalty": st.floats(max_value=1e-3, exclude_max=True) | st.floats(1e3, exclude_min=True)
        | NOT_A_NUMBER,
        "presence_penalty": st.floats(2.0, exclude_min=True) | st.floats(max_value=-2.0, exclude_max=True)
        | NOT_A_NUMBER,
        "frequency_penalty": st.floats(2.0, exclude_min=True) | st.floats(max_value=-2.0, exclude_max=True)
        | NOT_A_NUMBER,
        "logit_bias": st.sampled_from([{vocab: 1.0}, {-1: 1.0}, {0: 100.5}, {0: math.nan}, {0: math.inf}]),
        "seed": st.just(1.5) | st.just("7"),
        "logprobs": st.integers(-10**13, -1) | st.integers(21, 10**13),
        "stop": st.sampled_from([["x"] * 33, [""], ["y" * 513]]),
        "stop_token_ids": st.sampled_from([[vocab], [-1], [0] * 1025]),
        "thinking_budget": st.integers(-10**13, -2) | st.integers(5, 10**13),
        # The loop guard's two numbers are checked together: either may be named.
        "max_pattern_size": st.tuples(st.integers(1025, 10**13) | st.integers(-10**13, 0), st.integers(2, 8)),
        "min_count": st.tuples(st.integers(1, 8), st.integers(CTX + 1, 10**13) | st.integers(-10**13, 1)),
    }


LOOP_GUARD = ("max_pattern_size", "min_count")
REQUEST_IDS = itertools.count()


@st.composite
def drawn_requests(draw, vocab: int, pushed: str | None):
    """A request within every range but `pushed` (a parameter, or the prompt), drawn beyond its range."""
    kwargs = draw(st.fixed_dictionaries({}, optional=within(vocab)))
    if draw(st.booleans()):
        kwargs["max_pattern_size"], kwargs["min_count"] = draw(st.tuples(st.integers(1, 8), st.integers(2, 4)))
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12))
    if pushed == "prompt":
        prompt = draw(st.sampled_from([[], [2] * CTX, [2, vocab], [-1, 2]]))
    elif pushed is not None:
        value = draw(beyond(vocab)[pushed])
        if pushed in LOOP_GUARD:
            kwargs["max_pattern_size"], kwargs["min_count"] = value
        else:
            kwargs[pushed] = value
    if pushed == "thinking_budget" and kwargs.get("max_tokens") is None and kwargs["thinking_budget"] > 0:
        kwargs["max_tokens"] = 4  # a budget above max_tokens is the documented refusal
    request = EngineRequest(f"drawn-{next(REQUEST_IDS)}", prompt, SamplingParams(**kwargs), priority=draw(st.sampled_from(Priority)),
                            cache_prompt=draw(st.booleans()), cache_salt=draw(st.none() | st.text(max_size=4)))
    return request


async def beside_the_neighbour(engine, request: EngineRequest):
    """Run `request` while the neighbour runs; (what became of it, the neighbour's tokens)."""
    neighbour = asyncio.create_task(run_alone(engine, EngineRequest("neighbour", NEIGHBOUR_PROMPT, NEIGHBOUR)))
    await asyncio.sleep(0)  # the neighbour is submitted first
    try:
        stream = engine.add_request(request)
    except ValueError as refused:
        outcome = refused
    else:
        try:
            async with asyncio.timeout(60):
                outcome = [out async for out in stream]
        finally:
            stream.close()
    return outcome, await asyncio.wait_for(neighbour, 60)


def assert_refused_for(refused: Exception, pushed: str | None) -> None:
    """Refused at once, with a typed error naming the pushed parameter; a request
    within every range is refused only when prompt and output cannot fit the context."""
    assert isinstance(refused, (SamplingParamsError, RequestRejected)), repr(refused)
    if pushed is None:
        assert isinstance(refused, RequestRejected) and "lower max_tokens" in str(refused), repr(refused)
    elif pushed == "prompt":
        assert isinstance(refused, RequestRejected) and "prompt" in str(refused), repr(refused)
    else:
        assert isinstance(refused, SamplingParamsError), repr(refused)
        named = LOOP_GUARD if pushed in LOOP_GUARD else (pushed,)
        assert refused.field in named and refused.field in str(refused), (pushed, repr(refused))


def assert_ran_to_a_finish(outs, params: SamplingParams) -> None:
    final = outs[-1]
    assert final.finished and final.finish_reason in ("stop", "length"), f"{final.finish_reason}: {final.error} {params}"
    assert not any(o.finished for o in outs[:-1])
    generated = sum(len(o.token_ids) for o in outs)
    assert generated == final.usage.completion_tokens
    if params.max_tokens is not None:
        assert generated <= params.max_tokens
    if params.logprobs is not None:
        assert sum(len(o.logprobs or ()) for o in outs) == generated


PUSHED = [None, "prompt", *beyond(vocab=1)]


@pytest.mark.parametrize("pushed", PUSHED, ids=[p or "all-within" for p in PUSHED])
def test_every_drawn_request_runs_or_is_refused_and_its_neighbour_is_untouched(engine, loaded, neighbour_alone,
                                                                               pushed):
    @given(request=drawn_requests(loaded.config.vocab_size, pushed))
    @settings(SETTINGS, max_examples=15 if pushed is None else 4)
    def check(request):
        outcome, neighbour = asyncio.run(beside_the_neighbour(engine, request))
        if isinstance(outcome, Exception):
            assert_refused_for(outcome, pushed)
        else:
            assert pushed is None, f"{pushed} is beyond its range, yet the request ran: {request}"
            assert_ran_to_a_finish(outcome, request.params)
        assert neighbour == neighbour_alone

    check()


def test_a_repetition_penalty_too_small_to_divide_by_is_refused_up_front(engine):
    request = EngineRequest("tiny-penalty", NEIGHBOUR_PROMPT, SamplingParams(max_tokens=4, repetition_penalty=1e-300))
    with pytest.raises(SamplingParamsError, match="repetition_penalty"):
        engine.engine.validate(request)


# -- through HTTP: the chat route, grammars included ------------------------

CHAT_CTX = 192  # the tiny model's chat template alone is about 110 tokens
NEIGHBOUR_CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "the neighbour"}], "max_tokens": 8,
                  "temperature": 0}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
OUTPUT_GRAMMARS = [
    {}, {"regex": "[a-z]{1,5}"}, {"regex": "a{1000000}"}, {"regex": "("},
    {"grammar": 'root ::= "yes" | "no"'}, {"grammar": "root ::= root"}, {"grammar": "root ::= "},
    {"grammar": "this is not gbnf"},
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "self", "schema": {"$ref": "#"}}}},
]
NUMBERS = st.floats(allow_nan=False) | st.floats(-3.0, 3.0) | st.integers(-10**13, 10**13)
CHAT_PARAMETERS = st.fixed_dictionaries({}, optional={
    "max_tokens": st.none() | st.integers(-2, 24) | st.integers(CHAT_CTX - 4, 10**13),
    "temperature": NUMBERS, "top_p": NUMBERS, "top_k": st.integers(-3, 10**6), "min_p": NUMBERS,
    "presence_penalty": NUMBERS, "frequency_penalty": NUMBERS, "repetition_penalty": NUMBERS,
    "n": st.integers(-1, 10), "logprobs": st.booleans(), "top_logprobs": st.integers(-1, 25),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=5),
    "seed": st.integers(-2**70, 2**70),
    "logit_bias": st.dictionaries(st.integers(-2, 300).map(str), NUMBERS, max_size=3),
    "max_pattern_size": st.integers(-1, 2000) | st.just(10**12), "min_count": st.integers(-1, 70),
})


@pytest.fixture(scope="module")
def chat_server(loaded):
    # A request that sets no max_tokens stops after 8: the parameters are what is drawn, not lengths.
    with served(loaded, small_config(ctx_size=CHAT_CTX, parallel=4, default_max_tokens=8)) as server:
        yield server


async def chat(server, body: dict, priority: str = "normal"):
    async with server.client() as http:
        return await http.post("/v1/chat/completions", json=body, headers={"x-priority": priority})


@pytest.fixture(scope="module")
def neighbour_chat_alone(chat_server) -> str:
    r = asyncio.run(chat(chat_server, NEIGHBOUR_CHAT))
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_every_drawn_chat_request_answers_or_is_a_400_and_its_neighbour_is_untouched(chat_server,
                                                                                   neighbour_chat_alone):
    @given(parameters=CHAT_PARAMETERS, grammar=st.sampled_from(OUTPUT_GRAMMARS),
           priority=st.sampled_from(["high", "normal", "low", "urgent"]))
    @settings(SETTINGS, max_examples=15)
    def check(parameters, grammar, priority):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **parameters, **grammar}

        async def both():
            return await asyncio.gather(chat(chat_server, NEIGHBOUR_CHAT), chat(chat_server, body, priority))

        neighbour, r = asyncio.run(both())
        if r.status_code == 200:
            reasons = {c["finish_reason"] for c in r.json()["choices"]}
            assert reasons <= {"stop", "length"}, (body, r.text[:500])
        else:
            assert r.status_code == 400, (body, r.status_code, r.text[:500])
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
            assert error["message"]
        assert neighbour.status_code == 200
        assert neighbour.json()["choices"][0]["message"]["content"] == neighbour_chat_alone

    check()
