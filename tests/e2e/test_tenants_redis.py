"""Two `inferd router` replicas sharing one key store and one Redis enforce
one rpm together: of requests spread over both, the limit's worth are
admitted (within one), the rest get OpenAI's 429; usage the worker reports
reaches the routers' ledger."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from inferd.tenants.keyring import KeyRing
from inferd.tenants.store import KeyStore
from polling import wait_for
from redis_server import RedisServer, redis_or_skip
from router_process import RouterProcess

RPM = 10


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), binary=redis_or_skip())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shared_key(tmp_path_factory):
    folder = tmp_path_factory.mktemp("router-keys")
    ring = KeyRing(KeyStore.in_dir(folder))
    _, admin = ring.add("admin", {"admin": True})
    _, secret = ring.add("shared", {"rpm": RPM})
    ring.store.close()
    return folder, secret, admin


def test_two_routers_enforce_one_rpm_through_redis(tiny_server, redis, shared_key, server_logs):
    folder, secret, admin = shared_key
    args = ["--data-dir", str(folder), "--rate-limit-storage", redis.url]
    with RouterProcess([tiny_server.base_url], extra_args=args, log_path=server_logs / "router-a.log") as a, \
            RouterProcess([tiny_server.base_url], extra_args=args, log_path=server_logs / "router-b.log") as b:
        body = {"model": tiny_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        headers = {"Authorization": f"Bearer {secret}"}

        async def spread():
            async with httpx.AsyncClient(timeout=60.0) as client:
                return await asyncio.gather(*(
                    client.post(f"{router.base_url}/v1/chat/completions", json=body, headers=headers)
                    for router in [a, b] * 12))

        answers = asyncio.run(spread())
        ok = [r for r in answers if r.status_code == 200]
        refused = [r for r in answers if r.status_code == 429]
        assert len(ok) + len(refused) == len(answers)
        assert RPM <= len(ok) <= RPM + 1
        assert {r.json()["error"]["code"] for r in refused} == {"rate_limit_exceeded"}
        assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
        assert {r.headers["x-request-id"] for r in ok} and all(r.headers["x-inferd-worker"] for r in ok)
        expected = {kind: sum(r.json()["usage"][f"{kind}_tokens"] for r in ok) for kind in ("prompt", "completion")}

        def ledger() -> dict:  # one key store behind both routers; each writes its share within a second
            with httpx.Client(timeout=30.0) as client:
                totals = client.get(f"{a.base_url}/api/usage", headers=headers).json()["totals"]
            return {kind: totals[f"{kind}_tokens"] for kind in ("prompt", "completion")}

        assert wait_for(lambda: ledger() == expected, timeout=10), (ledger(), expected)

        # Request cards through a router: its own requests, under its key; cancel reaches the worker.
        trace = "through-router-a"
        stream_body = {**body, "max_tokens": 150, "stream": True, "ignore_eos": True}  # the worker: --ctx-size 256
        with httpx.Client(base_url=a.base_url, timeout=60.0, headers={"Authorization": f"Bearer {admin}"}) as http:
            with http.stream("POST", "/v1/chat/completions", json=stream_body, headers={"x-request-id": trace}) as r:
                chunks = r.iter_text()
                next(chunks)

                def running():
                    card = http.get(f"/v1/requests/{trace}")
                    return card.status_code == 200 and card.json()["state"] == "running" and card.json()
                card = wait_for(running, timeout=10)
                assert card and card["key"] == "admin" and card["worker"]
                assert http.post(f"/v1/requests/{trace}/cancel").status_code == 200
                rest = "".join(chunks)
            assert "event: error" in rest and "cancelled" in rest
            listed = http.get("/v1/requests").json()["data"]
            assert trace in {c["trace_id"] for c in listed}
            assert http.get(f"{b.base_url}/v1/requests/{trace}").status_code == 404  # router b did not forward it
