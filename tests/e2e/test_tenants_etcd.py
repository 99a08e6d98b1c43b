"""Router replicas started with --etcd share one key set: a key added on one
works on the other, a rotation on one kills the old secret on both, a
removal reaches both; etcd holds hashes, never a secret."""

from __future__ import annotations

import asyncio

import httpx

from polling import wait_for
from router_process import RouterProcess

ADMIN = "etcd-admin-secret"


def status(router, secret: str) -> int:
    with httpx.Client(timeout=30.0) as client:
        return client.get(f"{router.base_url}/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code


def test_replicas_share_keys_through_etcd(tiny_server, etcd_server, server_logs):
    import aetcd

    etcd = f"{etcd_server.host}:{etcd_server.port}"
    common = dict(workers=[tiny_server.base_url], etcd=etcd, api_key=[ADMIN], wait_workers=1)
    with RouterProcess(log_path=server_logs / "router-etcd-a.log", **common) as a, \
            RouterProcess(log_path=server_logs / "router-etcd-b.log", **common) as b:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(timeout=30.0) as client:
            made = client.post(f"{a.base_url}/api/keys", json={"name": "shared", "limits": {"rpm": 5}}, headers=admin)
            assert made.status_code == 201, made.text
            secret = made.json()["secret"]
            assert wait_for(lambda: status(b, secret) == 200, timeout=10), "the key never reached replica b"
            listed = client.get(f"{b.base_url}/api/keys", headers=admin).json()["data"]
            assert next(k for k in listed if k["name"] == "shared")["limits"]["rpm"] == 5

            rotated = client.post(f"{b.base_url}/api/keys/shared/rotate", headers=admin).json()["secret"]
            assert wait_for(lambda: status(a, secret) == 401 and status(a, rotated) == 200, timeout=10)
            assert status(b, secret) == 401

            async def stored() -> list[bytes]:
                async with aetcd.Client(etcd_server.host, etcd_server.port) as client:
                    return [kv.value for kv in await client.get_prefix(b"/inferd/keys/")]

            values = asyncio.run(stored())
            assert values and all(rotated.encode() not in v and secret.encode() not in v for v in values)

            assert client.delete(f"{a.base_url}/api/keys/shared", headers=admin).status_code == 200
            assert wait_for(lambda: status(b, rotated) == 401, timeout=10)
