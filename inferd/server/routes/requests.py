"""Request cards (`serving/cards.py`) over HTTP:

    GET  /v1/requests                    in flight first, then recently finished; ?model= ?state= ?trace_id=
    GET  /v1/requests/{id}               one card with the last 64 KiB of output
    POST /v1/requests/{id}/cancel        the original answer ends with its dialect's error
    POST /v1/requests/{id}/interrupt     the original answer ends normally with the output so far

`{id}` is the request's id (every generating answer names it in its
x-inferd-request-card header) or its trace id (x-request-id). Clients may
reuse a trace id, so by trace id it is the newest such request the caller
may see. With API keys, a key sees its own requests and an admin key sees
all; another key's request is answered 404, as if it did not exist.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.http.errors import BadRequest, NotFound
from inferd.http.key_routes import Conflict
from inferd.http.request_context import current_request
from inferd.serving.cards import ENDED, RequestCard
from inferd.serving.state import ServerState, get_state

router = APIRouter()
STATES = ("queued", "running", *ENDED)


def _visible_to_caller(card: RequestCard) -> bool:
    ctx = current_request()
    key = ctx.key if ctx is not None else None
    return key is None or key.admin or card.key == key.name


def _card(state: ServerState, id: str) -> RequestCard:
    card = state.cards.find(id, _visible_to_caller)
    if card is None:
        raise NotFound(f"no request {id!r} among those in flight or recently finished; GET /v1/requests lists them",
                       code="request_not_found")
    return card


@router.get("/v1/requests")
async def list_requests(request: Request, state: ServerState = Depends(get_state)):
    model, wanted = request.query_params.get("model") or None, request.query_params.get("state") or None
    if wanted is not None and wanted not in STATES:
        raise BadRequest(f"state must be one of {', '.join(STATES)}, got {wanted!r}", param="state")
    cards = state.cards.listed(model=model, state=wanted, trace_id=request.query_params.get("trace_id") or None,
                               visible=_visible_to_caller)
    return {"object": "list", "data": [c.public() for c in cards]}


@router.get("/v1/requests/{id}")
async def get_request(id: str, state: ServerState = Depends(get_state)):
    return _card(state, id).public(output=True)


async def _stop(state: ServerState, id: str, how: str, verb: str) -> dict:
    card = _card(state, id)
    generation = card.generation
    if generation is None or not generation.stop(how):
        raise Conflict(f"request {card.id!r} has already ended ({card.state}); nothing to {verb}",
                       code="request_ended")
    return card.public()


@router.post("/v1/requests/{id}/cancel")
async def cancel_request(id: str, state: ServerState = Depends(get_state)):
    return await _stop(state, id, "cancelled", "cancel")


@router.post("/v1/requests/{id}/interrupt")
async def interrupt_request(id: str, state: ServerState = Depends(get_state)):
    return await _stop(state, id, "interrupted", "interrupt")
