"""Routes the router answers itself: the fleet, its health, its metrics,
and the model lists (the union of what the workers serve)."""

from __future__ import annotations

import asyncio
import time

import httpx
from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from inferd.router.state import RouterState, get_state
from inferd.router.worker import Worker
from inferd.http.errors import NotFound

router = APIRouter()

HEALTH_PATHS = ("/health", "/v1/health")
TAGS_TIMEOUT = 2.0


def worker_view(state: RouterState, w: Worker) -> dict:
    return {
        "id": w.id, "url": w.url, "model": w.model, "models": sorted(state.fleet.names(w)), "source": w.source,
        "state": w.state, "ready": w.ready, "in_flight": w.in_flight, "parallel": w.parallel,
        "capabilities": sorted(w.capabilities),
        "breaker": {"state": w.breaker.state, "failures": w.breaker.failures},
    }


@router.get("/v1/workers")
async def workers(state: RouterState = Depends(get_state)):
    return {"object": "list", "policy": state.config.policy,
            "data": [worker_view(state, w) for w in state.fleet.workers.values()]}


@router.get("/v1/admin/cache-view/{worker_id:path}")
async def cache_view(worker_id: str, state: RouterState = Depends(get_state)):
    if state.fleet.get(worker_id) is None:
        raise NotFound(f"no worker {worker_id!r} in the fleet; GET /v1/workers lists them", param="worker_id")
    return {"worker": worker_id, **state.policy.cache_view(worker_id)}


@router.get("/health")
@router.get("/v1/health", include_in_schema=False)
async def health(state: RouterState = Depends(get_state)):
    # Counts proven workers only, so the count holds still while a dead one is probed.
    healthy = len(state.fleet.healthy())
    if healthy == 0:
        return JSONResponse({"status": "no workers", "workers": 0}, status_code=503, headers={"Retry-After": "2"})
    return {"status": "ok", "workers": healthy}


@router.get("/metrics", include_in_schema=False)
async def metrics(state: RouterState = Depends(get_state)):
    if state.metrics is None:
        raise NotFound("metrics are off; start the router without --no-metrics to serve them here")
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/models")
@router.get("/models", include_in_schema=False)
async def models(state: RouterState = Depends(get_state)):
    """Every model some worker serves, as that worker describes it (first one wins)."""
    cards: dict[str, dict] = {}
    for w in state.fleet.workers.values():
        for card in state.fleet.model_cards.get(w.id, ()):
            cards.setdefault(card["id"], card)
        if w.model and w.model not in cards:
            cards[w.model] = {"id": w.model, "object": "model", "created": 0, "owned_by": "inferd"}
    return {"object": "list", "data": list(cards.values())}


@router.get("/api/tags")
async def tags(state: RouterState = Depends(get_state)):
    """Ollama's model list: each worker's own entries, and a bare entry for a
    model whose worker does not speak Ollama."""
    workers = state.fleet.routable()

    async def ask(w: Worker) -> list:
        try:
            r = await state.client.get(f"{w.url}/api/tags", headers=state.worker_headers, timeout=TAGS_TIMEOUT)
            found = r.json().get("models") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            found = None
        return found if isinstance(found, list) else []

    entries: dict[str, dict] = {}
    for w, found in zip(workers, await asyncio.gather(*(ask(w) for w in workers))):
        for entry in found:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                entries.setdefault(entry["name"], entry)
        for name in sorted(state.fleet.names(w)):
            if name not in entries and f"{name}:latest" not in entries:
                entries[name] = {"name": name, "model": name, "modified_at": _epoch(), "size": 0, "digest": "",
                                 "details": {}}
    return {"models": list(entries.values())}


def _epoch() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(0))
