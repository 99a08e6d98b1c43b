"""KvIndex (snapshot/update/ping, overlap as a chain) and KvSubscriber over a mock NDJSON stream."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from inferd.prefix_hash import prefix_block_hashes
from inferd.router.kv_index import KvEventError, KvIndex, WorkerKv
from inferd.router.kv_subscriber import KvSubscriber
from inferd.router.worker import Worker

# Stand-in block hashes: the index only compares them.
H = [f"{n:032x}" for n in range(10)]


def snap(hashes, active=0, block_size=16):
    return {"type": "snapshot", "block_size": block_size, "hashes": list(hashes), "active_blocks": active}


def test_snapshot_then_updates_and_pings():
    index = KvIndex()
    index.apply("w", snap([H[1], H[2], H[3]], active=4))
    assert index.get("w") == WorkerKv(block_size=16, hashes={H[1], H[2], H[3]}, active_blocks=4, events=0)
    index.apply("w", {"type": "update", "stored": [H[4], H[5]], "removed": [H[1]], "active_blocks": 6})
    assert index.get("w") == WorkerKv(16, {H[2], H[3], H[4], H[5]}, 6, 1)
    index.apply("w", {"type": "ping", "active_blocks": 2})
    assert index.get("w") == WorkerKv(16, {H[2], H[3], H[4], H[5]}, 2, 2)
    index.apply("w", {"type": "update", "removed": [H[2]]})  # absent fields: nothing changes there
    assert index.get("w") == WorkerKv(16, {H[3], H[4], H[5]}, 2, 3)
    assert index.view("w") == {"synced": True, "block_size": 16, "blocks": 3, "active_blocks": 2, "events": 3}


def test_snapshot_replaces_everything():
    index = KvIndex()
    index.apply("w", snap([H[1], H[2]], active=3, block_size=16))
    index.apply("w", {"type": "update", "stored": [H[7]], "removed": [], "active_blocks": 5})
    index.apply("w", snap([H[9]], block_size=8))
    assert index.get("w") == WorkerKv(8, {H[9]}, 0, 0)


def test_workers_are_separate_and_forgettable():
    index = KvIndex()
    index.apply("a", snap([H[1]]))
    index.apply("b", snap([H[2]]))
    index.forget("a")
    index.forget("nobody")
    assert "a" not in index and "b" in index
    assert index.view("a") == {"synced": False}
    assert index.overlap("a", [H[1]]) == 0


@pytest.mark.parametrize("kind", ["update", "ping"])
def test_events_before_a_snapshot_are_refused(kind):
    with pytest.raises(KvEventError, match="before its snapshot"):
        KvIndex().apply("w", {"type": kind, "active_blocks": 1})


def test_unknown_event_types_are_skipped():
    index = KvIndex()
    index.apply("w", {"type": "hello", "version": 2})
    assert "w" not in index
    index.apply("w", snap([H[1]]))
    index.apply("w", {"type": "stats"})
    assert index.get("w").events == 0


@pytest.mark.parametrize(
    "event",
    [
        ["not", "an", "object"],
        {"type": "snapshot", "hashes": [H[1]]},  # no block size
        {"type": "snapshot", "block_size": 0, "hashes": []},
        {"type": "snapshot", "block_size": 16, "hashes": H[1]},
        {"type": "snapshot", "block_size": 16, "hashes": [H[1], 2]},
        {"type": "snapshot", "block_size": 16, "hashes": [1]},  # an integer: hashes travel as hex strings
        {"type": "snapshot", "block_size": 16, "hashes": [H[1][:16]]},  # too short
        {"type": "snapshot", "block_size": 16, "hashes": [True]},
        {"type": "snapshot", "block_size": 16, "hashes": [], "active_blocks": -1},
        {"type": "snapshot", "block_size": 16.0, "hashes": []},
    ],
)
def test_malformed_snapshots(event):
    with pytest.raises(KvEventError):
        KvIndex().apply("w", event)


def test_a_malformed_update_changes_nothing():
    index = KvIndex()
    index.apply("w", snap([H[1], H[2]], active=3))
    with pytest.raises(KvEventError, match="'stored'"):
        index.apply("w", {"type": "update", "removed": [H[1]], "stored": [None], "active_blocks": 9})
    with pytest.raises(KvEventError, match="'active_blocks'"):
        index.apply("w", {"type": "update", "removed": [H[1]], "active_blocks": "9"})
    assert index.get("w") == WorkerKv(16, {H[1], H[2]}, 3, 0)


def test_overlap_counts_the_leading_chain():
    chain = prefix_block_hashes(list(range(64)), 16)  # 4 blocks
    index = KvIndex()
    index.apply("all", snap(chain))
    index.apply("head", snap(chain[:2]))
    index.apply("gap", snap([chain[0], chain[2], chain[3]]))
    index.apply("tail", snap(chain[1:]))
    assert [index.overlap(w, chain) for w in ("all", "head", "gap", "tail", "nobody")] == [4, 2, 1, 0, 0]
    assert index.overlap("all", []) == 0
    assert index.overlap("all", chain[:3]) == 3


def test_note_routed_holds_until_the_next_report():
    index = KvIndex()
    index.note_routed("w", 5)  # unknown: nothing to add to
    assert "w" not in index
    index.apply("w", snap([], active=2))
    index.note_routed("w", 5)
    index.note_routed("w", 1)
    assert index.get("w").active_blocks == 8
    index.apply("w", {"type": "update", "stored": [H[1]], "removed": [], "active_blocks": 3})
    assert index.get("w").active_blocks == 3


# -- subscriber ------------------------------------------------------------------


def lines(*events) -> list[bytes]:
    return [(json.dumps(e) + "\n").encode() for e in events]


class FakeWorker:
    """Serves one scripted connection per request: (status, chunks, end), where
    end is "close", "hold" (until released or cancelled) or an exception."""

    def __init__(self, *connections):
        self.connections = list(connections)
        self.requests: list[httpx.Request] = []
        self.release = asyncio.Event()
        self.seen_at_connect: list[WorkerKv | None] = []
        self.index: KvIndex | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.seen_at_connect.append(self.index.get("w") if self.index else None)
        if not self.connections:
            await asyncio.Event().wait()  # no more scripts: hang until cancelled
        status, chunks, end = self.connections.pop(0)
        if isinstance(end, Exception):
            raise end

        async def body():
            for chunk in chunks:
                yield chunk
            if end == "hold":
                await self.release.wait()
                self.release.clear()

        return httpx.Response(status, content=body())


async def until(condition, rounds: int = 500) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def subscriber_for(fake: FakeWorker, **options) -> tuple[KvSubscriber, KvIndex, list[float]]:
    index = KvIndex()
    fake.index = index
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await asyncio.sleep(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
    return KvSubscriber(index, client, sleep=sleep, **options), index, slept


WORKER = Worker(id="w", url="http://w:8080", capabilities=frozenset({"kv-events"}))


def test_subscriber_feeds_the_index_and_resets_on_reconnect():
    async def main():
        update = {"type": "update", "stored": [H[4]], "removed": [H[1]], "active_blocks": 3}
        fake = FakeWorker(
            (200, lines(snap([H[1], H[2], H[3]], active=2), update), "hold"),
            (200, [b"\n"] + lines(snap([H[9]])), "hold"),  # blank lines are skipped
        )
        sub, index, slept = subscriber_for(fake, api_key="sk-test")
        sub.start(WORKER)
        sub.start(WORKER)  # already following: no second task
        await until(lambda: "w" in index and index.get("w").events == 1)
        assert index.get("w") == WorkerKv(16, {H[2], H[3], H[4]}, 3, 1)
        assert sub.following() == ["w"]
        fake.release.set()  # the worker ends the stream
        await until(lambda: len(fake.requests) == 2 and "w" in index)
        assert index.get("w") == WorkerKv(16, {H[9]}, 0, 0)  # replaced, not merged
        assert fake.seen_at_connect == [None, None]  # dropped between connections
        assert slept == [0.5]
        request = fake.requests[0]
        assert str(request.url) == "http://w:8080/v1/kv-events"
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["accept"] == "application/x-ndjson"
        sub.stop("w")
        assert "w" not in index
        await sub.close()
        assert sub.following() == []
        await sub.client.aclose()

    asyncio.run(main())


def test_subscriber_backs_off_on_failures_and_recovers():
    async def main():
        fake = FakeWorker(
            (503, [], "close"),
            (200, [], httpx.ConnectError("refused")),
            (200, [b"not json\n"], "close"),
            (200, lines({"type": "update", "stored": [H[1]], "removed": []}), "close"),  # no snapshot first
            (200, lines(snap([H[5]])), "close"),  # delivers: the backoff starts over
            (200, lines(snap([H[6]])), "hold"),
        )
        sub, index, slept = subscriber_for(fake, backoff=0.5, max_backoff=3.0)
        sub.start(WORKER)
        await until(lambda: len(fake.requests) == 6 and "w" in index)
        assert slept == [0.5, 1.0, 2.0, 3.0, 0.5]
        assert index.get("w").hashes == {H[6]}
        assert "authorization" not in fake.requests[0].headers
        await sub.close()
        assert "w" not in index
        await sub.client.aclose()

    asyncio.run(main())


def test_attach_follows_only_workers_that_stream_events():
    async def main():
        fake = FakeWorker((200, lines(snap([H[1]])), "hold"))
        sub, index, _ = subscriber_for(fake)
        assert sub.attach(Worker(id="plain", url="http://plain")) is None
        stop = sub.attach(WORKER)
        await until(lambda: "w" in index)
        assert sub.following() == ["w"]
        stop()
        await until(lambda: sub.following() == [])
        assert "w" not in index
        await sub.close()
        await sub.client.aclose()

    asyncio.run(main())
