"""GET /v1/kv-events in-process: NDJSON snapshot, the exact block hashes of a
served prompt, pings, auth, 503 while loading, and clean ends on disconnect
and drain. The stream never ends by itself, so it is read through a small
ASGI driver that hands over each body chunk as it is sent."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.engine.kv_cache import prefix_block_hashes
from inferd.engine.kv_events import KvSnapshot, KvSubscription
from inferd.models.loader import load_model
from inferd.server.app import build_app
from inferd.server.routes.kv_events import event_lines
from inferd.server.state import ServerState

BLOCK_SIZE = 4
PROMPT = "a prompt long enough to fill several blocks"
COMPLETION = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
PATH = "/v1/kv-events"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def make_state(loaded, **options) -> ServerState:
    config = ServeConfig(ctx_size=128, parallel=2, block_size=BLOCK_SIZE, **options)
    state = ServerState(config=config, model_name="tiny")
    state.engine = AsyncEngine(Engine(loaded, config))
    return state


@pytest.fixture
def state(loaded):
    state = make_state(loaded)
    yield state
    state.engine.shutdown()


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


def test_the_stream_opens_with_a_snapshot_then_shows_a_served_prompts_full_blocks(state):
    async def go():
        app = build_app(state)
        stream = Stream(app, PATH)
        start = await stream.open()
        assert start["status"] == 200
        assert (b"content-type", b"application/x-ndjson") in start["headers"]
        assert await stream.line() == {"type": "snapshot", "block_size": BLOCK_SIZE, "hashes": [],
                                       "active_blocks": 0}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inferd") as client:
            r = await client.post("/v1/completions", json=COMPLETION)
        assert r.status_code == 200, r.text
        prompt_ids = state.engine.tokenizer.encode(PROMPT)
        assert r.json()["usage"]["prompt_tokens"] == len(prompt_ids)
        expected = prefix_block_hashes(prompt_ids, BLOCK_SIZE)
        assert len(expected) == len(prompt_ids) // BLOCK_SIZE > 0
        assert await stream.line() == {"type": "update", "stored": expected, "removed": [], "active_blocks": 0}
        # A second reader's snapshot holds the same blocks.
        second = Stream(app, PATH)
        await second.open()
        assert (await second.line())["hashes"] == expected
        await second.disconnect()
        await stream.disconnect()

    run(go())


def test_a_disconnected_reader_is_forgotten_by_the_engine(state):
    async def go():
        stream = Stream(build_app(state), PATH)
        await stream.open()
        await stream.line()
        assert state.engine.kv_events.num_subscribers == 1
        await stream.disconnect()
        await state.engine.call(lambda engine: engine.kv_events.publish())
        assert state.engine.kv_events.num_subscribers == 0
        assert state.engine.engine.pool.listener is None

    run(go())


def test_draining_ends_the_stream_and_refuses_new_ones(state):
    async def go():
        app = build_app(state)
        stream = Stream(app, PATH)
        await stream.open()
        await stream.line()
        state.draining = True
        state.engine.kv_events.close()
        assert await stream.line() is None
        await stream.task
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inferd") as client:
            r = await client.get(PATH)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "draining"

    run(go())


def test_while_the_model_loads_it_is_503_in_the_openai_envelope():
    async def go():
        state = ServerState(config=ServeConfig(), model_name="tiny")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(state)),
                                     base_url="http://inferd") as client:
            return await client.get(PATH)

    r = run(go())
    assert r.status_code == 503
    assert r.headers["retry-after"] == "2"
    assert r.json()["error"]["type"] == "service_unavailable" and r.json()["error"]["code"] == "loading"


def test_it_needs_the_api_key_like_every_other_route(loaded):
    state = make_state(loaded, api_key=["sekrit"])
    state.api_keys = frozenset({"sekrit"})

    async def go():
        app = build_app(state)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inferd") as client:
            refused = await client.get(PATH)
        stream = Stream(app, PATH, {"Authorization": "Bearer sekrit"})
        start = await stream.open()
        first = await stream.line()
        await stream.disconnect()
        return refused, start, first

    try:
        refused, start, first = run(go())
    finally:
        state.engine.shutdown()
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert start["status"] == 200 and first["type"] == "snapshot"


def test_silence_becomes_pings_carrying_the_active_block_count():
    async def go():
        sub = KvSubscription(KvSnapshot(16, [-3, 2**63 - 1], 5), asyncio.get_running_loop(), max_pending=4)
        lines = event_lines(sub, ping_seconds=0)
        first, second = await anext(lines), await anext(lines)
        await lines.aclose()
        return first, second, sub.closed

    first, second, closed = run(go())
    assert first == '{"type":"snapshot","block_size":16,"hashes":[-3,9223372036854775807],"active_blocks":5}\n'
    assert second == '{"type":"ping","active_blocks":5}\n'
    assert closed  # leaving the stream closes the subscription
