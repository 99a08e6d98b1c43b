"""The router app in-process, in front of fake workers on real ports."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from inferd.config import RouterOptions
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from inferd.router.health import check_fleet
from polling import async_wait_for
from router_fakes import ANTHROPIC_EVENTS, NDJSON_LINES, RESPONSES_EVENTS, SSE_EVENTS, FakeWorker, ServerThread

DEAD_URL = "http://127.0.0.1:1"  # nothing listens on port 1: connection refused, and it sorts first
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Router:
    def __init__(self, urls: list[str], **options):
        options.setdefault("policy", "round-robin")
        self.clock = Clock()
        self.state = build_router_state(RouterOptions(worker=urls, health_interval=0, **options), clock=self.clock)
        self.thread = ServerThread(build_router_app(self.state)).start()
        self.http = httpx.Client(base_url=self.thread.url, timeout=30)

    def check_health(self) -> None:
        self.thread.call(check_fleet(self.state.fleet, self.state.client, self.state.worker_headers))

    def workers(self) -> dict[str, dict]:
        return {w["id"]: w for w in self.http.get("/v1/workers").json()["data"]}

    def metrics(self) -> str:
        return self.http.get("/metrics").text

    def close(self) -> None:
        self.http.close()
        self.thread.stop()


@pytest.fixture(scope="module")
def fakes():
    workers = [FakeWorker("a", aliases=("alias-a",)).start(), FakeWorker("b", model="other-model").start()]
    yield sorted(workers, key=lambda w: w.url)  # round-robin order: ids (URLs) sorted
    for w in workers:
        w.stop()


@pytest.fixture
def pair(fakes):
    """Two fakes serving one model, reset; `first` is round-robin's first pick."""
    first, second = fakes
    for w, name in ((first, "first"), (second, "second")):
        w.name, w.model, w.aliases = name, "fake-model", ()
        w.health_status, w.health_body = 200, {"status": "ok", "model": "fake-model"}
        w.mode, w.die_after, w.fragment, w.hold = "ok", 2, b"", False
        w.aborted.clear()
        w.requests.clear()
        w.stored.clear()
    return first, second


@pytest.fixture
def router_for():
    made = []

    def make(urls, **options) -> Router:
        made.append(Router(urls, **options))
        return made[-1]

    yield make
    for r in made:
        r.close()


# -- forwarding ------------------------------------------------------------


def test_streams_come_back_byte_for_byte_with_end_to_end_headers(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    with router.http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True},
                            headers={"connection": "keep-alive"}) as r:
        body = b"".join(r.iter_raw())
    assert r.status_code == 200
    assert body == b"".join(SSE_EVENTS)
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.headers["x-fake"] == "first"
    assert r.headers["x-inferd-worker"] == first.url
    sent = first.requests[-1]
    assert json.loads(sent["body"]) == {**CHAT, "stream": True}
    assert sent["headers"]["accept-encoding"] == "identity"


def test_non_streaming_answer_and_status_pass_through(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    r = router.http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert r.json() == {"worker": "first", "path": "/v1/chat/completions", "model": "fake-model"}
    r = router.http.post("/v1/chat/completions", json=CHAT)
    assert r.json()["worker"] == "second"  # round-robin


def test_ollama_chat_streams_unless_told_not_to(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    r = router.http.post("/api/chat", json={"model": "fake-model", "messages": []})
    assert r.content == b"".join(NDJSON_LINES)
    assert r.headers["content-type"] == "application/x-ndjson"
    r = router.http.post("/api/chat", json={"model": "fake-model", "messages": [], "stream": False})
    assert r.json()["path"] == "/api/chat"


def test_a_worker_dying_before_a_buffered_answer_is_done_is_retried(pair, router_for):
    first, second = pair
    first.mode = "die"
    router = router_for([first.url, second.url])
    r = router.http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert r.json()["worker"] == "second"
    assert len(first.requests) == 1
    assert router.workers()[first.url]["breaker"] == {"state": "closed", "failures": 1}
    assert 'inferd_router_retries_total{cause="read"} 1.0' in router.metrics()


def test_a_connect_failure_is_retried_on_another_worker(pair, router_for):
    first, _ = pair
    router = router_for([DEAD_URL, first.url])
    r = router.http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert r.json()["worker"] == "first"
    assert router.workers()[DEAD_URL]["breaker"] == {"state": "closed", "failures": 1}
    assert 'inferd_router_retries_total{cause="connect"} 1.0' in router.metrics()


def test_a_stream_is_retried_when_its_worker_fails_before_the_first_event(pair, router_for):
    first, second = pair
    first.mode, first.die_after, first.fragment = "die", 0, b'data: {"cut'
    router = router_for([first.url, second.url])
    r = router.http.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.content == b"".join(SSE_EVENTS)
    assert r.headers["x-fake"] == "second"


def test_a_503_goes_to_another_worker_and_is_passed_on_when_none_is_left(pair, router_for):
    first, second = pair
    first.mode = "unavailable"
    router = router_for([first.url, second.url])
    assert router.http.post("/v1/chat/completions", json=CHAT).json()["worker"] == "second"
    assert router.workers()[first.url]["breaker"]["failures"] == 0  # a loading worker is not a broken one
    second.mode = "unavailable"
    r = router.http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "loading"
    assert r.headers["retry-after"] == "2"


@pytest.mark.parametrize("path, body, events, framing", [
    ("/v1/chat/completions", {**CHAT, "stream": True}, SSE_EVENTS, "openai"),
    ("/v1/messages", {"model": "fake-model", "max_tokens": 4, "messages": [], "stream": True}, ANTHROPIC_EVENTS,
     "anthropic"),
    ("/v1/responses", {"model": "fake-model", "input": "hi", "stream": True}, RESPONSES_EVENTS, "responses"),
    ("/api/chat", {"model": "fake-model", "messages": []}, NDJSON_LINES, "ollama"),
])
def test_a_worker_dying_mid_stream_ends_it_with_the_dialects_error(pair, router_for, path, body, events, framing):
    first, second = pair
    first.mode, first.die_after = "die", 1
    first.fragment = b'{"message":{"con' if framing == "ollama" else b'data: {"cut'
    router = router_for([first.url, second.url])
    r = router.http.post(path, json=body)
    assert r.status_code == 200
    sent = events[0]
    assert r.content.startswith(sent)
    tail = r.content[len(sent):].decode()
    if framing == "ollama":
        assert tail.endswith("\n") and tail.count("\n") == 1
        message = json.loads(tail)["error"]
    elif framing == "openai":
        assert tail.startswith("event: error\ndata: ") and tail.endswith("\n\n")
        error = json.loads(tail.removeprefix("event: error\ndata: "))["error"]
        assert (error["type"], error["code"]) == ("server_error", "worker_failed")
        message = error["message"]
    elif framing == "anthropic":
        assert tail.startswith("event: error\ndata: ") and tail.endswith("\n\n")
        payload = json.loads(tail.removeprefix("event: error\ndata: "))
        assert payload["type"] == "error" and payload["error"]["type"] == "api_error"
        message = payload["error"]["message"]
    else:
        payload = json.loads(tail.removeprefix("event: error\ndata: "))
        assert (payload["type"], payload["code"], payload["sequence_number"]) == ("error", "worker_failed", 1)
        message = payload["message"]
    assert message.startswith(f"worker {first.url} failed mid-answer (")
    assert second.requests == []  # bytes had reached the client: no retry
    assert "inferd_router_stream_errors_total 1.0" in router.metrics()


def test_a_client_leaving_closes_the_workers_stream(pair, router_for):
    first, second = pair
    first.hold = True
    router = router_for([first.url, second.url])
    with router.http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        next(r.iter_raw())
    assert first.aborted.wait(30)
    settled = async_wait_for(lambda: not any(w.in_flight for w in router.state.fleet.workers.values()), timeout=20)
    assert router.thread.call(settled), "a request is still in flight"
    assert router.workers()[first.url]["in_flight"] == 0


# -- choosing --------------------------------------------------------------


def test_x_worker_id_sends_the_request_to_that_worker(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    for _ in range(2):
        r = router.http.post("/v1/chat/completions", json=CHAT, headers={"X-Worker-Id": second.url})
        assert r.json()["worker"] == "second"
    assert "x-worker-id" not in second.requests[-1]["headers"]
    assert f'inferd_router_requests_total{{reason="direct",worker="{second.url}"}} 2.0' in router.metrics()


def test_an_unknown_x_worker_id_is_a_400_in_the_paths_dialect(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    r = router.http.post("/v1/chat/completions", json=CHAT, headers={"X-Worker-Id": "nope"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unknown_worker"
    r = router.http.post("/v1/messages", json={}, headers={"X-Worker-Id": "nope"})
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"


def test_requests_go_only_to_workers_serving_the_model(pair, router_for):
    first, second = pair
    second.model = "other-model"
    router = router_for([first.url, second.url])
    router.check_health()
    for _ in range(3):
        assert router.http.post("/v1/chat/completions", json={**CHAT, "model": "other-model"}).json()["worker"] == \
            "second"
    # A name nobody serves goes to any worker, which answers its own 404.
    assert router.http.post("/v1/chat/completions", json={**CHAT, "model": "nobody"}).status_code == 200


def test_bad_json_is_a_400_and_no_worker_is_a_503(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    r = router.http.post("/v1/chat/completions", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("request body is not valid JSON")
    first.health_status = second.health_status = 503
    router.check_health()
    r = router.http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "no_worker"
    assert first.requests == [] and second.requests == []


@pytest.mark.parametrize(("path", "envelope"), [("/v1/chat/completions", "error"), ("/v1/messages", "type"),
                                              ("/api/chat", "error")])
def test_json_nested_too_deep_is_a_400_in_the_paths_dialect(pair, router_for, path, envelope):
    router = router_for([pair[0].url])
    r = router.http.post(path, content=b"[" * 100_000 + b"]" * 100_000, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert envelope in r.json()
    assert "nested too deeply" in r.text
    assert pair[0].requests == []


def test_stored_responses_are_read_where_they_were_created(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    assert router.http.post("/v1/responses", json={"model": "fake-model", "input": "hi"}).json()["id"] == \
        "resp_first"
    for _ in range(2):
        r = router.http.get("/v1/responses/resp_first")
        assert r.json()["worker"] == "first"
    # Created elsewhere (another router replica): found by asking the workers.
    second.stored.add("resp_elsewhere")
    assert router.http.get("/v1/responses/resp_elsewhere").json()["worker"] == "second"
    r = router.http.post("/v1/responses", json={"model": "fake-model", "input": "more",
                                                "previous_response_id": "resp_elsewhere"})
    assert r.headers["x-inferd-worker"] == second.url
    # A streamed creation names its response in its first event.
    streamed = router.http.post("/v1/responses", json={"model": "fake-model", "input": "hi", "stream": True})
    assert router.state.owners.owner("resp_s1") == streamed.headers["x-inferd-worker"]


# -- the fleet -------------------------------------------------------------


def test_workers_lists_the_fleet(pair, router_for):
    first, second = pair
    router = router_for([first.url, f"fake-model={second.url}"])
    assert router.workers()[second.url] == {
        "id": second.url, "url": second.url, "model": "fake-model", "models": ["fake-model"], "source": "static",
        "state": "ready", "ready": True, "in_flight": 0, "parallel": None, "capabilities": [],
        "breaker": {"state": "closed", "failures": 0},
    }
    assert router.workers()[first.url]["model"] is None
    router.check_health()
    assert router.workers()[first.url]["model"] == "fake-model"


def test_health_counts_routable_workers(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    assert (router.http.get("/health").status_code, router.http.get("/health").json()) == \
        (200, {"status": "ok", "workers": 2})
    first.health_status, first.health_body = 503, {"status": "loading"}
    router.check_health()
    assert router.http.get("/health").json() == {"status": "ok", "workers": 1}
    assert router.workers()[first.url]["state"] == "not-ready"
    second.health_status, second.health_body = 200, {"status": "draining"}
    router.check_health()
    r = router.http.get("/health")
    assert (r.status_code, r.json()) == (503, {"status": "no workers", "workers": 0})


def test_health_does_not_count_a_dead_worker_while_it_is_probed(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url], breaker_failures=1, breaker_successes=2, breaker_cooldown=5)
    first.health_status = 500
    router.check_health()  # the breaker opens
    counts = []
    for _ in range(3):  # each cooldown lets a probe through; each probe fails
        router.clock.now += 6
        counts.append(router.http.get("/health").json()["workers"])
        router.check_health()
        counts.append(router.http.get("/health").json()["workers"])
    assert counts == [1] * 6
    first.health_status = 200  # it comes back: counted once its probes prove it
    router.clock.now += 6
    router.check_health()
    assert router.http.get("/health").json()["workers"] == 1
    router.check_health()
    assert router.http.get("/health").json()["workers"] == 2


def test_models_are_the_union_across_the_fleet(pair, router_for):
    first, second = pair
    first.aliases = ("gpt-4o-mini",)
    second.model = "other-model"
    router = router_for([first.url, second.url])
    router.check_health()
    ids = [m["id"] for m in router.http.get("/v1/models").json()["data"]]
    assert sorted(ids) == ["fake-model", "gpt-4o-mini", "other-model"]
    tags = router.http.get("/api/tags").json()["models"]
    assert sorted((t["name"], t.get("digest")) for t in tags) == [
        ("fake-model", "first"), ("gpt-4o-mini", ""), ("other-model", "second")]


def test_cache_view_shows_what_the_policy_believes(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url], policy="kv-aware")
    router.http.post("/v1/chat/completions", json=CHAT)
    chosen = first.url if first.requests else second.url
    view = router.http.get(f"/v1/admin/cache-view/{chosen}").json()
    assert (view["worker"], view["policy"]) == (chosen, "kv-aware")
    r = router.http.get("/v1/admin/cache-view/nope")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "not_found_error"


def test_the_breaker_opens_after_failures_and_closes_after_successes(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url], breaker_failures=3, breaker_successes=2, breaker_cooldown=5.0)
    first.health_status = 500
    for failures in (1, 2):
        router.check_health()
        assert router.workers()[first.url]["breaker"] == {"state": "closed", "failures": failures}
    router.check_health()
    assert router.workers()[first.url]["state"] == "unhealthy"
    assert router.workers()[first.url]["breaker"] == {"state": "open", "failures": 3}
    assert f'inferd_router_breaker_state{{worker="{first.url}"}} 2.0' in router.metrics()
    for _ in range(3):  # no traffic while open
        assert router.http.post("/v1/chat/completions", json=CHAT).json()["worker"] == "second"
    first.health_status = 200
    router.clock.now += 5.0  # the cooldown passes: half-open
    router.check_health()
    assert router.workers()[first.url]["breaker"]["state"] == "half-open"
    router.check_health()
    assert router.workers()[first.url]["breaker"] == {"state": "closed", "failures": 0}
    assert f'inferd_router_breaker_state{{worker="{first.url}"}} 0.0' in router.metrics()


def test_metrics_name_decisions_retries_and_load(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url], policy="kv-aware")
    router.http.post("/v1/chat/completions", json=CHAT)
    text = router.metrics()
    families = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert families.items() >= {
        "inferd_router_requests_total": "counter", "inferd_router_retries_total": "counter",
        "inferd_router_stream_errors_total": "counter", "inferd_router_predicted_cache_hit": "histogram",
        "inferd_router_breaker_state": "gauge", "inferd_router_in_flight": "gauge",
        "inferd_router_worker_ready": "gauge", "inferd_router_workers_routable": "gauge",
    }.items()
    assert "inferd_router_predicted_cache_hit_count 1.0" in text
    assert 'reason="least-load"' in text  # a first prompt matches nothing anywhere


# -- keys ------------------------------------------------------------------


def test_router_keys_guard_it_and_workers_get_their_own(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url], api_key=["client-key"], worker_api_key="worker-key")
    assert router.http.post("/v1/chat/completions", json=CHAT).status_code == 401
    assert router.http.get("/health").status_code == 200
    r = router.http.post("/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer client-key"})
    assert r.status_code == 200
    assert first.requests[-1]["headers"]["authorization"] == "Bearer worker-key"


def test_without_keys_of_its_own_the_clients_key_reaches_the_worker(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    router.http.post("/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer passed"})
    assert first.requests[-1]["headers"]["authorization"] == "Bearer passed"


def test_concurrent_streams_all_arrive_whole(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url], policy="least-load")
    bodies = []

    def one():
        with httpx.Client(base_url=router.thread.url, timeout=30) as c:
            bodies.append(c.post("/v1/chat/completions", json={**CHAT, "stream": True}).content)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bodies == [b"".join(SSE_EVENTS)] * 8
    assert len(first.requests) + len(second.requests) == 8


def test_files_and_batches_are_read_where_they_were_created(pair, router_for):
    first, second = pair
    router = router_for([first.url, second.url])
    owners = router.state.owners
    # A batch's answer names the batch and its output files: all kept by the worker that sent it.
    assert owners.learn(router.state.fleet.get(second.url),
                        b'{"id": "batch_b1", "output_file_id": "file-out1", "error_file_id": null}')
    assert (owners.owner("batch_b1"), owners.owner("file-out1")) == (second.url, second.url)
    owners.remember("file-in1", second.url)
    owners.remember("msgbatch_m1", second.url)
    for _ in range(2):
        assert router.http.get("/v1/batches/batch_b1").json()["worker"] == "second"
        assert router.http.get("/v1/files/file-out1/content").json()["worker"] == "second"
        assert router.http.get("/v1/jobs/batch_b1/events").json()["worker"] == "second"
        assert router.http.get("/v1/messages/batches/msgbatch_m1/results").json()["worker"] == "second"
        r = router.http.post("/v1/batches", json={"input_file_id": "file-in1", "endpoint": "/v1/chat/completions"})
        assert r.json()["worker"] == "second"
    # An id no answer named is looked up on every worker; each fake says it has it, and the first wins.
    assert router.http.get("/v1/batches/batch_unseen").json()["worker"] == "first"
