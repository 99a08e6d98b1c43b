"""SIGTERM against a real `inferd serve`: what the drain cannot finish ends
in each dialect's own error, and connections with nothing in flight never
hold the drain to its timeout."""

from __future__ import annotations

import json
import threading
import time

from fleet import long_context_model
from polling import wait_for
from router_process import RouterProcess
from server import ServerProcess

LOOPING = "Repeat the word hello forever: hello hello hello hello hello hello hello hello"  # greedy never ends it


def test_requests_the_drain_cannot_finish_end_with_their_dialects_error(server_logs):
    server = ServerProcess(None, parallel=4, ctx_size=4096, shutdown_timeout=3, log_path=server_logs / "cut.log")
    server.start()
    results: dict[str, object] = {}
    calls = {
        "openai": ("/v1/chat/completions", {"messages": [{"role": "user", "content": LOOPING}], "max_tokens": 3000,
                                             "ignore_eos": True, "temperature": 0, "stream": True}),
        "anthropic": ("/v1/messages", {"model": "gemma-3-270m", "messages": [{"role": "user", "content": LOOPING}],
                                       "max_tokens": 3000, "temperature": 0, "stream": True}),
        "ollama": ("/api/generate", {"model": "gemma-3-270m", "prompt": LOOPING, "options": {"temperature": 0,
                                                                               "num_predict": 3000}}),
        "whole": ("/v1/completions", {"prompt": LOOPING, "max_tokens": 3000, "ignore_eos": True, "temperature": 0}),
    }

    def call(name: str, path: str, body: dict) -> None:
        try:
            with server.http(timeout=60) as client, client.stream("POST", path, json=body) as r:
                results[name] = (r.status_code, [line for line in r.iter_lines() if line])
        except Exception as e:  # reported by the assertions below
            results[name] = e

    threads = [threading.Thread(target=call, args=(name, *c)) for name, c in calls.items()]
    try:
        for t in threads:
            t.start()
        assert wait_for(lambda: server.health().json()["running"] == 4, timeout=30.0, interval=0.01), \
            f"the four requests never ran together: {server.health().json()}, {results}"
        time.sleep(0.5)  # every stream has sent its first events
        stopping = time.monotonic()
        server.terminate()
        for t in threads:
            t.join(30)
        code = server.wait(30)
        took = time.monotonic() - stopping
    finally:
        server.kill()

    assert code == 0, f"inferd serve exited with {code} after SIGTERM:\n{server.log_tail()}"
    # Generating on would take over a minute: ending near the timeout is what the drain does (slack for a busy host).
    assert 2.0 <= took < 10, f"the drain took {took:.1f}s with --shutdown-timeout 3"
    assert "Traceback" not in server.log(), server.log_tail(60)
    assert "timeout graceful shutdown exceeded" not in server.log()
    message = "the server is shutting down; send the request again"

    status, lines = results["openai"]
    assert status == 200 and lines[-2] == "event: error", lines[-3:]
    assert json.loads(lines[-1].removeprefix("data: ")) == {"error": {
        "message": message, "type": "service_unavailable", "param": None, "code": "shutting_down"}}
    assert all(json.loads(line[6:])["choices"][0]["finish_reason"] is None for line in lines[1:-2]
               if line.startswith("data: {"))

    status, lines = results["anthropic"]
    assert status == 200 and lines[-2] == "event: error", lines[-3:]
    assert json.loads(lines[-1].removeprefix("data: ")) == {
        "type": "error", "error": {"type": "overloaded_error", "message": message}}
    assert not any(line == "event: message_stop" for line in lines)

    status, lines = results["ollama"]
    assert status == 200 and json.loads(lines[-1]) == {"error": message}
    assert all(json.loads(line)["done"] is False for line in lines[:-1])

    status, lines = results["whole"]
    assert status == 503 and json.loads("".join(lines)) == {"error": {
        "message": message, "type": "service_unavailable", "param": None, "code": "shutting_down"}}


def test_the_drain_ends_requests_on_a_model_loaded_on_demand(tiny_model_dir, tmp_path, server_logs):
    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model

    data = tmp_path / "data"
    import_model(ModelStore(data / "models"), long_context_model(tiny_model_dir, tmp_path / "tiny-4k"),
                 name="tiny-long")
    server = ServerProcess(tiny_model_dir, parallel=2, ctx_size=4096, shutdown_timeout=2,
                           log_path=server_logs / "cut-hosted.log", extra_args=["--data-dir", str(data)])
    server.start()
    started = threading.Event()
    lines: list[str] = []

    def call() -> None:
        body = {"model": "tiny-long", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3900,
                "ignore_eos": True, "temperature": 0, "stream": True}
        with server.http(timeout=60) as client, client.stream("POST", "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line:
                    lines.append(line)
                    started.set()

    reader = threading.Thread(target=call, daemon=True)
    try:
        reader.start()
        assert started.wait(60), f"the stored model never answered:\n{server.log_tail()}"
        server.terminate()
        reader.join(30)
        code = server.wait(30)
    finally:
        server.kill()

    assert code == 0, server.log_tail()
    assert "Traceback" not in server.log() and "timeout graceful shutdown exceeded" not in server.log(), \
        server.log_tail(60)
    assert lines[-2] == "event: error", lines[-3:]
    assert json.loads(lines[-1].removeprefix("data: "))["error"]["code"] == "shutting_down"


def test_connections_with_nothing_in_flight_do_not_hold_the_drain(tiny_model_dir, server_logs):
    server = ServerProcess(tiny_model_dir, parallel=2, ctx_size=256, shutdown_timeout=30,
                           log_path=server_logs / "idle.log")
    server.start()
    subscribed = threading.Event()
    events: list[dict] = []

    def subscribe() -> None:  # a router's KV-event subscription: a stream with no end of its own
        with server.http(timeout=60) as client, client.stream("GET", "/v1/kv-events") as r:
            for line in r.iter_lines():
                events.append(json.loads(line))
                subscribed.set()

    try:
        with server.http() as keep_alive:
            assert keep_alive.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2}).status_code == 200
            reader = threading.Thread(target=subscribe, daemon=True)
            reader.start()
            assert subscribed.wait(10), "no snapshot on /v1/kv-events"
            stopping = time.monotonic()
            server.terminate()  # the keep-alive connection is open and idle
            code = server.wait(10)
            took = time.monotonic() - stopping
            reader.join(5)
    finally:
        server.kill()

    assert code == 0, server.log_tail()
    assert took < 15, f"the drain took {took:.1f}s with only idle connections open (--shutdown-timeout 30)"
    assert events[0]["type"] == "snapshot" and not reader.is_alive()
    assert "Traceback" not in server.log(), server.log_tail(60)


def test_a_router_out_of_drain_time_ends_forwarded_answers_with_their_dialects_error(
        tiny_model_dir, tmp_path, server_logs):
    model = long_context_model(tiny_model_dir, tmp_path / "tiny-4k")
    worker = ServerProcess(model, parallel=4, ctx_size=4096, log_path=server_logs / "cut-worker.log")
    worker.start()
    router = RouterProcess([worker.base_url], extra_args=["--shutdown-timeout", "2"],
                           log_path=server_logs / "cut-router.log")
    results: dict[str, object] = {}
    body = {"max_tokens": 3900, "ignore_eos": True, "temperature": 0}  # the chat template takes ~100 positions
    calls = {
        "openai": ("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": "Hi"}], "stream": True}),
        "anthropic": ("/v1/messages", {"model": worker.model_name, "max_tokens": 3900, "stream": True,
                                       "messages": [{"role": "user", "content": "Hi"}], "ignore_eos": True}),
        "whole": ("/v1/completions", {**body, "prompt": "Hi"}),
    }

    def call(name: str, path: str, request: dict) -> None:
        try:
            with router.http(timeout=60) as client, client.stream("POST", path, json=request) as r:
                results[name] = (r.status_code, [line for line in r.iter_lines() if line])
        except Exception as e:  # reported by the assertions below
            results[name] = e

    threads = [threading.Thread(target=call, args=(name, *c)) for name, c in calls.items()]
    try:
        router.start()
        with router.http() as idle:  # a keep-alive connection with nothing in flight
            assert idle.get("/health").status_code == 200
            for t in threads:
                t.start()
            assert wait_for(lambda: worker.health().json()["running"] == 3, timeout=30.0, interval=0.01), \
                f"the three requests never ran together: {worker.health().json()}, {str(results)[:1000]}"
            time.sleep(0.3)  # the streams have sent their first events
            stopping = time.monotonic()
            router.terminate()
            for t in threads:
                t.join(30)
            code = router.wait(30)
            took = time.monotonic() - stopping
        assert wait_for(lambda: worker.health().json()["running"] == 0, timeout=5.0, interval=0.05), \
            "the worker still generates for answers the router ended"
    finally:
        router.kill()
        worker.stop()

    assert code == 0, f"inferd router exited with {code} after SIGTERM:\n{router.log_tail()}"
    assert 0.9 <= took < 8, f"the drain took {took:.1f}s with --shutdown-timeout 2"
    assert "Traceback" not in router.log(), router.log_tail(60)
    message = "the router is shutting down; send the request again"

    status, lines = results["openai"]
    assert status == 200 and lines[-2] == "event: error", lines[-3:]
    assert json.loads(lines[-1].removeprefix("data: ")) == {"error": {
        "message": message, "type": "service_unavailable", "param": None, "code": "shutting_down"}}

    status, lines = results["anthropic"]
    assert status == 200 and lines[-2] == "event: error", lines[-3:]
    assert json.loads(lines[-1].removeprefix("data: ")) == {
        "type": "error", "error": {"type": "overloaded_error", "message": message}}

    status, lines = results["whole"]
    assert status == 503 and json.loads("".join(lines)) == {"error": {
        "message": message, "type": "service_unavailable", "param": None, "code": "shutting_down"}}
