"""Health: 200 with capacity (sequences running and queued, slots, context size)
when ready, 503 while loading. Never behind auth. /healthz for probes that expect it."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from inferd.serving.state import ServerState, get_state

router = APIRouter()

HEALTH_PATHS = ("/health", "/v1/health", "/healthz", "/")


class Health(BaseModel):
    status: str  # "ok" | "loading" | "draining"
    model: str
    running: int = 0  # sequences being generated
    waiting: int = 0  # queued for a slot
    max_parallel: int
    slots_idle: int = 0  # llama-server's names for the same capacity
    slots_processing: int = 0
    ctx_size: int = 0  # tokens per sequence


@router.get("/health", response_model=Health)
@router.get("/v1/health", response_model=Health, include_in_schema=False)
@router.get("/healthz", response_model=Health, include_in_schema=False)
@router.get("/", response_model=Health, include_in_schema=False)
async def health(state: ServerState = Depends(get_state)):
    if not state.ready:
        body = Health(status="loading", model=state.model_name, max_parallel=state.config.parallel)
        return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "2"})
    status = "draining" if state.draining else "ok"
    if state.engine is None:  # an embedding or rerank model alone
        return Health(status=status, model=state.model_name, max_parallel=0)
    stats = state.engine.stats()
    return Health(status=status, model=state.model_name, running=stats.running, waiting=stats.waiting,
                  max_parallel=stats.max_running, slots_processing=stats.running,
                  slots_idle=max(stats.max_running - stats.running, 0), ctx_size=state.engine.engine.max_model_len)
