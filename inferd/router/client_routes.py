"""The client routes the router forwards: read the body once, work out the
routing key, the model and whether the answer streams, then hand it to the proxy.

Streaming follows each dialect's default: OpenAI, Anthropic, Responses and
llama-server stream only with `"stream": true`; Ollama's /api/chat and
/api/generate stream unless `"stream": false`.

Stored responses live on the worker that created them: reads, deletes,
cancels and `previous_response_id` continuations go to that worker.
"""

from __future__ import annotations

import json
import re

from starlette.requests import Request
from starlette.routing import Route

from inferd.router.http_headers import request_headers
from inferd.router.policies.direct import HEADER as WORKER_ID_HEADER
from inferd.router.proxy import Forward
from inferd.router.routing_key import routing_request
from inferd.router.state import RouterState
from inferd.server.dialect_errors import error_response_for_path
from inferd.server.errors import BadRequest

_OPENAI = ("/chat/completions", "/completions", "/embeddings", "/responses", "/responses/input_tokens",
           "/messages", "/messages/count_tokens")
POST_ROUTES = (
    *(f"/v1{p}" for p in _OPENAI), *_OPENAI,
    "/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show",
    "/completion", "/infill", "/tokenize", "/detokenize", "/apply-template",
)
GET_ROUTES = ("/api/version",)
STREAMS_UNLESS_FALSE = ("/api/chat", "/api/generate")
RESPONSE_ROUTES = (  # (path, methods) of one stored response
    ("/v1/responses/{response_id}", ["GET", "DELETE"]), ("/responses/{response_id}", ["GET", "DELETE"]),
    ("/v1/responses/{response_id}/cancel", ["POST"]), ("/responses/{response_id}/cancel", ["POST"]),
    ("/v1/responses/{response_id}/input_items", ["GET"]), ("/responses/{response_id}/input_items", ["GET"]),
)
_CREATES_RESPONSE = ("/v1/responses", "/responses")
_RESPONSE_ID = re.compile(r"^resp_[A-Za-z0-9_-]+$")


def wants_stream(path: str, body: dict) -> bool:
    stream = body.get("stream")
    return stream is not False if path in STREAMS_UNLESS_FALSE else bool(stream)


def requested_model(body: dict) -> str | None:
    model = body.get("model") or body.get("name")  # Ollama's /api/show also takes "name"
    return model if isinstance(model, str) and model else None


async def forward(request: Request):
    state: RouterState = request.app.state.router
    path = request.url.path
    raw = await request.body()
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as e:
        return error_response_for_path(path, BadRequest(f"request body is not valid JSON: {e}"))
    body = parsed if isinstance(parsed, dict) else {}
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}
    named = headers.get(WORKER_ID_HEADER, "").strip()
    if named and state.fleet.get(named) is None:
        return error_response_for_path(path, BadRequest(
            f"{WORKER_ID_HEADER}: no worker {named!r} in the fleet; GET /v1/workers lists them",
            param=WORKER_ID_HEADER, code="unknown_worker"))
    pinned, observe = None, None
    response_id = request.path_params.get("response_id") or body.get("previous_response_id")
    if isinstance(response_id, str) and _RESPONSE_ID.match(response_id):
        pinned = await state.owners.locate(response_id, state.fleet, state.client, state.worker_headers)
    if path in _CREATES_RESPONSE:
        observe = state.owners.learn
    target = path + (f"?{request.url.query}" if request.url.query else "")
    fwd = Forward(
        method=request.method, path=path, target=target,
        headers=request_headers(list(request.scope["headers"]), state.config.worker_api_key, bool(state.api_keys)),
        body=raw, routing=routing_request(path, body, headers, state.tokenize), model=requested_model(body),
        streaming=wants_stream(path, body), pinned=pinned, observe=observe,
    )
    return state.proxy.response(fwd)


def client_routes() -> list[Route]:
    routes = [Route(p, forward, methods=["POST"]) for p in POST_ROUTES]
    routes += [Route(p, forward, methods=["GET"]) for p in GET_ROUTES]
    routes += [Route(p, forward, methods=m) for p, m in RESPONSE_ROUTES]
    return routes
