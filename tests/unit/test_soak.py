"""benchmarks/soak.py: how it reads streams, judges answers, measures RSS
drift and evaluates its targets, and a few seconds of its workload against
a tiny model served in process."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest
from router_fakes import ServerThread
from served import served, small_config

from inferd.chat.template import ChatTemplate
from inferd.models.loader import load_model
from inferd.store.responses import ResponseStore

SOAK_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def load_soak():
    spec = importlib.util.spec_from_file_location("soak", SOAK_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


soak = load_soak()
Outcome, HealthPoll, RssSample, Leftovers = soak.Outcome, soak.HealthPoll, soak.RssSample, soak.Leftovers

IDLE = Leftovers(running=0, waiting=0, settle_seconds=0.0, kv_blocks_used=0, dropped_blocks=12)


@pytest.mark.parametrize(("line", "error"), [
    ('data: {"id":"x","choices":[{"delta":{"content":"hi"}}]}', False),
    ("data: [DONE]", False),
    ("event: message_start", False),
    ("event: error", True),
    ("event: response.failed", True),
    ('data: {"type":"error","error":{"type":"overloaded_error","message":"boom"}}', True),
    ('data: {"type":"response.created","response":{"status":"in_progress","error":null}}', False),
    ('data: {"error":{"message":"the engine failed","type":"server_error"}}', True),
    ('data: {"error":null}', False),
    ('{"model":"m","message":{"role":"assistant","content":"hi"},"done":false}', False),
    ('{"error":"the engine failed"}', True),
    ("data: {not json", False),
    (": keep-alive", False),
])
def test_error_events_in_every_framing(line, error):
    assert soak.is_error_event(line) is error


def outcome(status: str, kind: str = "complete", route: str = "POST /v1/chat/completions",
            stream_error: bool = False) -> Outcome:
    return Outcome(route, kind, status, 0.1, stream_error=stream_error)


def test_answers_are_judged_by_what_was_sent():
    assert soak.is_server_error(outcome("500")) and soak.is_server_error(outcome("503", "bad-input"))
    assert soak.is_server_error(outcome("200", stream_error=True))
    assert not soak.is_server_error(outcome("200")) and not soak.is_server_error(outcome("cancelled"))
    assert soak.is_wrong_class(outcome("400"))  # a well-formed request refused
    assert soak.is_wrong_class(outcome("200", "bad-input"))  # a bad input accepted
    assert not soak.is_wrong_class(outcome("404", "bad-input")) and not soak.is_wrong_class(outcome("200"))
    # 5xx and requests with no answer are counted by their own targets, not here.
    assert not any(soak.is_wrong_class(outcome(s)) for s in ("500", "cancelled", "timeout", "connection error"))


def test_requests_are_counted_by_route_and_status():
    outcomes = [outcome("200"), outcome("200", "first-chunk-drop"), outcome("400", "bad-input"),
                outcome("200", route="POST /api/chat"), outcome("cancelled", "timed-cancel", "POST /api/chat")]
    assert soak.requests_by_route_and_status(outcomes) == {
        ("POST /v1/chat/completions", "200"): 2, ("POST /v1/chat/completions", "400"): 1,
        ("POST /api/chat", "200"): 1, ("POST /api/chat", "cancelled"): 1}


SAMPLES = [RssSample(0.0, 1000), RssSample(1.0, 1500), RssSample(2.0, 2000), RssSample(3.0, 2010),
           RssSample(4.0, 2030)]


def test_the_rss_trajectory_is_sampled_at_even_moments_of_the_load():
    assert soak.rss_at(SAMPLES, 2.5) == RssSample(2.0, 2000)
    assert soak.rss_at(SAMPLES, 9.0) == RssSample(4.0, 2030)
    assert soak.rss_at(SAMPLES, -1.0) == RssSample(0.0, 1000)
    assert [s.kib for s in soak.rss_trajectory(SAMPLES, 4.0, points=5)] == [1000, 1500, 2000, 2010, 2030]


def test_the_drift_is_idle_to_idle_anonymous_memory():
    assert soak.IdleMemory(2000, 2030).drift == 0.015
    assert soak.IdleMemory(2048, 1024).drift == -0.5  # memory handed back is no drift


def health_polls(latencies_ms: list[float]) -> list[HealthPoll]:
    """Polls 10 ms apart from the start of the load."""
    return [HealthPoll(i * 0.01, ms / 1000, "200") for i, ms in enumerate(latencies_ms)]


def test_a_clean_run_passes_every_target():
    outcomes = [outcome("200"), outcome("400", "bad-input"), outcome("cancelled", "timed-cancel")]
    # numpy's p99 of 100 samples lies 1% of the way from the 99th to the 100th: 50 + 0.01 * 150.
    targets = soak.evaluate(outcomes, health_polls([5.0] * 98 + [50.0, 200.0]), soak.IdleMemory(2048, 2048), 2.5,
                            IDLE)
    assert [(t.name, t.value, t.passed) for t in targets] == [
        ("5xx answers and in-stream errors", "0", True),
        ("requests without an answer", "0", True),
        ("answers of the wrong class", "0", True),
        ("/health p99 during the load", "51.5 ms", True),
        ("RSS drift after warm-up", "+0.00% (2.0 -> 2.0 MB anon)", True),
        ("requests running / waiting when idle", "0 / 0", True),
        ("KV blocks used after cache reset", "0", True),
    ]
    result = soak.SoakResult(targets, "")
    assert result.passed


def test_each_failure_fails_its_own_target():
    outcomes = [outcome("500"), outcome("200", stream_error=True), outcome("timeout"), outcome("connection error"),
                outcome("200", "bad-input"), outcome("200")]
    left = Leftovers(running=1, waiting=2, settle_seconds=15.0, kv_blocks_used=3, dropped_blocks=0)
    # Polls after the load ended do not count.
    polls = health_polls([150.0] * 10) + [HealthPoll(99.0, 0.001, "200")]
    targets = soak.evaluate(outcomes, polls, soak.IdleMemory(2000, 2030), 4.0, left)
    assert [(t.value, t.passed) for t in targets] == [
        ("2", False), ("2", False), ("1", False), ("150.0 ms", False),
        ("+1.50% (2.0 -> 2.0 MB anon)", False), ("1 / 2", False), ("3", False)]
    assert not soak.SoakResult(targets, "").passed


def test_rss_without_a_pid_is_skipped_not_failed():
    targets = soak.evaluate([outcome("200")], health_polls([1.0]), None, 4.0, IDLE)
    rss = next(t for t in targets if t.name == "RSS drift after warm-up")
    assert (rss.value, rss.passed, soak.verdict(rss.passed)) == ("not measured (no server pid)", None, "SKIP")
    assert soak.SoakResult(targets, "").passed


def test_server_arguments_follow_a_double_dash():
    args = soak.parse_args(["--minutes", "0.5", "--concurrency", "3", "--", "--threads", "2", "--parallel", "8"])
    assert (args.minutes, args.concurrency, args.server_args) == (0.5, 3, ["--threads", "2", "--parallel", "8"])


# --- a few seconds of the real workload -----------------------------------------


@pytest.fixture(scope="module")
def base_url(tiny_model_dir, tmp_path_factory):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", None, None)
    with served(loaded, small_config(ctx_size=256, parallel=4), template=template) as server:
        # Stored Responses, as `inferd serve` keeps them: the soak fetches, cancels and deletes them.
        store_path = tmp_path_factory.mktemp("soak-data") / "responses.sqlite3"
        server.state.responses_store = ResponseStore(store_path, ttl=3600, max_rows=1000)
        thread = ServerThread(server.app).start()
        yield thread.url
        thread.stop()


def test_a_short_soak_leaves_the_server_clean(base_url):
    shape = soak.Shape(system_words=6, user_words=(1, 6), max_tokens=(4, 8))
    result = soak.soak(base_url, None, seconds=1.5, concurrency=3, seed=1, shape=shape)
    by_name = {t.name: t for t in result.targets}
    # /health's latency is the test machine's; everything else is exact.
    for name in ("5xx answers and in-stream errors", "requests without an answer", "answers of the wrong class",
                 "requests running / waiting when idle", "KV blocks used after cache reset"):
        assert by_name[name].passed is True, result.report
    assert by_name["RSS drift after warm-up"].passed is None
    assert " requests in " in result.report


def test_the_workload_reaches_every_generation_route_streaming_and_not():
    workload = soak.Workload("m", random.Random(0), soak.Shape())
    calls = [workload.generation_call(stream) for stream in (True, False) for _ in range(100)]
    assert {(c.path, c.stream) for c in calls} == {
        (path, stream) for stream in (True, False) for path in (
            "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/api/chat",
            "/api/generate", "/completion")}
    assert all(8 <= (c.json_body.get("max_tokens") or c.json_body.get("max_output_tokens")
                     or c.json_body.get("n_predict") or c.json_body["options"]["num_predict"]) <= 32 for c in calls)
