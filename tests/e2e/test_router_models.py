"""`inferd router` over two workers that serve different models, end to end:
the shared tiny server (its model answers as gpt-4o-mini) and the store
server (tiny-stored, from its model store). A request goes to the worker
that has its model; the router's /v1/models lists both workers' models."""

from __future__ import annotations

import pytest
from router_process import RouterProcess

openai = pytest.importorskip("openai")

PROMPT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def router(tiny_server, store_server, server_logs):
    with RouterProcess(workers=[tiny_server.base_url, store_server.base_url], policy="round-robin",
                       log_path=server_logs / "router-models.log") as router:
        yield router


def worker_ids(router) -> dict[str, str]:
    """Each worker's base URL -> the id the router names it by."""
    return {w["url"].rstrip("/"): w["id"] for w in router.fleet()}


def test_each_request_goes_to_the_worker_with_its_model(router, tiny_server, store_server):
    ids = worker_ids(router)
    expected = {tiny_server.model_name: ids[tiny_server.base_url], "tiny-stored": ids[store_server.base_url]}
    with router.openai() as client:
        for _ in range(3):  # round-robin alone would alternate workers; the model decides
            for model, worker in expected.items():
                raw = client.chat.completions.with_raw_response.create(model=model, messages=PROMPT, max_tokens=2)
                assert (raw.parse().model, raw.headers["x-inferd-worker"]) == (model, worker)


def test_the_routers_model_list_has_both_workers_models(router, tiny_server):
    with router.openai() as client:
        listed = [m.id for m in client.models.list().data]
    assert {tiny_server.model_name, "tiny-stored"} <= set(listed)
    assert len(listed) == len(set(listed))  # a model stored on both workers is listed once
