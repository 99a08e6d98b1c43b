"""Prometheus metrics: request counts by route template, token totals and
latency histograms from finished requests, engine gauges at scrape time."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from inferd.config import ServeConfig
from inferd.engine.outputs import RequestOutput, RequestTiming, Usage
from inferd.http.request_metrics import metrics_current
from inferd.models.loader import load_model
from inferd.server.assemble import new_state
from inferd.serving.metrics import ServerMetrics, observe_output
from served import Served, served, small_config

COMPLETION = {"prompt": "The cat sat on the mat", "max_tokens": 5, "temperature": 0, "ignore_eos": True}
CHAT = {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 4, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
ENGINE_GAUGES = ("inferd_requests_waiting", "inferd_requests_running", "inferd_kv_cache_usage_ratio",
                 "inferd_prefix_cache_hit_rate")
ENGINE_COUNTERS = ("inferd_prefix_cache_queries_total", "inferd_prefix_cache_hits_total", "inferd_preemptions_total")


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture
def server(loaded):
    with served(loaded, small_config(metrics=True)) as server:
        yield server


def run(server: Served, calls):
    """Send (method, path, kwargs) calls in order, on one app and one event loop."""

    async def go():
        async with server.client() as client:
            return [await client.request(method, path, **kwargs) for method, path, kwargs in calls]

    return asyncio.run(go())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a Prometheus text page."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def stream_usage(body: str) -> dict:
    events = [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return json.loads(events[-2])["usage"]


def test_two_completions_are_counted_exactly(server):
    completion, chat, scrape = run(server, [
        ("POST", "/v1/completions", {"json": COMPLETION}),
        ("POST", "/v1/chat/completions", {"json": CHAT}),
        ("GET", "/metrics", {}),
    ])
    assert completion.status_code == chat.status_code == scrape.status_code == 200
    assert scrape.headers["content-type"] == CONTENT_TYPE_LATEST
    usages = [completion.json()["usage"], stream_usage(chat.text)]
    assert [u["completion_tokens"] for u in usages] == [5, 4]
    got = samples(scrape.text)

    assert got[("inferd_requests_total", (("route", "/v1/completions"), ("status", "200")))] == 1
    assert got[("inferd_requests_total", (("route", "/v1/chat/completions"), ("status", "200")))] == 1
    assert ("inferd_requests_total", (("route", "/metrics"), ("status", "200"))) not in got  # counted once answered
    assert got[("inferd_prompt_tokens_total", ())] == sum(u["prompt_tokens"] for u in usages)
    assert got[("inferd_generation_tokens_total", ())] == 9
    for histogram in ("inferd_time_to_first_token_seconds", "inferd_time_per_output_token_seconds",
                      "inferd_e2e_request_latency_seconds"):
        assert got[(f"{histogram}_count", ())] == 2
        assert got[(f"{histogram}_bucket", (("le", "+Inf"),))] == 2
        assert got[(f"{histogram}_sum", ())] > 0

    stats = server.state.engine.stats()
    assert got[("inferd_requests_waiting", ())] == 0
    assert got[("inferd_requests_running", ())] == 0
    assert got[("inferd_kv_cache_usage_ratio", ())] == stats.kv_usage
    assert got[("inferd_prefix_cache_queries_total", ())] == stats.prefix_cache_queries > 0
    assert got[("inferd_prefix_cache_hits_total", ())] == stats.prefix_cache_hits
    assert got[("inferd_prefix_cache_hit_rate", ())] == stats.prefix_cache_hit_rate
    assert got[("inferd_preemptions_total", ())] == 0


def test_speculative_drafts_are_counted(loaded):
    repeating = {"prompt": "one two three four " * 6, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    with served(loaded, small_config(metrics=True, speculative="ngram")) as server:
        before, completion, after = run(server, [
            ("GET", "/metrics", {}), ("POST", "/v1/completions", {"json": repeating}), ("GET", "/metrics", {})])
        stats = server.state.engine.stats()
    assert completion.status_code == 200
    assert samples(before.text)[("inferd_speculative_draft_tokens_total", ())] == 0
    assert samples(before.text)[("inferd_speculative_acceptance_rate", ())] == 0
    got = samples(after.text)
    assert got[("inferd_speculative_draft_tokens_total", ())] == stats.draft_tokens > 0
    assert got[("inferd_speculative_accepted_tokens_total", ())] == stats.accepted_draft_tokens <= stats.draft_tokens
    assert got[("inferd_speculative_acceptance_rate", ())] == stats.accepted_draft_tokens / stats.draft_tokens


def test_routes_are_labelled_by_template_not_by_url(server):
    *_, scrape = run(server, [
        ("GET", "/v1/models", {}),
        ("GET", "/v1/models", {}),
        ("GET", "/v1/completions", {}),  # a route that exists, wrong method
        ("GET", "/no/such/path?x=1", {}),
        ("GET", "/another/missing/path", {}),
        ("GET", "/metrics", {}),
        ("GET", "/metrics", {}),
    ])
    requests = {labels: v for (name, labels), v in samples(scrape.text).items() if name == "inferd_requests_total"}
    assert requests == {
        (("route", "/v1/models"), ("status", "200")): 2,
        (("route", "/v1/completions"), ("status", "405")): 1,
        (("route", "unmatched"), ("status", "404")): 2,
        (("route", "/metrics"), ("status", "200")): 1,
    }


def test_refused_requests_are_counted_and_metrics_need_the_key(loaded):
    with served(loaded, small_config(metrics=True), api_keys=frozenset({"sk-ops"})) as server:
        refused, scrape = run(server, [
            ("GET", "/metrics", {}),
            ("GET", "/metrics", {"headers": {"Authorization": "Bearer sk-ops"}}),
        ])
    assert refused.status_code == 401
    assert scrape.status_code == 200
    assert samples(scrape.text)[("inferd_requests_total", (("route", "unmatched"), ("status", "401")))] == 1


def test_metrics_are_404_when_off(loaded):
    with served(loaded, small_config(metrics=False)) as server:
        [r] = run(server, [("GET", "/metrics", {})])
    assert r.status_code == 404
    assert r.json() == {"error": {"message": "metrics are off; start the server with --metrics to serve them here",
                                  "type": "not_found_error", "param": None, "code": None}}


def test_engine_metrics_are_absent_while_the_model_loads():
    text = new_state(ServeConfig(metrics=True), "tiny").metrics.render().decode()
    for name in ENGINE_GAUGES + ENGINE_COUNTERS:
        assert name not in text
    assert "inferd_prompt_tokens_total 0.0" in text


def finished(prompt: int, completion: int, timing: RequestTiming | None) -> RequestOutput:
    return RequestOutput("r", finished=True, finish_reason="length", usage=Usage(prompt, completion, 0), timing=timing)


def test_latencies_come_from_the_request_timing():
    metrics = ServerMetrics(lambda: None)
    metrics.observe_finished(finished(7, 5, RequestTiming(arrival=10.0, first_token=10.5, finished=12.5)))
    metrics.observe_finished(finished(3, 1, RequestTiming(arrival=20.0, first_token=20.25, finished=20.25)))
    got = samples(metrics.render().decode())
    assert got[("inferd_prompt_tokens_total", ())] == 10
    assert got[("inferd_generation_tokens_total", ())] == 6
    assert got[("inferd_time_to_first_token_seconds_count", ())] == 2
    assert got[("inferd_time_to_first_token_seconds_sum", ())] == 0.75
    # One token has no gap after the first: only the 5-token request counts, (12.5 - 10.5) / 4.
    assert got[("inferd_time_per_output_token_seconds_count", ())] == 1
    assert got[("inferd_time_per_output_token_seconds_sum", ())] == 0.5
    assert got[("inferd_e2e_request_latency_seconds_count", ())] == 2
    assert got[("inferd_e2e_request_latency_seconds_sum", ())] == 2.75


def test_a_request_without_a_first_token_has_no_ttft():
    metrics = ServerMetrics(lambda: None)
    metrics.observe_finished(finished(4, 0, RequestTiming(arrival=1.0, first_token=None, finished=1.5)))
    got = samples(metrics.render().decode())
    assert got[("inferd_time_to_first_token_seconds_count", ())] == 0
    assert got[("inferd_time_per_output_token_seconds_count", ())] == 0
    assert got[("inferd_e2e_request_latency_seconds_sum", ())] == 0.5


def test_observe_output_records_finals_for_the_server_of_the_current_request():
    metrics = ServerMetrics(lambda: None)
    final = finished(7, 5, RequestTiming(arrival=0.0, first_token=0.1, finished=0.5))
    observe_output(final)  # outside any request there is nowhere to record it
    with metrics_current(metrics):
        observe_output(RequestOutput("r", token_ids=[40], text="a"))  # a delta, not the end
        observe_output(final)
    got = samples(metrics.render().decode())
    assert got[("inferd_prompt_tokens_total", ())] == 7
    assert got[("inferd_e2e_request_latency_seconds_count", ())] == 1


def test_each_server_has_its_own_registry():
    first, second = ServerMetrics(lambda: None), ServerMetrics(lambda: None)
    first.prompt_tokens.inc(3)
    assert samples(first.render().decode())[("inferd_prompt_tokens_total", ())] == 3
    assert samples(second.render().decode())[("inferd_prompt_tokens_total", ())] == 0
