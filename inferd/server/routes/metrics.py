"""GET /metrics: the Prometheus text format, when the server runs with --metrics."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST

from inferd.http.errors import NotFound
from inferd.serving.state import ServerState, get_state

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(state: ServerState = Depends(get_state)):
    if state.metrics is None:
        raise NotFound("metrics are off; start the server with --metrics to serve them here")
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
