"""Two `inferd router` replicas, one etcd and one Redis: a key added on one
replica works on the other (etcd holds its hash, never a secret); both
enforce one rpm together (of requests spread over both, the limit's worth are
admitted, within one); usage the worker reports reaches the ledger, for a
stream that reports none too (the worker's count, asked for), and for a
stream its client left (the worker's card, the one its answer named, even
when another key's running request shares its trace id); request
cards, and a cancel, work through a replica; a rotation on one replica kills
the old secret on both, and a removal reaches both."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from polling import wait_for
from redis_server import RedisServer, redis_or_skip
from router_process import RouterProcess

ADMIN = "routers-admin-secret"
RPM = 10


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), binary=redis_or_skip())
    server.start()
    yield server
    server.stop()


def status(router, secret: str) -> int:
    with httpx.Client(timeout=30.0) as client:
        return client.get(f"{router.base_url}/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code


def test_two_replicas_share_keys_limits_and_cards(tiny_server, etcd_server, redis, server_logs):
    import aetcd

    common = dict(workers=[tiny_server.base_url], etcd=f"{etcd_server.host}:{etcd_server.port}", api_key=[ADMIN],
                  wait_workers=1, extra_args=["--rate-limit-storage", redis.url])
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with RouterProcess(log_path=server_logs / "router-a.log", **common) as a, \
            RouterProcess(log_path=server_logs / "router-b.log", **common) as b, \
            httpx.Client(timeout=60.0) as http:
        made = http.post(f"{a.base_url}/api/keys", json={"name": "shared", "limits": {"rpm": RPM}}, headers=admin)
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
        assert wait_for(lambda: status(b, secret) == 200, timeout=10), "the key never reached replica b"

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
        assert RPM <= len(ok) <= RPM + 1  # GET /v1/models above generates nothing: not counted
        assert {r.json()["error"]["code"] for r in refused} == {"rate_limit_exceeded"}
        assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
        assert all(r.headers["x-request-id"] and r.headers["x-inferd-worker"] for r in ok)
        for router in (a, b):  # each replica's ledger: what it admitted, as the worker reported it
            mine = [r for r in ok if str(r.url).startswith(router.base_url)]
            expected = {k: sum(r.json()["usage"][f"{k}_tokens"] for r in mine) for k in ("prompt", "completion")}

            def ledger() -> dict:
                totals = http.get(f"{router.base_url}/api/usage", params={"key": "shared"}, headers=admin).json()
                return {k: totals["totals"][f"{k}_tokens"] for k in ("prompt", "completion")}

            assert wait_for(lambda: ledger() == expected, timeout=10), (ledger(), expected)

        # An OpenAI stream without include_usage reports no usage; the worker's count, asked for, settles it.
        streamer = http.post(f"{a.base_url}/api/keys", json={"name": "streamer"}, headers=admin).json()["secret"]
        prompt = http.post(f"{a.base_url}/v1/chat/completions", json=body, headers=admin).json()["usage"]
        streamed = http.post(f"{a.base_url}/v1/chat/completions", json={**body, "stream": True, "ignore_eos": True},
                             headers={"Authorization": f"Bearer {streamer}"})
        assert streamed.status_code == 200 and '"usage"' not in streamed.text

        def streamer_ledger() -> tuple:
            totals = http.get(f"{a.base_url}/api/usage", params={"key": "streamer"}, headers=admin).json()["totals"]
            return totals["prompt_tokens"], totals["completion_tokens"]

        assert wait_for(lambda: streamer_ledger() == (prompt["prompt_tokens"], 2), timeout=10), streamer_ledger()

        # A stream its client leaves early settles to the count on the worker's card, not the estimate.
        leaver = http.post(f"{a.base_url}/api/keys", json={"name": "leaver"}, headers=admin).json()["secret"]
        left = {**body, "stream": True, "ignore_eos": True, "max_tokens": 150}
        with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=left,
                         headers={"Authorization": f"Bearer {leaver}", "x-request-id": "left-early"}) as r:
            next(r.iter_text())

        def ended():
            card = http.get(f"{a.base_url}/v1/requests/left-early", headers=admin).json()
            return card.get("state") not in (None, "queued", "running") and card

        card = wait_for(ended, timeout=10)
        counted = (card["usage"]["prompt_tokens"], card["usage"]["completion_tokens"])
        assert card["state"] == "disconnected" and counted[1] < 150

        def leaver_ledger() -> tuple:
            totals = http.get(f"{a.base_url}/api/usage", params={"key": "leaver"}, headers=admin).json()["totals"]
            return totals["prompt_tokens"], totals["completion_tokens"]

        assert wait_for(lambda: leaver_ledger() == counted, timeout=10), (leaver_ledger(), counted)

        # A client leaving a stream whose trace id another key's running request shares is charged its own
        # card's count (the card the worker's answer named), not the other's.
        sharer = http.post(f"{a.base_url}/api/keys", json={"name": "sharer"}, headers=admin).json()["secret"]
        reuser = http.post(f"{a.base_url}/api/keys", json={"name": "reuser"}, headers=admin).json()["secret"]
        shared = {"x-request-id": "shared-trace"}
        with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=left,
                         headers={"Authorization": f"Bearer {sharer}", **shared}) as running:
            assert running.status_code == 200
            next(running.iter_text())  # the sharer's request runs on, older and in flight
            with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=left,
                             headers={"Authorization": f"Bearer {reuser}", **shared}) as r:
                own_card = r.headers["x-inferd-request-card"]
                next(r.iter_text())

            def own_ended():
                card = http.get(f"{a.base_url}/v1/requests/{own_card}", headers=admin).json()
                return card.get("state") not in (None, "queued", "running") and card

            card = wait_for(own_ended, timeout=10)
            counted = (card["usage"]["prompt_tokens"], card["usage"]["completion_tokens"])
            assert card["key"] == "reuser" and card["trace_id"] == "shared-trace"

            def reuser_ledger() -> tuple:
                totals = http.get(f"{a.base_url}/api/usage", params={"key": "reuser"}, headers=admin).json()["totals"]
                return totals["prompt_tokens"], totals["completion_tokens"]

            assert wait_for(lambda: reuser_ledger() == counted, timeout=10), (reuser_ledger(), counted)
            mine = http.get(f"{a.base_url}/v1/requests/shared-trace", headers={"Authorization": f"Bearer {reuser}"})
            assert mine.json()["id"] == own_card  # by trace id, a key finds its own, not the sharer's
            theirs = http.get(f"{a.base_url}/v1/requests/shared-trace", headers={"Authorization": f"Bearer {sharer}"})
            assert theirs.status_code == 200 and theirs.json()["key"] == "sharer"
            assert theirs.json()["id"] == running.headers["x-inferd-request-card"] != own_card

        # Request cards through a replica: its own requests, under its key; a cancel reaches the worker.
        trace = "through-router-a"
        stream = {**body, "max_tokens": 150, "stream": True, "ignore_eos": True}  # the worker: --ctx-size 256
        with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=stream,
                         headers={**admin, "x-request-id": trace}) as r:
            chunks = r.iter_text()
            next(chunks)

            def running():
                card = http.get(f"{a.base_url}/v1/requests/{trace}", headers=admin)
                return card.status_code == 200 and card.json()["state"] == "running" and card.json()

            card = wait_for(running, timeout=10)
            assert card and card["key"].startswith("bootstrap-") and card["worker"]
            assert http.post(f"{a.base_url}/v1/requests/{trace}/cancel", headers=admin).status_code == 200
            rest = "".join(chunks)
        assert "event: error" in rest and "cancelled" in rest
        assert trace in {c["trace_id"] for c in http.get(f"{a.base_url}/v1/requests", headers=admin).json()["data"]}
        assert http.get(f"{b.base_url}/v1/requests/{trace}", headers=admin).status_code == 404  # b did not forward it

        rotated = http.post(f"{b.base_url}/api/keys/shared/rotate", headers=admin).json()["secret"]
        assert wait_for(lambda: status(a, secret) == 401 and status(a, rotated) != 401, timeout=10)
        assert status(b, secret) == 401

        async def stored() -> list[bytes]:
            async with aetcd.Client(etcd_server.host, etcd_server.port) as client:
                return [kv.value for kv in await client.get_prefix(b"/inferd/keys/")]

        values = asyncio.run(stored())
        assert values and not any(rotated.encode() in v or secret.encode() in v for v in values)
        assert http.delete(f"{a.base_url}/api/keys/shared", headers=admin).status_code == 200
        assert wait_for(lambda: status(b, rotated) == 401, timeout=10)
