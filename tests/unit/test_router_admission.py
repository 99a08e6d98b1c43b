"""The router's side of admission: budgets and prompt estimates from request
bodies, and the usage each dialect reports, read from the answer's bytes as
they pass (split anywhere)."""

from __future__ import annotations

import pytest

from inferd.api.registry import endpoints
from inferd.router.admission import UsageMeter, budget_of, prompt_estimate

ANSWERS = {
    "openai": b'data: {"choices":[]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,'
              b'"prompt_tokens_details":{"cached_tokens":8}}}\n\ndata: [DONE]\n\n',
    "anthropic": b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":12,'
                 b'"output_tokens":1}}}\n\nevent: message_delta\ndata: {"type":"message_delta","usage":'
                 b'{"output_tokens":5}}\n\n',
    "responses": b'event: response.completed\ndata: {"type":"response.completed","response":{"usage":'
                 b'{"input_tokens":12,"output_tokens":5,"input_tokens_details":{"cached_tokens":8}}}}\n\n',
    "ollama": b'{"done":false}\n{"done":true,"prompt_eval_count":12,"eval_count":5}\n',
    "llamacpp": b'{"content":"x","tokens_evaluated":12,"tokens_predicted":5,"tokens_cached":8}',
    # an OpenAI stream without include_usage: the worker's own count, asked for by the router (http/auth.py)
    "worker-count": b'data: {"choices":[{"delta":{"content":"usage"}}]}\n\ndata: [DONE]\n\n'
                    b': usage {"prompt_tokens": 12, "completion_tokens": 5, '
                    b'"prompt_tokens_details": {"cached_tokens": 8}}\n\n',
}


@pytest.mark.parametrize("dialect", ANSWERS)
@pytest.mark.parametrize("cut", [1, 7, 1000])
def test_usage_is_read_from_every_dialect_however_the_bytes_are_cut(dialect, cut):
    meter = UsageMeter(estimate=(99, 99))
    data = ANSWERS[dialect]
    for i in range(0, len(data), cut):
        meter.feed(data[i:i + cut])
    meter.finish()
    prompt, completion, cached = meter.usage()
    assert (prompt, completion) == (12, 5)
    assert cached == (0 if dialect in ("anthropic", "ollama") else 8)


def test_the_router_asks_workers_for_their_count_once():
    asked = UsageMeter.asking([(b"x-inferd-report-usage", b"0"), (b"accept", b"*/*")])
    assert asked == [(b"accept", b"*/*"), (b"x-inferd-report-usage", b"1")]


def test_an_answer_without_usage_is_charged_the_estimate():
    meter = UsageMeter(estimate=(10, 64))
    meter.feed(b'data: {"choices":[{"delta":{"content":"usage"}}]}\n\n')
    meter.finish()
    assert meter.usage() == (10, 64, 0)


def test_budgets_and_estimates():
    assert budget_of({"max_tokens": 7}) == 7
    assert budget_of({"max_output_tokens": 9}) == 9
    assert budget_of({"options": {"num_predict": 11}}) == 11
    assert budget_of({"n_predict": -1}) == 0 and budget_of({"max_tokens": True}) == 0
    chat = endpoints()["/v1/chat/completions"]
    assert prompt_estimate(chat, {"messages": [{"role": "user", "content": "x" * 40}]}) >= 10
    assert prompt_estimate(chat, {"messages": "nonsense"}) >= 0


def _answer(status: int, *bodies: bytes, worker: bytes = b"w1"):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status, "headers": [(b"x-inferd-worker", worker)]})
        for body in bodies:
            await send({"type": "http.response.body", "body": body, "more_body": True})
        # the client left: the proxy stops here, without the final message

    return app


def test_a_stream_cut_short_settles_to_the_workers_card_and_an_error_to_nothing():
    import asyncio

    asked = []

    async def ask(worker_id):
        asked.append(worker_id)
        return {"prompt": 12, "completion": 7, "cached": 4}

    async def sink(message):
        pass

    async def answer(status, *bodies):
        meter = UsageMeter(estimate=(99, 99), ask_worker=ask)
        await meter.wrap(_answer(status, *bodies))({"type": "http"}, None, sink)
        return meter.usage()

    assert asyncio.run(answer(200, b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n')) == (12, 7, 4)
    assert asked == ["w1"]
    assert asyncio.run(answer(400, b'{"error":{"message":"bad"}}')) == (0, 0, 0) and asked == ["w1"]
    whole = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    assert asyncio.run(answer(200, whole)) == (3, 2, 0) and asked == ["w1"]  # counted already: not asked
