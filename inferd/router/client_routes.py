"""The client routes the router forwards, one per dialect endpoint in the
registry: read the body once, work out the routing key, the model and whether
the answer streams, then hand it to the proxy.

Streaming follows each dialect's default (`Endpoint.streams_unless_false`):
OpenAI, Anthropic, Responses and llama-server stream only with
`"stream": true`; Ollama's /api/chat and /api/generate unless `"stream": false`.

Stored responses live on the worker that created them: reads, deletes,
cancels and `previous_response_id` continuations go to that worker; so do
files, batches and jobs (a batch goes where its input file is). Their
listings ask every worker and merge the answers (`merged_lists.py`).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from starlette.requests import Request
from starlette.routing import Route

from inferd.api.registry import endpoints, error_response_for_path
from inferd.http.dialect import Endpoint
from inferd.http.errors import APIError, BadRequest, unreadable_body
from inferd.http.form_fields import form_fields, is_form
from inferd.http.request_context import current_request
from inferd.router.admission import UsageMeter, admit_forward, with_trace_id
from inferd.router.http_headers import ON_BEHALF_HEADER, request_headers
from inferd.router.merged_lists import LISTINGS, ListRequest, merged_listing
from inferd.router.policies.direct import named_worker
from inferd.router.proxy import Forward
from inferd.router.request_cards import counted_by_worker
from inferd.router.routing_key import routing_request
from inferd.router.state import RouterState

_STORED_ID = re.compile(r"^(resp_|batch_|msgbatch_|file-)[A-Za-z0-9_-]+$")
# Where a request names something a worker keeps: path parameters, then body fields.
_STORED_PARAMS = ("response_id", "batch_id", "file_id", "job_id")
_STORED_FIELDS = ("previous_response_id", "input_file_id")
# The headers that say whose stored things a lookup may find.
_WHO_ASKS = (b"authorization", b"x-api-key", ON_BEHALF_HEADER)
# What a forwarded path keeps as it is: its escapes and the characters a path may hold.
_PATH_SAFE = "/%!$&'()*+,;=:@~-._"


def wants_stream(endpoint: Endpoint, body: dict) -> bool:
    stream = body.get("stream")
    if isinstance(stream, str):  # a form field
        stream = {"true": True, "false": False}.get(stream.strip().lower(), stream)
    return stream is not False if endpoint.streams_unless_false else bool(stream)


def forwarded_target(request: Request) -> str:
    """The path and query as the client sent them, escapes kept: decoded, an
    escaped control character (%00, %0A) makes a URL the HTTP client refuses."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string", b"")
    return quote(raw, safe=_PATH_SAFE) + (f"?{query.decode('latin-1')}" if query else "")


def requested_model(body: dict) -> str | None:
    model = body.get("model") or body.get("name")  # Ollama's /api/show also takes "name"
    return model if isinstance(model, str) and model else None


async def forward(request: Request, endpoint: Endpoint):
    state: RouterState = request.app.state.router
    path = request.url.path
    raw = await request.body()
    content_type = request.headers.get("content-type", "")
    if is_form(content_type):  # an upload: passed on untouched, routed by its text fields
        parsed = form_fields(raw, content_type)
    else:
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            return error_response_for_path(path, BadRequest(unreadable_body(e)))
    body = parsed if isinstance(parsed, dict) else {}
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}
    header, named = named_worker(headers)
    if named and state.fleet.get(named) is None:
        return error_response_for_path(path, BadRequest(
            f"{header}: no worker {named!r} in the fleet; GET /v1/workers lists them",
            param=header, code="unknown_worker"))
    pinned, observe = None, None
    response_id = next((v for v in (*map(request.path_params.get, _STORED_PARAMS), *map(body.get, _STORED_FIELDS))
                        if v), None)
    ctx = current_request()
    caller = ctx.key if ctx is not None else None
    to_worker = request_headers(list(request.scope["headers"]), state.config.worker_api_key, state.tenants.enabled,
                                on_behalf_of=caller.name if caller else None, scopes=caller.scopes if caller else (),
                                limits=_set_limits(caller))
    if isinstance(response_id, str) and _STORED_ID.match(response_id):
        # Asked as the request goes on (the caller's key passed through, or the worker key for the caller
        # the router identified), so a worker answers only for what the caller may read.
        keys = {n.decode("latin-1"): v.decode("latin-1") for n, v in to_worker if n in _WHO_ASKS}
        pinned = await state.owners.locate(response_id, state.fleet, state.client, keys)
    if endpoint.stores_response:
        observe = state.owners.learn
    admitted = await admit_forward(endpoint, body, requested_model(body))
    if isinstance(admitted, APIError):
        return error_response_for_path(path, admitted)
    listing = LISTINGS.get(path) if request.method == "GET" and not named else None
    if listing is not None:  # every worker keeps its own: one page of them all
        return await _merged(state, request, listing, with_trace_id(to_worker))
    target = forwarded_target(request)
    if isinstance(admitted, UsageMeter):
        if body.get("background") is True:  # answered queued, with no usage: the run is claimed later (job_charges)
            admitted.estimate = (0, 0)
        to_worker = admitted.asking(to_worker)
        trace = current_request().trace_id
        admitted.ask_worker = lambda worker_id: counted_by_worker(state, worker_id, trace)
    fwd = Forward(
        method=request.method, path=path, target=target, headers=with_trace_id(to_worker),
        body=raw, routing=routing_request(path, body, headers, state.tokenize), model=requested_model(body),
        streaming=wants_stream(endpoint, body), pinned=pinned, observe=observe,
    )
    response = state.proxy.response(fwd)
    return admitted.wrap(response) if isinstance(admitted, UsageMeter) else response


async def _merged(state: RouterState, request: Request, listing, to_worker: list[tuple[bytes, bytes]]):
    headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in to_worker]
    keys = {n: v for n, v in headers if n.encode() in _WHO_ASKS}

    async def locate(id: str):
        return await state.owners.locate(id, state.fleet, state.client, keys) if _STORED_ID.match(id) else None

    workers = [w for w in state.fleet.workers.values() if w.routable]
    return await merged_listing(ListRequest(listing, request.url.path, dict(request.query_params), headers),
                                workers, state.client, locate)


def forwarded_route(endpoint: Endpoint) -> Route:
    async def handle(request: Request):
        return await forward(request, endpoint)

    return Route(endpoint.path, handle, methods=list(endpoint.methods))


def client_routes() -> list[Route]:
    return [forwarded_route(e) for e in endpoints().values()]


def _set_limits(key) -> dict | None:
    """The limits a router key has (0 is none), for the worker to hold its batch items to."""
    if key is None:
        return None
    return {name: value for name, value in key.limits.as_dict().items() if value} or None
