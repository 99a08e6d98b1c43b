"""The workers' request cards through the router (`/v1/requests`), as a
server shows them: the router asks every worker and keeps the cards of
requests it forwarded itself, each under the key that sent it to the router
(workers see the router's key, not the client's). A key sees its own; an
admin key, all of the router's. Cancel and interrupt go to the worker that
holds the card.

`TraceBook` remembers whose the last forwarded requests were: by trace id
(`x-request-id`, which the router passes to workers) as each is admitted,
and by card id once the worker's answer names its cards
(`x-inferd-request-card`). Clients may reuse a trace id, so a card is
known by its id first; by trace id only while one key alone has used it
(otherwise an admin key still sees it, no other key does).
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
SHARED = object()  # the owner of a trace id that several keys have sent


class TraceBook:
    """The key name (None without keys) that sent each forwarded request, by trace id and by card id."""

    def __init__(self, size: int = REMEMBERED):
        self.size = size
        self._by_trace: OrderedDict[str, object] = OrderedDict()
        self._by_card: OrderedDict[str, str | None] = OrderedDict()

    def note(self, trace_id: str, key: str | None) -> None:
        if trace_id in self._by_trace and self._by_trace[trace_id] != key:
            key = SHARED
        _remember(self._by_trace, trace_id, key, self.size)

    def note_cards(self, card_ids: list[str], key: str | None) -> None:
        for card_id in card_ids:
            _remember(self._by_card, card_id, key, self.size)

    def owner(self, card: dict) -> tuple[bool, object]:
        """(forwarded by this router, the key that sent it: SHARED when only its trace id is known
        and several keys have sent that)."""
        card_id, trace_id = card.get("id", ""), card.get("trace_id", "")
        if card_id in self._by_card:
            return True, self._by_card[card_id]
        return trace_id in self._by_trace, self._by_trace.get(trace_id)


def _remember(book: OrderedDict, name: str, value, size: int) -> None:
    book[name] = value
    book.move_to_end(name)
    while len(book) > size:
        book.popitem(last=False)


def _visible(state: RouterState, card: dict) -> bool:
    known, owner = state.traces.owner(card)
    if not known:
        return False
    ctx = current_request()
    key = ctx.key if ctx is not None else None
    return key is None or key.admin or owner == key.name


def _as_routed(state: RouterState, card: dict, worker_id: str) -> dict:
    owner = state.traces.owner(card)[1]
    return {**card, "key": None if owner is SHARED else owner, "worker": worker_id}


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
    """The tokens the worker's cards for the current request (`trace_id`) show once the worker has
    ended it (within FINAL_WAIT; the count so far after that), as `admission.usage_fields` names
    them. The cards are those the worker's answer named (kept on the request's context by its
    meter), never looked up by trace id, which other requests may share: without them, None."""
    ctx = current_request()
    card_ids = ctx.worker_cards if ctx is not None and ctx.trace_id == trace_id else []
    worker = state.fleet.get(worker_id)
    if worker is None or not card_ids:
        return None
    counted = {"prompt": 0, "completion": 0, "cached": 0}
    for card_id in card_ids:
        usage = await _final_usage(state, worker.url, card_id)
        if usage is None:
            return None
        for name, field in (("prompt", "prompt_tokens"), ("completion", "completion_tokens"),
                            ("cached", "cached_tokens")):
            counted[name] += usage.get(field, 0)
    return counted


async def _final_usage(state: RouterState, url: str, card_id: str) -> dict | None:
    deadline = asyncio.get_running_loop().time() + FINAL_WAIT
    while True:
        r = await state.client.get(f"{url}/v1/requests/{card_id}", headers=state.worker_headers, timeout=ASK_TIMEOUT)
        if r.status_code != 200:
            return None
        card = r.json()
        if card.get("state") not in IN_FLIGHT or asyncio.get_running_loop().time() > deadline:
            return card.get("usage") or {}
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
    """The card with this id, else the newest with this trace id that the caller may see, on any worker."""
    exact, by_trace = await asyncio.gather(_ask(state, "GET", f"/v1/requests/{id}"),
                                           _ask(state, "GET", "/v1/requests", params={"trace_id": id}))
    for worker_id, r in exact:
        if r.status_code == 200 and r.json().get("id") == id and _visible(state, r.json()):
            return worker_id, r.json()
    traced = [(c.get("created", 0), worker_id, c["id"]) for worker_id, r in by_trace if r.status_code == 200
              for c in r.json().get("data", []) if c.get("trace_id") == id and _visible(state, c)]
    if traced:  # the newest; asked again for its output, which lists leave out
        _, worker_id, card_id = max(traced)
        worker = state.fleet.get(worker_id)
        try:
            r = await state.client.get(f"{worker.url}/v1/requests/{card_id}", headers=state.worker_headers,
                                       timeout=ASK_TIMEOUT) if worker is not None else None
        except httpx.HTTPError:
            r = None
        if r is not None and r.status_code == 200:
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
