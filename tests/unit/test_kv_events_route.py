"""GET /v1/kv-events in-process: NDJSON snapshot, the exact block hashes of a
served prompt, pings, auth, 503 while loading, and clean ends on disconnect
and drain. The stream never ends by itself, so it is read through a small
ASGI driver that hands over each body chunk as it is sent."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd.engine.kv_events import KvSnapshot, KvSubscription
from inferd.models.loader import load_model
from inferd.prefix_hash import prefix_block_hashes
from inferd.server.routes.kv_events import event_lines
from served import served, small_config

BLOCK_SIZE = 4
PROMPT = "a prompt long enough to fill several blocks"
COMPLETION = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
PATH = "/v1/kv-events"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture
def server(loaded):
    with served(loaded, small_config(block_size=BLOCK_SIZE)) as server:
        yield server


class Stream:
    """One GET on the app, read line by line while it is still open."""

    def __init__(self, app, path: str, headers: dict[str, str] | None = None):
        self.app = app
        self.scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 5000), "server": ("inferd", 80),
            "headers": [(b"host", b"inferd"), *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())],
        }
        self.start: asyncio.Future | None = None
        self.chunks: asyncio.Queue = asyncio.Queue()
        self.disconnected = asyncio.Event()
        self.buffer = b""
        self.ended = False
        self._asked = False

    async def open(self) -> dict:
        self.start = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self.app(self.scope, self._receive, self._send))
        return await self.start

    async def _receive(self):
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.disconnected.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message):
        if message["type"] == "http.response.start":
            self.start.set_result(message)
        elif message["type"] == "http.response.body":
            await self.chunks.put(message)

    async def line(self) -> dict | None:
        """The next NDJSON object; None once the response has ended."""
        while b"\n" not in self.buffer:
            if self.ended:
                return None
            message = await self.chunks.get()
            self.buffer += message.get("body", b"")
            self.ended = not message.get("more_body", False)
        raw, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(raw)

    async def disconnect(self) -> None:
        self.disconnected.set()
        await self.task


def run(coro):
    return asyncio.run(coro)


def test_the_stream_opens_with_a_snapshot_then_shows_a_served_prompts_full_blocks(server):
    async def go():
        stream = Stream(server.app, PATH)
        start = await stream.open()
        assert start["status"] == 200
        assert (b"content-type", b"application/x-ndjson") in start["headers"]
        assert await stream.line() == {"type": "snapshot", "block_size": BLOCK_SIZE, "hashes": [],
                                       "active_blocks": 0}
        async with server.client() as client:
            r = await client.post("/v1/completions", json=COMPLETION)
        assert r.status_code == 200, r.text
        prompt_ids = server.state.engine.tokenizer.encode(PROMPT)
        assert r.json()["usage"]["prompt_tokens"] == len(prompt_ids)
        expected = prefix_block_hashes(prompt_ids, BLOCK_SIZE)
        assert len(expected) == len(prompt_ids) // BLOCK_SIZE > 0
        assert await stream.line() == {"type": "update", "stored": expected, "removed": [], "active_blocks": 0}
        # A second reader's snapshot holds the same blocks.
        second = Stream(server.app, PATH)
        await second.open()
        assert (await second.line())["hashes"] == expected
        await second.disconnect()
        await stream.disconnect()

    run(go())


def test_a_disconnected_reader_is_forgotten_by_the_engine(server):
    engine = server.state.engine

    async def go():
        stream = Stream(server.app, PATH)
        await stream.open()
        await stream.line()
        assert engine.kv_events.num_subscribers == 1
        await stream.disconnect()
        await engine.call(lambda engine: engine.kv_events.publish())
        assert engine.kv_events.num_subscribers == 0
        assert engine.engine.pool.listener is None

    run(go())


def test_draining_ends_the_stream_and_refuses_new_ones(server):
    async def go():
        stream = Stream(server.app, PATH)
        await stream.open()
        await stream.line()
        server.state.draining = True
        server.state.engine.kv_events.close()
        assert await stream.line() is None
        await stream.task
        async with server.client() as client:
            r = await client.get(PATH)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "draining"

    run(go())


def test_while_the_model_loads_it_is_503_in_the_openai_envelope():
    async def go():
        with served(None) as loading:
            async with loading.client() as client:
                return await client.get(PATH)

    r = run(go())
    assert r.status_code == 503
    assert r.headers["retry-after"] == "2"
    assert r.json()["error"]["type"] == "service_unavailable" and r.json()["error"]["code"] == "loading"


def test_it_needs_the_api_key_like_every_other_route(loaded):
    async def go(server):
        async with server.client() as client:
            refused = await client.get(PATH)
        stream = Stream(server.app, PATH, {"Authorization": "Bearer sekrit"})
        start = await stream.open()
        first = await stream.line()
        await stream.disconnect()
        return refused, start, first

    with served(loaded, small_config(block_size=BLOCK_SIZE), api_keys=frozenset({"sekrit"})) as server:
        refused, start, first = run(go(server))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert start["status"] == 200 and first["type"] == "snapshot"


def test_silence_becomes_pings_carrying_the_active_block_count():
    async def go():
        snapshot = KvSnapshot(16, ["0123456789abcdef" * 2, "f" * 32], 5)
        sub = KvSubscription(snapshot, asyncio.get_running_loop(), max_pending=4)
        lines = event_lines(sub, ping_seconds=0)
        first, second = await anext(lines), await anext(lines)
        await lines.aclose()
        return first, second, sub.closed

    first, second, closed = run(go())
    assert first == ('{"type":"snapshot","block_size":16,"hashes":["0123456789abcdef0123456789abcdef",'
                     '"ffffffffffffffffffffffffffffffff"],"active_blocks":5}\n')
    assert second == '{"type":"ping","active_blocks":5}\n'
    assert closed  # leaving the stream closes the subscription
