"""Queue time on request cards: the engine reports when it first scheduled a
request, the card counts from submission to then (so far, while it waits),
and the request's log line shows it."""

from __future__ import annotations

import pytest

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.outputs import RequestOutput
from inferd.engine.sampling_params import SamplingParams
from inferd.http.auth import timings
from inferd.http.request_context import RequestContext
from inferd.models.loader import load_model
from inferd.serving.cards import RequestCard, RequestCards


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def test_the_engine_reports_when_it_first_scheduled_each_request(loaded):
    engine = Engine(loaded, EngineConfig(ctx_size=128, parallel=1, block_size=4))
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    for rid in ("first", "second"):
        engine.add_request(EngineRequest(rid, [2, 5, 9, 14], params))
    seen: dict[str, list[RequestOutput]] = {"first": [], "second": []}
    while engine.has_work:
        for out in engine.step():
            seen[out.request_id].append(out)
    first, second = seen["first"], seen["second"]
    assert first[0].scheduled is not None and len({o.scheduled for o in first}) == 1
    assert len({o.scheduled for o in second}) == 1
    # one sequence slot: the second waits until the first has finished
    assert second[0].scheduled >= first[-1].timing.finished > first[0].scheduled
    merged = RequestOutput("x")
    merged.merge(second[0])
    merged.merge(RequestOutput("x", scheduled=None))
    assert merged.scheduled == second[0].scheduled


def test_a_card_counts_queue_time_until_scheduled_and_so_far_while_waiting():
    cards = RequestCards()
    card = cards.open(RequestCard("r", "t", None, "m", "/v1/chat/completions", started=100.0))
    assert card.public()["queue_time"] > 0 and card.state == "queued"  # still waiting: time so far
    card.saw_scheduled(100.25)
    card.saw_scheduled(100.5)  # a later choice's start does not move it
    card.saw_scheduled(None)
    card.add_output("hi")
    assert card.public()["queue_time"] == 0.25
    waited = cards.open(RequestCard("w", "t", None, "m", "/v1/chat/completions", started=100.0))
    cards.close(waited, "disconnected")  # never scheduled: it queued until it ended
    assert waited.public()["queue_time"] == pytest.approx(waited.ended - 100.0)


def test_the_log_line_carries_queue_time_and_time_to_first_token():
    ctx = RequestContext(trace_id="t", path="/v1/chat/completions")
    assert timings(ctx) == ""
    card = RequestCard("r", "t", None, "m", "/v1/chat/completions", started=10.0, scheduled=10.012)
    ctx.cards.append(card)
    assert timings(ctx) == " queue_ms=12 ttft_ms=-"
    card.first_token = 10.0405
    assert timings(ctx) == " queue_ms=12 ttft_ms=40"
