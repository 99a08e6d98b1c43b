"""The door every request passes: a trace id, and with keys configured, the
API key (`Authorization: Bearer <key>` or `x-api-key: <key>`), checked before
routing so an unauthenticated client learns nothing about routes or body
limits and no body is read. Health stays open.

Keys come from `tenants` (`inferd.tenants`): the bootstrap keys of
`--api-key`, `--api-key-file` and INFERD_API_KEY, and the managed ones. The
request then carries a ticket: on a generating path it takes a concurrency
lease and a request against rpm here, before any body is read; the route
admits the model and reserves tokens (`serving/admission.py`, the router's
`forward`); it is settled here when the response has been sent in full or
the client has gone; its x-ratelimit-* headers and the trace id go out on the
response. Refusals answer in the envelope of the dialect that owns the path.
A stream a router asked for (`x-inferd-report-usage`) ends with an SSE
comment giving the tokens it used, so the router settles exactly. An answer
whose request opened request cards names them (`x-inferd-request-card`): a
trace id may be reused by clients, a card id names one request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable

from starlette.responses import Response

from inferd.http.errors import APIError, Unauthorized
from inferd.http.request_context import TRACE_HEADER, RequestContext, request_current, trace_id_of
from inferd.tenants.gate import Tenants, Ticket
from inferd.tenants.refused import Refused

log = logging.getLogger("inferd.requests")

# Answers an error for a path in the envelope of the dialect the path belongs to.
ErrorResponder = Callable[[str, APIError], Response]

WEBSOCKET_POLICY_VIOLATION = 1008
USAGE_HEADER = b"x-inferd-report-usage"  # a router asks a worker for `usage_comment` at a stream's end
USAGE_COMMENT = b": usage "
CARD_HEADER = b"x-inferd-request-card"  # the ids of the request cards an answer's request opened, comma-separated


class Forbidden(APIError):
    status, type = 403, "permission_error"


class TooManyRequests(APIError):
    status, type = 429, "rate_limit_error"


def refusal_error(refused: Refused) -> APIError:
    """A tenants refusal as an HTTP error; a 429's type names what ran out, as OpenAI's do."""
    headers = dict(refused.headers)
    if refused.status == 401:
        return Unauthorized(refused.message, code=refused.code, headers={"WWW-Authenticate": "Bearer", **headers})
    if refused.status == 403:
        return Forbidden(refused.message, code=refused.code, headers=headers or None)
    err = TooManyRequests(refused.message, code=refused.code, headers=headers or None)
    err.type = refused.kind or err.type
    return err


class ApiKeyAuth:
    """ASGI middleware. `tenants()` is read per request: no keys means open.
    `services` are lent to every request's context (the server's request cards)."""

    def __init__(self, app, tenants: Callable[[], Tenants | None], open_paths: Iterable[str],
                 respond: ErrorResponder, services: Callable[[], dict] | None = None,
                 generating: Callable[[str], bool] = lambda path: False, enter_at_door: bool = True):
        self.app = app
        self.tenants = tenants
        self.open_paths = frozenset(open_paths)
        self.respond = respond
        self.services = services or dict
        self.generating = generating  # paths whose requests are admitted against the key's limits
        # True: the lease and rpm are taken here, before the body is read; False: together with the
        # tokens where the route admits the request (one step; every generating route must admit)
        self.enter_at_door = enter_at_door

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, self._stopping_watch_at_shutdown(send))
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        trace = trace_id_of(scope["headers"])
        tenants = self.tenants()
        ctx = RequestContext(trace_id=trace, path=scope["path"], tenants=tenants, services=self.services())
        trace_header = (TRACE_HEADER, trace.encode())
        if tenants is not None and tenants.enabled and scope["path"] not in self.open_paths:
            try:
                ctx.key = tenants.identify(presented_keys(scope["headers"]))
                ctx.ticket = Ticket(ctx.key)
                if scope["type"] == "http" and self.generating(scope["path"]):
                    ctx.ticket.generating = True
                    if self.enter_at_door:
                        await tenants.enter(ctx.ticket)
            except Refused as refused:
                if ctx.ticket is not None:
                    tenants.refused(ctx.ticket, refused)
                if scope["type"] == "websocket":
                    return await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
                response = self.respond(scope["path"], refusal_error(refused))
                response.raw_headers.append(trace_header)
                return await response(scope, receive, send)
        if scope["type"] != "http":
            with request_current(ctx):
                return await self.app(scope, receive, send)
        status = 500
        report_usage = any(name == USAGE_HEADER for name, _ in scope["headers"])  # asked by a router
        event_stream = False

        async def send_with_headers(message):
            nonlocal status, event_stream
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [trace_header]
                if ctx.cards:
                    extra.append((CARD_HEADER, ",".join(card.id for card in ctx.cards).encode()))
                if ctx.ticket is not None:
                    extra += [(k.lower().encode(), v.encode()) for k, v in ctx.ticket.headers.items()
                              if k.lower() != "retry-after"]
                names = {n for n, _ in extra}
                headers = [h for h in message.get("headers", []) if h[0].lower() not in names]
                message = {**message, "headers": headers + extra}
                event_stream = report_usage and any(n.lower() == b"content-type" and v.startswith(b"text/event-stream")
                                                    for n, v in headers)
            elif event_stream and ctx.cards and not message.get("more_body", False):
                message = {**message, "body": message.get("body", b"") + usage_comment(ctx.cards)}
            await send(message)

        try:
            with request_current(ctx):
                await self.app(scope, receive, send_with_headers)
        finally:
            ticket = ctx.ticket
            if ticket is not None and ticket.admitted:
                await tenants.settle(ticket, status)
                prompt, completion, _ = ticket.usage()
                log.info("%s %s key=%s model=%s status=%d tokens=%d+%d%s trace=%s", scope["method"], scope["path"],
                         ticket.key.name, ticket.model, status, prompt, completion, timings(ctx), trace)
            elif ctx.model:  # a generating request on a server without keys
                log.info("%s %s model=%s status=%d%s trace=%s", scope["method"], scope["path"], ctx.model, status,
                         timings(ctx), trace)


    def _stopping_watch_at_shutdown(self, send):
        """Once the app has shut down, the key store's watcher thread ends with it (the tenants
        themselves are closed by whoever opened them: `inferd serve` still settles jobs after)."""

        async def send_then_stop(message):
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                tenants = self.tenants()
                if tenants is not None:
                    await asyncio.to_thread(tenants.stop_watching)  # joins a thread that may be mid-poll
            await send(message)

        return send_then_stop


def usage_comment(cards) -> bytes:
    """The tokens a stream's generations used, as an SSE comment after its last event, for a router
    to settle its key's reservation exactly whatever the stream reports itself (an OpenAI stream
    without include_usage reports nothing). Clients ignore comments, as they do keep-alives."""
    totals = {"prompt_tokens": sum(c.prompt_tokens for c in cards),  # OpenAI's usage shape
              "completion_tokens": sum(c.completion_tokens for c in cards),
              "prompt_tokens_details": {"cached_tokens": sum(c.cached_tokens for c in cards)}}
    return USAGE_COMMENT + json.dumps(totals).encode() + b"\n\n"


def timings(ctx: RequestContext) -> str:
    """The log line's queue time and time to first token, from the request's first card (none in a router)."""
    if not ctx.cards:
        return ""
    card = ctx.cards[0]
    ttft = "-" if card.first_token is None else f"{(card.first_token - card.started) * 1000:.0f}"
    return f" queue_ms={card.queue_time * 1000:.0f} ttft_ms={ttft}"


def presented_keys(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """Every key the request offers, from either header."""
    keys = []
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                keys.append(token.strip())
        elif name == b"x-api-key" and value.strip():
            keys.append(value.strip())
    return keys
