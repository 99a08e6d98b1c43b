"""The router's etcd watch against a real etcd: load, watch, reconnect, resync."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import aetcd

from inferd.discovery.etcd_watch import EtcdWatcher
from inferd.discovery.record import WorkerRecord, worker_key
from inferd.router.fleet import Fleet
from polling import async_wait_for
from router_fakes import RecordingPolicy

_prefixes = itertools.count()


def new_prefix() -> str:
    return f"/test-router-watch-{next(_prefixes)}-{time.monotonic_ns()}/"


async def put(client, prefix: str, worker_id: str, model: str = "m") -> None:
    record = WorkerRecord(id=worker_id, url=f"http://{worker_id}:8080", model=model, capabilities=["kv-events"])
    await client.put(worker_key(prefix, worker_id), record.to_json())


async def connected(server):
    client = aetcd.Client(server.host, server.port)
    await client.connect()
    return client


async def put_after_restart(server, prefix: str, worker_id: str, timeout: float = 20.0) -> None:
    """gRPC shares a connection per address between channels, and the one
    to a restarted etcd may still sit in its reconnect backoff for a moment
    (calls then fail at once with the last error, 'connection refused')."""
    deadline = time.monotonic() + timeout
    while True:
        client = await connected(server)
        try:
            await put(client, prefix, worker_id)
            return
        except aetcd.exceptions.ConnectionFailedError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
        finally:
            await client.close()


def test_loads_the_prefix_then_applies_puts_and_deletes(etcd_server):
    async def main():
        prefix, fleet = new_prefix(), Fleet(RecordingPolicy())
        client = await connected(etcd_server)
        await put(client, prefix, "w1")
        await client.put(b"/elsewhere/w9", b"{}")
        watcher = EtcdWatcher(fleet, etcd_server.host, etcd_server.port, prefix)
        task = asyncio.create_task(watcher.run())
        try:
            assert await async_wait_for(lambda: "w1" in fleet.workers, timeout=20.0), "w1 never loaded"
            w1 = fleet.get("w1")
            assert (w1.url, w1.model, w1.source, w1.capabilities) == ("http://w1:8080", "m", "etcd",
                                                                      frozenset({"kv-events"}))
            await put(client, prefix, "w2")
            assert await async_wait_for(lambda: "w2" in fleet.workers, timeout=20.0), "w2 never added"
            await put(client, prefix, "w2", model="m2")
            assert await async_wait_for(lambda: fleet.get("w2").model == "m2", timeout=20.0), "w2 never updated"
            await client.put(worker_key(prefix, "bad"), b"not json")
            await client.delete(worker_key(prefix, "w1"))
            assert await async_wait_for(lambda: "w1" not in fleet.workers, timeout=20.0), "w1 never removed"
            assert sorted(fleet.workers) == ["w2"]
            assert fleet.policy.removed == ["w1"]
        finally:
            task.cancel()
            await client.close()

    asyncio.run(main())


def test_router_replicas_share_one_fleet_view(etcd_server):
    async def main():
        prefix = new_prefix()
        fleets = [Fleet(RecordingPolicy()), Fleet(RecordingPolicy())]
        tasks = [asyncio.create_task(EtcdWatcher(f, etcd_server.host, etcd_server.port, prefix).run()) for f in fleets]
        client = await connected(etcd_server)
        try:
            for worker_id in ("a", "b", "c"):
                await put(client, prefix, worker_id)
            await client.delete(worker_key(prefix, "b"))
            for fleet in fleets:
                assert await async_wait_for(lambda: sorted(fleet.workers) == ["a", "c"], timeout=20.0), \
                    "a replica never saw just a and c"
        finally:
            for t in tasks:
                t.cancel()
            await client.close()

    asyncio.run(main())


def test_a_resync_removes_workers_that_left_and_keeps_static_ones(etcd_server):
    async def main():
        prefix, fleet = new_prefix(), Fleet(RecordingPolicy())
        fleet.upsert(WorkerRecord(id="http://s:1", url="http://s:1"), "static")
        client = await connected(etcd_server)
        try:
            await put(client, prefix, "gone")
            await put(client, prefix, "stays")
            watcher = EtcdWatcher(fleet, etcd_server.host, etcd_server.port, prefix)
            await watcher.sync(client)
            await client.delete(worker_key(prefix, "gone"))  # while this router was not watching
            await put(client, prefix, "new")
            await watcher.sync(client)
            assert sorted(fleet.workers) == ["http://s:1", "new", "stays"]
        finally:
            await client.close()

    asyncio.run(main())


def test_with_etcd_down_the_fleet_stays_and_the_watch_backs_off():
    from etcd import free_port

    delays = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 6:
            raise asyncio.CancelledError

    async def main():
        fleet = Fleet(RecordingPolicy())
        fleet.upsert(WorkerRecord(id="w1", url="http://w1:1"), "etcd")
        watcher = EtcdWatcher(fleet, "127.0.0.1", free_port(), "/p/", backoff=0.5, max_backoff=4.0, sleep=sleep)
        with pytest.raises(asyncio.CancelledError):
            await watcher.run()
        assert sorted(fleet.workers) == ["w1"]

    asyncio.run(main())
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_the_watch_reconnects_after_etcd_restarts(tmp_path):
    from etcd import EtcdServer, etcd_or_skip

    server = EtcdServer(tmp_path / "etcd", binary=etcd_or_skip()).start()

    retries: list[float] = []

    async def retry_after(delay: float) -> None:
        retries.append(delay)
        await asyncio.sleep(delay)

    async def main():
        prefix, fleet = new_prefix(), Fleet(RecordingPolicy())
        watcher = EtcdWatcher(fleet, server.host, server.port, prefix, backoff=0.05, max_backoff=0.2,
                              sleep=retry_after)
        task = asyncio.create_task(watcher.run())
        try:
            client = await connected(server)
            await put(client, prefix, "w1")
            await client.close()
            assert await async_wait_for(lambda: "w1" in fleet.workers, timeout=20.0), "w1 never seen"
            await asyncio.to_thread(server.stop)
            failed_before = len(retries)
            # The watch fails, and so does a reconnect, while etcd is gone.
            assert await async_wait_for(lambda: len(retries) >= failed_before + 2, timeout=20.0), retries
            assert sorted(fleet.workers) == ["w1"]
            await asyncio.to_thread(server.start)
            await put_after_restart(server, prefix, "w2")
            assert await async_wait_for(lambda: sorted(fleet.workers) == ["w1", "w2"], timeout=20.0), \
                "w2 never seen after the restart"
        finally:
            task.cancel()

    try:
        asyncio.run(main())
    finally:
        server.stop()
