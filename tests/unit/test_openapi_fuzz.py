"""Schema-driven fuzzing of every dialect's routes, on the server and on the
router in front of it: requests generated from the server's /openapi.json,
valid and invalid, never get a 5xx, and every 4xx answers in the envelope of
the dialect that owns its path (`api.registry.dialect_for_path`).

The server runs under uvicorn in a thread so the router can forward to it;
both are driven over real HTTP.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hub_server import HubServer
from router_fakes import ServerThread
from schemathesis import GenerationMode
from served import served, small_config

from inferd.api.registry import dialect_for_path, endpoints
from inferd.config import RouterOptions
from inferd.models.loader import load_model
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from inferd.router.health import check_fleet
from inferd.server.assemble import attach_jobs, start_jobs

# Examples per operation and mode. The router's generated cases reach the
# same worker, so it needs fewer; the file stays near a minute on two cores.
EXAMPLES = 4
ROUTER_EXAMPLES = 3

# Every operation in the server's schema, each fuzzed below. A route added to
# the server fails test_every_server_route_is_fuzzed until it is listed here.
SERVER_OPERATIONS = [
    ("GET", "/health"), ("GET", "/v1/cache/stats"), ("POST", "/v1/cache/reset"),
    ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions/input_tokens"), ("POST", "/v1/completions"),
    ("GET", "/v1/models"),
    ("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses"), ("POST", "/v1/responses/input_tokens"), ("GET", "/v1/responses/{response_id}"),
    ("DELETE", "/v1/responses/{response_id}"), ("POST", "/v1/responses/{response_id}/cancel"),
    ("POST", "/completion"), ("POST", "/infill"), ("POST", "/tokenize"), ("POST", "/detokenize"),
    ("POST", "/apply-template"), ("GET", "/slots"), ("GET", "/props"),
    ("POST", "/api/chat"), ("POST", "/api/generate"), ("GET", "/api/tags"), ("POST", "/api/show"),
    ("GET", "/api/ps"), ("GET", "/api/version"), ("POST", "/api/embeddings"), ("POST", "/api/embed"),
    ("POST", "/api/pull"), ("DELETE", "/api/delete"), ("POST", "/api/copy"), ("GET", "/v1/models/{model_id}"),
    ("POST", "/v1/audio/transcriptions"), ("POST", "/v1/audio/translations"), ("POST", "/v1/audio/speech"),
    ("GET", "/v1/audio/voices"),
    ("POST", "/v1/embeddings"), ("POST", "/embedding"), ("POST", "/embeddings"), ("POST", "/v1/rerank"),
    ("GET", "/api/keys"), ("POST", "/api/keys"), ("PATCH", "/api/keys/{name}"), ("DELETE", "/api/keys/{name}"),
    ("POST", "/api/keys/{name}/rotate"), ("GET", "/api/usage"), ("GET", "/v1/requests"), ("GET", "/v1/requests/{id}"),
    ("POST", "/v1/requests/{id}/cancel"), ("POST", "/v1/requests/{id}/interrupt"),
    ("GET", "/v1/files"), ("POST", "/v1/files"), ("GET", "/v1/files/{file_id}"), ("DELETE", "/v1/files/{file_id}"),
    ("GET", "/v1/files/{file_id}/content"), ("GET", "/v1/batches"), ("POST", "/v1/batches"),
    ("GET", "/v1/batches/{batch_id}"), ("POST", "/v1/batches/{batch_id}/cancel"), ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{job_id}"), ("POST", "/v1/jobs/{job_id}/cancel"), ("GET", "/v1/jobs/{job_id}/events"),
    ("GET", "/v1/messages/batches"), ("POST", "/v1/messages/batches"), ("GET", "/v1/messages/batches/{batch_id}"),
    ("DELETE", "/v1/messages/batches/{batch_id}"), ("POST", "/v1/messages/batches/{batch_id}/cancel"),
    ("GET", "/v1/messages/batches/{batch_id}/results"),
]
# An endless NDJSON stream with no input to vary (tests/unit/test_kv_events_route.py covers it),
NOT_FUZZED = [("GET", "/v1/kv-events"),
              ("POST", "/slots/{slot_id}")]  # writes files: tests/unit/test_llamacpp_slot_files.py

FORWARDED = sorted((method, e.path) for e in endpoints().values() for method in e.methods)
ROUTED_OPERATIONS = [op for op in SERVER_OPERATIONS if op in FORWARDED]


@pytest.fixture(scope="module")
def worker(tiny_model_dir, tmp_path_factory):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    # A request that sets no max_tokens stops after 4: generation is not what is fuzzed.
    config = small_config(ctx_size=64, parallel=4, max_body_size=64 * 1024, default_max_tokens=4,
                          data_dir=str(tmp_path_factory.mktemp("fuzz-data")))
    # Pulls go to an empty hub of the test's own, which knows no repository: never to the network.
    with served(loaded, config) as server, HubServer() as hub, pytest.MonkeyPatch.context() as env:
        env.setenv("HF_ENDPOINT", hub.url)
        jobs = attach_jobs(server.app, server.state, config.data_dir)  # files, batches and jobs, as serve has them
        thread = ServerThread(server.app).start()
        thread.call(_start_jobs(server))
        yield thread
        thread.call(jobs.runner.stop())
        thread.stop()
        jobs.close()


async def _start_jobs(server) -> None:
    start_jobs(server.app, server.state)


@pytest.fixture(scope="module")
def router(worker, tiny_model_dir):
    """A precise-mode router (so every body is also read for routing text and
    token ids) in front of the one worker."""
    options = RouterOptions(worker=[worker.url], policy="precise", tokenizer=str(tiny_model_dir),
                            health_interval=0, max_body_size=64 * 1024)
    state = build_router_state(options)
    thread = ServerThread(build_router_app(state)).start()
    thread.call(check_fleet(state.fleet, state.client, state.worker_headers))
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def server_schema(worker):
    return schemathesis.openapi.from_dict(httpx.get(f"{worker.url}/openapi.json", timeout=60).json())


def operation(schema, method: str, path: str):
    return schema[path][method]


def assert_in_dialect_envelope(path: str, status: int, text: str) -> None:
    """A 4xx body is the error envelope of the dialect that owns `path`, with a message."""
    body = json.loads(text)
    dialect = dialect_for_path(path).name
    if dialect == "anthropic":
        assert body["type"] == "error" and set(body) == {"type", "error"}
        assert set(body["error"]) == {"type", "message"}
        message = body["error"]["message"]
    elif dialect == "ollama":
        assert set(body) == {"error"}
        message = body["error"]
    elif body.get("error", {}).get("type") == "exceed_context_size_error":  # llama-server's, with its numbers
        assert set(body) == {"error"} and status == 400
        assert set(body["error"]) == {"message", "type", "param", "code", "n_prompt_tokens", "n_ctx"}
        message = body["error"]["message"]
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
        message = body["error"]["message"]
    assert isinstance(message, str) and message


# Documented refusals ("not implemented"); none today. Any other 5xx is the server's fault.
NOT_IMPLEMENTED: set[str] = set()


def assert_answer_is_a_client_error_or_success(method: str, path: str, status: int, text: str) -> None:
    where = f"{method} {path} -> {status}: {text[:500]}"
    assert status < 500 or (status == 501 and path in NOT_IMPLEMENTED), where
    if status >= 400:
        try:
            assert_in_dialect_envelope(path, status, text)
        except (AssertionError, ValueError, KeyError, TypeError) as e:
            raise AssertionError(f"not in {dialect_for_path(path).name}'s error envelope: {where}") from e


def fuzz(op, base_url: str, examples: int = EXAMPLES) -> None:
    """Valid and invalid cases for `op` sent to `base_url`."""
    modes = [op.as_strategy(GenerationMode.POSITIVE)]
    if op.body:  # path parameters are free strings: only a body has an invalid form
        modes.append(op.as_strategy(GenerationMode.NEGATIVE))
    for strategy in modes:

        @given(case=strategy)
        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case):
            response = case.call(base_url=base_url, timeout=60)
            text = response.text if response.status_code >= 400 else ""  # a success may be audio, not text
            assert_answer_is_a_client_error_or_success(case.method, case.path, response.status_code, text)

        check()


def test_every_server_route_is_fuzzed(server_schema):
    in_schema = {(op.method.upper(), op.path) for op in (r.ok() for r in server_schema.get_all_operations())}
    assert in_schema == set(SERVER_OPERATIONS) | set(NOT_FUZZED)


@pytest.mark.parametrize("method, path", SERVER_OPERATIONS, ids=[f"{m} {p}" for m, p in SERVER_OPERATIONS])
def test_server_answers_every_case_without_a_5xx_in_the_routes_dialect(server_schema, worker, method, path):
    fuzz(operation(server_schema, method, path), worker.url)


@pytest.mark.parametrize("method, path", ROUTED_OPERATIONS, ids=[f"{m} {p}" for m, p in ROUTED_OPERATIONS])
def test_router_answers_every_case_without_a_5xx_in_the_routes_dialect(server_schema, router, method, path):
    fuzz(operation(server_schema, method, path), router.url, ROUTER_EXAMPLES)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
# Bodies no schema describes: any JSON value (not only objects), the routes'
# own field names with values of any type, and bytes that are not JSON or not UTF-8.
FIELDS = ("model", "messages", "prompt", "input", "system", "tools", "stream", "content", "previous_response_id")
BODIES = (JSON.map(json.dumps)
          | st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4).map(json.dumps)
          | st.binary(max_size=16).map(lambda b: b.decode("latin-1")))


@pytest.mark.parametrize("method, path", FORWARDED, ids=[f"{m} {p}" for m, p in FORWARDED])
def test_router_answers_any_body_on_every_forwarded_path_without_a_5xx(router, method, path):
    """Every path the router forwards, those the server's schema does not list included."""
    with httpx.Client(base_url=router.url, timeout=60) as http:

        @given(body=BODIES, response_id=st.text(min_size=1, max_size=8))
        @settings(max_examples=ROUTER_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(body, response_id):
            url = path.replace("{response_id}", quote(response_id, safe=""))
            content = body.encode("latin-1") if method != "GET" else None
            r = http.request(method, url, content=content, headers={"content-type": "application/json"})
            assert_answer_is_a_client_error_or_success(method, path, r.status_code, r.text)

        check()


@pytest.mark.parametrize("sent, worker_saw", [("resp_a%00", "resp_a\x00"), ("resp_a%0Ab", "resp_a\nb"),
                                              ("resp_a%23b", "resp_a#b"), ("resp_a%3Fb", "resp_a?b")])
def test_router_forwards_a_path_with_its_escapes_as_the_client_sent_it(router, sent, worker_saw):
    """An escaped control character once made a URL the router's HTTP client
    refused (a 500); a fragment or query mark must stay part of the path."""
    r = httpx.get(f"{router.url}/v1/responses/{sent}")
    assert r.status_code == 404
    assert r.json()["error"]["message"] == f"Response with id '{worker_saw}' not found."
