"""The workers' request cards through the router (`/v1/requests`), as a
server shows them: the router asks every worker and keeps the cards of
requests it forwarded itself, each under the key that sent it to the router
(workers see the router's key, not the client's). A key sees its own; an
admin key, all of the router's. Cancel and interrupt go to the worker that
holds the card.

The router knows its requests by trace id (`x-request-id`, which it passes
to workers): `TraceBook` remembers the last ones it forwarded.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import httpx
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from inferd.http.errors import NotFound
from inferd.http.request_context import current_request
from inferd.router.state import RouterState, get_state

router = APIRouter()
REMEMBERED = 4096
ASK_TIMEOUT = 5.0
IN_FLIGHT = ("queued", "running")
FINAL_WAIT = 5.0  # how long a count is waited for after a client left mid-stream (the worker stops within a step)
FINAL_POLL = 0.05


class TraceBook:
    """Trace ids of forwarded requests and the key name that sent each (None without keys)."""

    def __init__(self, size: int = REMEMBERED):
        self.size = size
        self._keys: OrderedDict[str, str | None] = OrderedDict()

    def note(self, trace_id: str, key: str | None) -> None:
        self._keys[trace_id] = key
        self._keys.move_to_end(trace_id)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def owner(self, trace_id: str) -> tuple[bool, str | None]:
        return trace_id in self._keys, self._keys.get(trace_id)


def _visible(state: RouterState, card: dict) -> bool:
    known, owner = state.traces.owner(card.get("trace_id", ""))
    if not known:
        return False
    ctx = current_request()
    key = ctx.key if ctx is not None else None
    return key is None or key.admin or owner == key.name


def _as_routed(state: RouterState, card: dict, worker_id: str) -> dict:
    return {**card, "key": state.traces.owner(card["trace_id"])[1], "worker": worker_id}


async def _ask(state: RouterState, method: str, path: str, params=None) -> list[tuple[str, httpx.Response]]:
    async def one(w):
        try:
            r = await state.client.request(method, w.url + path, params=params, headers=state.worker_headers,
                                           timeout=ASK_TIMEOUT)
            return w.id, r
        except httpx.HTTPError:
            return w.id, None

    answers = await asyncio.gather(*(one(w) for w in state.fleet.routable()))
    return [(wid, r) for wid, r in answers if r is not None]


async def counted_by_worker(state: RouterState, worker_id: str, trace_id: str) -> dict[str, int] | None:
    """The tokens the worker's card for `trace_id` shows once the worker has ended the request
    (within FINAL_WAIT; the count so far after that), as `admission.usage_fields` names them."""
    worker = state.fleet.get(worker_id)
    if worker is None:
        return None
    deadline = asyncio.get_running_loop().time() + FINAL_WAIT
    while True:
        r = await state.client.get(f"{worker.url}/v1/requests/{trace_id}", headers=state.worker_headers,
                                   timeout=ASK_TIMEOUT)
        if r.status_code != 200:
            return None
        card = r.json()
        if card.get("state") not in IN_FLIGHT or asyncio.get_running_loop().time() > deadline:
            usage = card.get("usage") or {}
            return {"prompt": usage.get("prompt_tokens", 0), "completion": usage.get("completion_tokens", 0),
                    "cached": usage.get("cached_tokens", 0)}
        await asyncio.sleep(FINAL_POLL)


@router.get("/v1/requests")
async def list_requests(request: Request, state: RouterState = Depends(get_state)):
    cards = []
    for worker_id, r in await _ask(state, "GET", "/v1/requests", params=dict(request.query_params)):
        if r.status_code == 200:
            cards += [_as_routed(state, c, worker_id) for c in r.json().get("data", []) if _visible(state, c)]
    cards.sort(key=lambda c: (c["state"] not in IN_FLIGHT, -c.get("created", 0)))
    return {"object": "list", "data": cards}


async def _find(state: RouterState, id: str) -> tuple[str, dict]:
    for worker_id, r in await _ask(state, "GET", f"/v1/requests/{id}"):
        if r.status_code == 200 and _visible(state, r.json()):
            return worker_id, r.json()
    raise NotFound(f"no request {id!r} among those in flight or recently finished; GET /v1/requests lists them",
                   code="request_not_found")


@router.get("/v1/requests/{id}")
async def get_request(id: str, state: RouterState = Depends(get_state)):
    worker_id, card = await _find(state, id)
    return _as_routed(state, card, worker_id)


async def _stop(state: RouterState, id: str, how: str):
    worker_id, card = await _find(state, id)
    worker = state.fleet.get(worker_id)
    r = await state.client.post(f"{worker.url}/v1/requests/{card['id']}/{how}", headers=state.worker_headers,
                                timeout=ASK_TIMEOUT)
    body = r.json()
    return JSONResponse(_as_routed(state, body, worker_id) if r.status_code == 200 else body, status_code=r.status_code)


@router.post("/v1/requests/{id}/cancel")
async def cancel_request(id: str, state: RouterState = Depends(get_state)):
    return await _stop(state, id, "cancel")


@router.post("/v1/requests/{id}/interrupt")
async def interrupt_request(id: str, state: RouterState = Depends(get_state)):
    return await _stop(state, id, "interrupt")
