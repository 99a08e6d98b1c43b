"""Forwarding one client request to a worker, with retries.

    choose a candidate ── send ──▶ connect error ─────────▶ breaker failure, next candidate
                              ├──▶ 503 (loading/draining) ─▶ next candidate (the last 503 is
                              │                              the answer if none is left)
                              ├──▶ non-streaming: read it all; a worker dying before the end
                              │    is a breaker failure and the next candidate; then reply
                              └──▶ streaming: read up to the first whole event; a failure
                                   before it is retried like a connect error; after it,
                                   bytes pass through unchanged and a failure ends the
                                   stream with the dialect's error event

Candidates already tried are excluded, so a request is tried at most once
per worker. A client that goes away closes the worker's response, which is
how the worker learns to stop generating. `Proxy.cut_all` (a drain out of
time) ends every answer in flight the same way, with its dialect's error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from inferd.router.fleet import Fleet
from inferd.router.http_headers import response_headers
from inferd.router.policies.base import Decision, NoWorkerError, Policy, RoutingRequest
from inferd.router.stream_errors import StreamCutter, WorkerFailed
from inferd.router.worker import Worker
from inferd.api.registry import error_response_for_path
from inferd.http.errors import APIError, BadRequest, ServiceUnavailable

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3.0
WRITE_TIMEOUT = 30.0


class GatewayTimeout(APIError):
    status, type = 504, "server_error"


@dataclass
class Forward:
    """One client request, ready to send to whichever worker takes it."""

    method: str
    path: str  # the route path; it names the dialect of errors
    target: str  # path and query string as sent to the worker
    headers: list[tuple[bytes, bytes]]  # already filtered for workers
    body: bytes
    routing: RoutingRequest
    model: str | None
    streaming: bool
    pinned: Worker | None = None  # only this worker may answer (it holds a stored response)
    # Sees the answer's first bytes until it returns True (e.g. to learn a stored response's id).
    observe: Callable[[Worker, bytes], bool] | None = None


@dataclass
class _Failed:
    cause: str  # "connect" | "unavailable" | "read"
    detail: str
    answer: tuple[int, list, bytes] | None = None  # a 503 worth passing on if nobody else answers


@dataclass
class Proxy:
    fleet: Fleet
    policy: Policy
    client: httpx.AsyncClient
    request_timeout: float | None = None  # for a non-streaming answer; None waits for ever
    metrics: object | None = None  # router.metrics.RouterMetrics
    answering: set[ProxyResponse] = field(default_factory=set)

    def cut_all(self, error: APIError) -> None:
        """End every answer in flight with `error`: a 503 in its dialect's
        envelope if nothing was sent yet, else its dialect's error event."""
        for response in list(self.answering):
            response.cut(error)

    def timeout(self, streaming: bool) -> httpx.Timeout:
        read = None if streaming else self.request_timeout
        return httpx.Timeout(connect=CONNECT_TIMEOUT, read=read, write=WRITE_TIMEOUT, pool=None)

    def choose(self, fwd: Forward, tried: list[str]) -> Decision:
        if fwd.pinned is not None:
            w = fwd.pinned
            if w.id in tried or not w.routable or self.fleet.get(w.id) is not w:
                raise NoWorkerError(f"worker {w.id!r}, which holds this stored response, cannot take it now")
            return Decision(w, "stored-response")
        candidates = self.fleet.candidates(fwd.model, exclude=tried)
        if not candidates:
            what = f" for model {fwd.model!r}" if fwd.model else ""
            more = " (every one was tried)" if tried else ""
            raise NoWorkerError(f"no worker can take this request{what}{more}; GET /v1/workers shows the fleet")
        return self.policy.choose(fwd.routing, candidates)

    def response(self, fwd: Forward) -> ProxyResponse:
        return ProxyResponse(self, fwd)


class ProxyResponse:
    """An ASGI app answering one request; it watches for the client leaving."""

    def __init__(self, proxy: Proxy, fwd: Forward):
        self.proxy = proxy
        self.fwd = fwd
        self._serving: asyncio.Future | None = None
        self._cut_by: APIError | None = None
        self._started = False  # the status line went out
        self._cutter: StreamCutter | None = None  # what ends a stream in its dialect

    def cut(self, error: APIError) -> None:
        if self._serving is not None and not self._serving.done() and self._cut_by is None:
            self._cut_by = error
            self._serving.cancel()

    async def __call__(self, scope, receive, send) -> None:
        serve = self._serving = asyncio.ensure_future(self._serve_unless_cut(scope, receive, send))
        gone = asyncio.ensure_future(_client_gone(receive))
        self.proxy.answering.add(self)
        try:
            await asyncio.wait({serve, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.proxy.answering.discard(self)
        if not serve.done():
            log.info("client left %s; closing the worker's response", self.fwd.path)
            serve.cancel()
        gone.cancel()
        await asyncio.gather(serve, gone, return_exceptions=True)
        if not serve.cancelled() and serve.exception() is not None:
            if isinstance(serve.exception(), OSError):
                return  # the client went away mid-send
            raise serve.exception()

    async def _serve_unless_cut(self, scope, receive, send) -> None:
        try:
            await self._serve(scope, receive, send)
        except asyncio.CancelledError:
            if self._cut_by is None:
                raise
            asyncio.current_task().uncancel()  # the cut is handled here; nothing above asked to stop
            if not self._started:
                await error_response_for_path(self.fwd.path, self._cut_by)(scope, receive, send)
            else:
                tail = self._cutter.error(self._cut_by) if self._cutter is not None else b""
                await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _serve(self, scope, receive, send) -> None:
        proxy, fwd = self.proxy, self.fwd
        tried: list[str] = []
        failures: list[str] = []
        last_503: tuple[int, list, bytes] | None = None
        while True:
            try:
                decision = proxy.choose(fwd, tried)
            except LookupError as e:  # NoWorkerError, or the direct policy's DirectTargetError
                if last_503 is not None:
                    self._started = True
                    return await _send_whole(send, *last_503)
                return await error_response_for_path(fwd.path, _no_worker(e, failures))(scope, receive, send)
            worker = decision.worker
            if failures and proxy.metrics is not None:
                proxy.metrics.retries.labels(cause).inc()
            tried.append(worker.id)
            failed = await self._attempt(worker, decision, scope, receive, send)
            if failed is None:
                return
            cause = failed.cause
            log.warning("%s %s on worker %s failed before answering (%s); trying another",
                        fwd.method, fwd.path, worker.id, failed.detail)
            failures.append(f"{worker.id}: {failed.detail}")
            if failed.answer is not None:
                last_503 = failed.answer

    async def _attempt(self, worker: Worker, decision: Decision, scope, receive, send) -> _Failed | None:
        """None once the client has its answer; else why the worker gave none."""
        proxy, fwd = self.proxy, self.fwd
        worker.in_flight += 1
        proxy.policy.on_routed(fwd.routing, worker)
        if proxy.metrics is not None:
            proxy.metrics.on_routed(worker.id, decision.reason, decision.matched)
        upstream: httpx.Response | None = None
        try:
            request = proxy.client.build_request(fwd.method, worker.url + fwd.target, headers=fwd.headers,
                                                 content=fwd.body or None, timeout=proxy.timeout(fwd.streaming))
            try:
                upstream = await proxy.client.send(request, stream=True)
            except httpx.TimeoutException as e:
                if not isinstance(e, httpx.ConnectTimeout) and not fwd.streaming:
                    return await self._timed_out(worker, scope, receive, send)
                return _failure(worker, e)
            except httpx.TransportError as e:
                return _failure(worker, e)
            if upstream.status_code == 503 and fwd.pinned is None:
                try:
                    body = await _read_all(upstream)
                except httpx.HTTPError:
                    body = b""
                return _Failed("unavailable", "answered 503", (503, _headers(upstream, worker), body))
            if not fwd.streaming:
                try:
                    body = await _read_all(upstream)
                except httpx.TimeoutException:
                    return await self._timed_out(worker, scope, receive, send)
                except httpx.TransportError as e:
                    return _failure(worker, e)
                worker.breaker.record_success()
                if fwd.observe is not None and upstream.status_code == 200:
                    fwd.observe(worker, body)
                self._started = True
                await _send_whole(send, upstream.status_code, _headers(upstream, worker), body)
                return None
            return await self._stream(worker, upstream, send)
        finally:
            if upstream is not None:
                await upstream.aclose()  # unread: the connection closes and the worker stops generating
            worker.in_flight -= 1
            proxy.policy.on_finished(fwd.routing, worker)

    async def _stream(self, worker: Worker, upstream: httpx.Response, send) -> _Failed | None:
        fwd = self.fwd
        cutter = self._cutter = StreamCutter(fwd.path, upstream.headers.get("content-type", ""))
        chunks = upstream.aiter_raw()
        first, ended = b"", False
        try:  # nothing reached the client yet: a failure here may still go to another worker
            while not first and not ended:
                try:
                    first = cutter.feed(await chunks.__anext__())
                except StopAsyncIteration:
                    first, ended = cutter.flush(), True
        except httpx.TransportError as e:
            return _failure(worker, e)
        worker.breaker.record_success()
        self._started = True
        await send({"type": "http.response.start", "status": upstream.status_code,
                    "headers": _headers(upstream, worker)})
        observe = fwd.observe if upstream.status_code == 200 else None
        try:
            data = first
            while True:
                if data:
                    if observe is not None and observe(worker, data):
                        observe = None
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                if ended:
                    tail = b""
                    break
                try:
                    data = cutter.feed(await chunks.__anext__())
                except StopAsyncIteration:
                    data, ended = cutter.flush(), True
        except httpx.TransportError as e:
            worker.breaker.record_failure()
            if self.proxy.metrics is not None:
                self.proxy.metrics.stream_errors.inc()
            log.warning("worker %s failed mid-stream on %s: %s", worker.id, fwd.path, _describe(e))
            message = f"worker {worker.id} failed mid-answer ({_describe(e)}); the output is incomplete, send it again"
            tail = cutter.error(WorkerFailed(message, code="worker_failed"))
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return None

    async def _timed_out(self, worker: Worker, scope, receive, send) -> None:
        err = GatewayTimeout(f"worker {worker.id} gave no answer within --request-timeout", code="timeout")
        await error_response_for_path(self.fwd.path, err)(scope, receive, send)
        return None


def _no_worker(e: LookupError, failures: list[str]) -> APIError:
    if getattr(e, "status", 503) == 400:  # the client named a worker that does not exist
        return BadRequest(str(e), code="unknown_worker")
    message = f"no worker could answer this request: {'; '.join(failures)}" if failures else str(e)
    return ServiceUnavailable(message, code="no_worker", headers={"Retry-After": "1"})


def _failure(worker: Worker, e: httpx.TransportError) -> _Failed:
    worker.breaker.record_failure()
    cause = "connect" if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)) else "read"
    return _Failed(cause, _describe(e))


def _describe(e: Exception) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _headers(upstream: httpx.Response, worker: Worker) -> list[tuple[bytes, bytes]]:
    return response_headers(list(upstream.headers.raw), worker.id)


async def _read_all(upstream: httpx.Response) -> bytes:
    # Raw bytes: whatever encoding the worker chose reaches the client unchanged.
    return b"".join([chunk async for chunk in upstream.aiter_raw()])


async def _send_whole(send, status: int, headers: list, body: bytes) -> None:
    headers = [h for h in headers if h[0] != b"content-length"] + [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _client_gone(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
