"""Fake workers, a recording policy and in-thread servers for router tests.

A `FakeWorker` is a small app on a real TCP port that answers like a worker
and can be told to misbehave: answer 503, die after part of an answer (the
connection drops mid-body), or hold a stream open until its client leaves.
It records every request it gets.
"""

from __future__ import annotations

import asyncio
import json
import threading

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from polling import wait_for

# The bytes a fake streams for each dialect: odd spacing, a comment, non-ASCII
# text, so a proxy that re-frames or re-encodes anything shows it.
SSE_EVENTS = [
    b'data: {"id":"c1","choices":[{"delta":{"role":"assistant"}}]}\n\n',
    b": keep-alive\n\n",
    b'data: {"id":"c1","choices":[{"delta":{"content":"h\xc3\xa9llo  "}}]}\n\n',
    b"data: [DONE]\n\n",
]
ANTHROPIC_EVENTS = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1"}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]
RESPONSES_EVENTS = [
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_s1"},"sequence_number":0}\n\n',
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"hi","sequence_number":1}\n\n',
    b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_s1"},"sequence_number":2}\n\n',
]
NDJSON_LINES = [b'{"message":{"content":"hi"},"done":false}\n', b'{"message":{"content":""},"done":true}\n']


def events_for(path: str) -> tuple[list[bytes], str]:
    if path.startswith("/api/"):
        return NDJSON_LINES, "application/x-ndjson"
    if path == "/v1/messages":
        return ANTHROPIC_EVENTS, "text/event-stream"
    if path == "/v1/responses":
        return RESPONSES_EVENTS, "text/event-stream"
    return SSE_EVENTS, "text/event-stream"


class ServerThread:
    """An ASGI app under uvicorn on a free port, in a thread with its own loop."""

    def __init__(self, app):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical",
                                                    lifespan="on", access_log=False))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.server.serve())

    def start(self) -> ServerThread:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), timeout=30)
        if not self.server.started:
            raise RuntimeError("the test server did not start")
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, coro):
        """Run `coro` on the server's loop (where its state lives) and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class FakeWorker:
    def __init__(self, name: str, model: str = "fake-model", aliases: tuple[str, ...] = ()):
        self.name = name
        self.model = model
        self.aliases = aliases
        self.health_status = 200
        self.health_body: dict = {"status": "ok", "model": model}
        self.mode = "ok"  # ok | unavailable (503) | die (drop the connection after part of the answer)
        self.die_after = 2  # stream: whole events sent before dying
        self.fragment = b""  # stream: a cut event sent just before dying
        self.hold = False  # stream: after its events, wait for the client to leave
        self.aborted = threading.Event()  # a held stream's client left
        self.requests: list[dict] = []
        self.stored: set[str] = set()  # Responses ids this worker holds
        self.thread = ServerThread(self._app())

    def start(self) -> FakeWorker:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.stop()

    @property
    def url(self) -> str:
        return self.thread.url

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/health")
        async def health():
            return JSONResponse(self.health_body, status_code=self.health_status)

        @app.get("/v1/models")
        async def models():
            names = [self.model, *self.aliases]
            return {"object": "list", "data": [{"id": n, "object": "model", "created": 1, "owned_by": self.name}
                                               for n in names]}

        @app.get("/api/tags")
        async def tags():
            return {"models": [{"name": self.model, "model": self.model, "size": 7, "digest": self.name}]}

        @app.api_route("/v1/responses/{response_id}", methods=["GET", "DELETE"])
        async def stored(response_id: str, request: Request):
            self._record(request, b"")
            if response_id not in self.stored:
                return JSONResponse({"error": {"message": "not found"}}, status_code=404)
            return {"id": response_id, "object": "response", "worker": self.name}

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def anything(path: str, request: Request):
            body = await request.body()
            self._record(request, body)
            parsed = json.loads(body) if body else {}
            path = "/" + path
            if self.mode == "unavailable":
                return JSONResponse({"error": {"message": f"{self.name} is loading", "type": "service_unavailable",
                                               "code": "loading"}}, status_code=503, headers={"Retry-After": "2"})
            streaming = parsed.get("stream", path in ("/api/chat", "/api/generate"))
            if streaming:
                events, media = events_for(path)
                return StreamingResponse(self._stream(events, request), media_type=media,
                                         headers={"x-fake": self.name, "connection": "keep-alive"})
            if path == "/v1/responses":
                self.stored.add(f"resp_{self.name}")
                answer = {"id": f"resp_{self.name}", "object": "response", "worker": self.name}
            else:
                answer = {"worker": self.name, "path": path, "model": parsed.get("model")}
            if self.mode == "die":
                return StreamingResponse(self._die(b'{"worker": "' + self.name.encode()), media_type="application/json")
            return JSONResponse(answer, headers={"x-fake": self.name})

        return app

    def _record(self, request: Request, body: bytes) -> None:
        self.requests.append({"path": request.url.path, "method": request.method,
                              "headers": {k.lower(): v for k, v in request.headers.items()}, "body": body})

    async def _stream(self, events: list[bytes], request: Request):
        try:
            for i, event in enumerate(events):
                if self.mode == "die" and i == self.die_after:
                    yield self.fragment
                    raise RuntimeError("the fake worker dies mid-stream")
                yield event
            while self.hold and not await request.is_disconnected():  # held open until the client leaves
                await asyncio.sleep(0.01)
        finally:
            if self.hold:
                self.aborted.set()

    async def _die(self, partial: bytes):
        yield partial
        raise RuntimeError("the fake worker dies mid-answer")


class RecordingPolicy:
    """Only remembers which workers the fleet told it had left."""

    name = "recording"

    def __init__(self):
        self.removed: list[str] = []

    def on_worker_removed(self, worker_id: str) -> None:
        self.removed.append(worker_id)
