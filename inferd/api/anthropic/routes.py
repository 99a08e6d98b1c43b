"""Anthropic routes: HTTP concerns only; the work is in the modules beside this."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.anthropic import batches
from inferd.api.anthropic.errors import AnthropicRoute
from inferd.api.anthropic.messages import count_tokens, create_message
from inferd.api.anthropic.protocol import CountTokensRequest, CountTokensResponse, MessagesRequest, MessagesResponse
from inferd.serving.state import ServerState, get_state

router = APIRouter(route_class=AnthropicRoute)
router.include_router(batches.router)  # message batches, kept by the job plane (`inferd.jobs`)

_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "JSON, or server-sent events when stream is true"}}


@router.post("/v1/messages", response_model=MessagesResponse, responses=_STREAM)
@router.post("/messages", response_model=MessagesResponse, include_in_schema=False)
async def messages(body: MessagesRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_message(state, body, raw)


@router.post("/v1/messages/count_tokens", response_model=CountTokensResponse)
@router.post("/messages/count_tokens", response_model=CountTokensResponse, include_in_schema=False)
async def messages_count_tokens(body: CountTokensRequest, state: ServerState = Depends(get_state)):
    return await count_tokens(state, body)
