"""Files, batches and jobs behind a router: an id the router has not seen is
looked up on the workers with the key the request goes on with, so a worker
with keys answers for the caller's own jobs only (and the lookup finds
them), the router's worker key replaces it, and router keys are not sent."""

from __future__ import annotations

import httpx
import pytest

from inferd.config import RouterOptions
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from router_fakes import FakeWorker, ServerThread


@pytest.fixture(scope="module")
def workers():
    made = [FakeWorker("a", model="fake-model").start(), FakeWorker("b", model="fake-model").start()]
    yield made
    for w in made:
        w.stop()


def lookups(workers, path: str) -> list[dict]:
    return [r["headers"] for w in workers for r in w.requests if r["path"] == path and r["method"] == "GET"]


@pytest.mark.parametrize(("options", "sent", "seen"), [
    ({}, {"Authorization": "Bearer alice-secret"}, ("authorization", "Bearer alice-secret")),
    ({}, {"x-api-key": "alice-secret"}, ("x-api-key", "alice-secret")),
    ({"worker_api_key": "w-secret"}, {"Authorization": "Bearer alice-secret"}, ("authorization", "Bearer w-secret")),
])
def test_an_unseen_id_is_looked_up_with_the_key_the_request_goes_on_with(workers, options, sent, seen):
    for w in workers:
        w.requests.clear()
    state = build_router_state(RouterOptions(worker=[w.url for w in workers], health_interval=0,
                                             policy="round-robin", **options))
    thread = ServerThread(build_router_app(state)).start()
    try:
        with httpx.Client(base_url=thread.url, timeout=30) as http:
            http.get("/v1/batches/batch_unseen", headers=sent)
    finally:
        thread.stop()
    asked = lookups(workers, "/v1/batches/batch_unseen")
    assert len(asked) >= 2  # one lookup per worker, then the request itself
    name, value = seen
    assert all(h.get(name) == value for h in asked)
