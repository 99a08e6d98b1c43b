"""Runs one job item as the request it is, inside this process: the item's
body goes to its endpoint's route through the app's routing and error
handlers (not its middleware: there is no connection), as the key that
created the job, with that key's scopes, limits and usage ledger. So an item
is answered exactly as the same request sent over HTTP would be, errors in
its dialect's envelope included.

A job made on behalf of another key (through a router) runs as the key that
made it, admitted as the owner with the owner's scopes and limits when the
router sent them; each item's tokens go with its result (`ItemResult.usage`),
so the store can keep what the owner owes for a router to claim.

Batch items run at low priority, behind interactive traffic. An item that
cannot run now (the model still loading, the queue full, the key's rate
spent for the minute) is retried later; one that never could (a daily
allowance spent, a key removed) is answered with its error.
"""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import FastAPI
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware

from inferd.api.registry import error_response_for_path
from inferd.http.auth import Forbidden, refusal_error
from inferd.http.errors import APIError
from inferd.http.request_context import RequestContext, request_current
from inferd.jobs.runner import RESPONSE_ID, Retry
from inferd.jobs.store import Item, ItemResult, ItemUsage, Job
from inferd.server.model_select import ModelSelect
from inferd.serving.state import ServerState
from inferd.tenants.gate import Ticket
from inferd.tenants.keyring import KeyNotFound
from inferd.tenants.keys import ApiKey, Limits
from inferd.tenants.refused import Refused

# A 429 whose Retry-After is longer than this (a daily allowance) is the item's answer, not a pause.
LONGEST_WAIT = 120.0


class InProcessDispatch:
    def __init__(self, app: FastAPI, state: ServerState):
        self.app, self.state = app, state
        self._inner = None

    def _routes(self):
        """The app below its own middleware (no door, no body limits: the job was admitted when it was
        created and its items are checked as they are read), as FastAPI builds that part of its stack,
        behind the model selection every request passes."""
        if self._inner is None:
            handlers = {k: v for k, v in self.app.exception_handlers.items() if k not in (500, Exception)}
            routes = ExceptionMiddleware(AsyncExitStackMiddleware(self.app.router), handlers=handlers)
            # The model an item names is chosen (and loaded on demand) as for an interactive request.
            self._inner = ModelSelect(routes, state=lambda: self.state, respond=error_response_for_path)
        return self._inner

    async def __call__(self, job: Job, item: Item) -> ItemResult:
        path = job.endpoint
        tenants = self.state.tenants
        ctx = RequestContext(trace_id=f"{job.id}-{item.idx}", path=path, tenants=tenants,
                             services={"cards": self.state.cards})
        model = item.request.get("model")
        if job.scopes and not (isinstance(model, str) and model in job.scopes):  # the owner's, through a router
            return self._error(path, Forbidden(
                f"the key that made this job may not use model {model!r}; it may use "
                f"{', '.join(map(repr, job.scopes))}", code="model_not_allowed"), ctx.trace_id)
        if tenants is not None and tenants.enabled and job.caller:
            try:
                ctx.key = _usable_key(tenants, job.caller)
                if job.on_behalf and job.limits is not None:
                    ctx.key = _owner_key(job)
                ctx.ticket = Ticket(ctx.key)
                await tenants.enter(ctx.ticket)
            except Refused as refused:
                if refused.status == 429 and _wait(refused.headers) is not None:
                    raise Retry(_wait(refused.headers), refused.message) from None
                return self._error(path, refusal_error(refused), ctx.trace_id)
        status = 500
        try:
            status, headers, body = await self._call(path, item.request, ctx, job)
        finally:
            if ctx.ticket is not None and ctx.ticket.admitted:
                await tenants.settle(ctx.ticket, status)
        if status in (429, 503):
            wait = _wait(headers) if status == 429 else float(headers.get("retry-after", "1") or 1)
            if wait is not None:
                raise Retry(wait, f"HTTP {status}")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = {"text": body.decode("utf-8", "replace")}
        return ItemResult("succeeded" if status < 400 else "errored", status, parsed, ctx.trace_id, _usage(ctx, item))

    def _error(self, path: str, err: APIError, request_id: str) -> ItemResult:
        response = error_response_for_path(path, err)
        return ItemResult("errored", response.status_code, json.loads(response.body), request_id)

    async def _call(self, path: str, request: dict, ctx: RequestContext, job: Job) -> tuple[int, dict, bytes]:
        payload = json.dumps(request).encode()
        priority = b"normal" if job.kind == "response" else b"low"
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
            "query_string": b"", "client": ("job", 0), "server": ("inferd", 0), "app": self.app, "state": {},
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                        (b"x-priority", priority), (b"x-request-id", ctx.trace_id.encode())],
        }
        if job.kind == "response":
            scope[RESPONSE_ID] = job.id
        sent = False
        never = asyncio.Event()  # no client to go away: the item ends when it is cancelled

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await never.wait()

        started: dict = {}
        chunks: list[bytes] = []

        async def send(message):
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        with request_current(ctx):
            await self._routes()(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in started.get("headers", [])}
        return started.get("status", 500), headers, b"".join(chunks)


def _usage(ctx: RequestContext, item: Item) -> ItemUsage | None:
    """What the item's generations used (as the request cards counted them); None when none started."""
    if not ctx.cards:
        return None
    model = ctx.model or ctx.cards[0].model or str(item.request.get("model") or "")
    return ItemUsage(model, sum(c.prompt_tokens for c in ctx.cards), sum(c.completion_tokens for c in ctx.cards),
                     sum(c.cached_tokens for c in ctx.cards))


def _owner_key(job: Job) -> ApiKey:
    """The key a router spoke for, as far as admission needs it: its name (counters and ledger), scopes
    and limits. (With counters in Redis shared with the router, it is one limit with the router's.)"""
    return ApiKey(job.owner, secret_hash="", prefix="", scopes=job.scopes, limits=Limits(**job.limits))


def _usable_key(tenants, name: str):
    try:
        key = tenants.ring.get(name)
    except KeyNotFound:
        raise Refused(401, f"the API key {name!r} that created this job no longer exists",
                      code="invalid_api_key") from None
    if key.disabled:
        raise Refused(401, f"API key {name!r} is disabled", code="key_disabled")
    if key.expired(time.time()):
        raise Refused(401, f"API key {name!r} has expired", code="key_expired")
    return key


def _wait(headers: dict) -> float | None:
    """Seconds to wait before trying again, or None when that is too long to be worth waiting, or
    when no wait is named (a request that no window could ever hold: waiting cannot help)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after" not in lowered:
        return None
    try:
        wait = float(lowered["retry-after"])
    except ValueError:
        wait = 1.0
    return max(0.1, wait) if wait <= LONGEST_WAIT else None

