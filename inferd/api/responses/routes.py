"""Responses API routes: HTTP concerns only; the work is in the modules beside this."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.job_access import job_owner
from inferd.api.responses import stored
from inferd.api.responses.create import count_input_tokens, create_response
from inferd.api.responses.protocol import DeletedResponse, InputTokensResponse, ResponseObject, ResponsesRequest
from inferd.serving.state import ServerState, get_state

router = APIRouter()

_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "JSON, or server-sent events when stream is true"}}


@router.post("/v1/responses", response_model=ResponseObject, responses=_STREAM)
@router.post("/responses", response_model=ResponseObject, include_in_schema=False)
async def responses(body: ResponsesRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_response(state, body, raw)


@router.post("/v1/responses/input_tokens", response_model=InputTokensResponse)
@router.post("/responses/input_tokens", response_model=InputTokensResponse, include_in_schema=False)
async def responses_input_tokens(body: ResponsesRequest, state: ServerState = Depends(get_state)):
    return await count_input_tokens(state, body)


@router.get("/v1/responses/{response_id}", response_model=ResponseObject)
@router.get("/responses/{response_id}", response_model=ResponseObject, include_in_schema=False)
async def get_response(response_id: str, state: ServerState = Depends(get_state)):
    return await stored.retrieve(state, response_id)


@router.delete("/v1/responses/{response_id}", response_model=DeletedResponse)
@router.delete("/responses/{response_id}", response_model=DeletedResponse, include_in_schema=False)
async def delete_response(response_id: str, state: ServerState = Depends(get_state)):
    return await stored.delete(state, response_id)


@router.post("/v1/responses/{response_id}/cancel", response_model=ResponseObject)
@router.post("/responses/{response_id}/cancel", response_model=ResponseObject, include_in_schema=False)
async def cancel_response(response_id: str, raw: Request, state: ServerState = Depends(get_state),
                          owner: str = Depends(job_owner)):
    return await stored.cancel(state, response_id, getattr(raw.app.state, "jobs", None), owner)
