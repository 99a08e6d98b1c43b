"""Health: 200 with engine counts when ready, 503 while loading. Never behind auth."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from inferd.serving.state import ServerState, get_state

router = APIRouter()

HEALTH_PATHS = ("/health", "/v1/health", "/")


class Health(BaseModel):
    status: str  # "ok" | "loading" | "draining"
    model: str
    running: int = 0
    waiting: int = 0
    max_parallel: int


@router.get("/health", response_model=Health)
@router.get("/v1/health", response_model=Health, include_in_schema=False)
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
                  max_parallel=stats.max_running)
