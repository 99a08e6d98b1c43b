"""llama-server's native routes: HTTP concerns only; the work is in the modules beside this."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Request

from inferd.api.llamacpp.apply_template import apply_template
from inferd.api.llamacpp.completion import create_completion
from inferd.api.llamacpp.embedding import EmbeddingRequest, create_embedding
from inferd.api.llamacpp.infill import create_infill
from inferd.api.llamacpp.props import props
from inferd.api.llamacpp.rerank import RerankRequest, create_rerank
from inferd.api.llamacpp.protocol import CompletionRequest, DetokenizeRequest, InfillRequest, TokenizeRequest
from inferd.api.llamacpp.slot_actions import slot_action
from inferd.api.llamacpp.slots import slots
from inferd.api.llamacpp.tokenize import detokenize, tokenize
from inferd.serving.chat_request import ChatCompletionRequest
from inferd.serving.state import ServerState, get_state
from inferd.serving.tokens import off_loop

router = APIRouter(tags=["llama.cpp"])

_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "JSON, or server-sent events when stream is true"}}


@router.post("/completion", responses=_STREAM)
@router.post("/completions", include_in_schema=False)  # llama-server's other spelling (not OpenAI's /v1/completions)
async def completion(body: CompletionRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_completion(state, body, raw)


@router.post("/infill", responses=_STREAM)
async def infill(body: InfillRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_infill(state, body, raw)


@router.post("/tokenize")
async def tokenize_route(body: TokenizeRequest, state: ServerState = Depends(get_state)):
    return await off_loop(tokenize, state, body)


@router.post("/detokenize")
async def detokenize_route(body: DetokenizeRequest, state: ServerState = Depends(get_state)):
    return await off_loop(detokenize, state, body)


@router.post("/apply-template")
async def apply_template_route(body: ChatCompletionRequest, state: ServerState = Depends(get_state)):
    return apply_template(state, body)


@router.get("/slots")
async def slots_route(state: ServerState = Depends(get_state)):
    return slots(state)


@router.post("/slots/{slot_id}")
async def slot_action_route(slot_id: int, action: str | None = None, body: dict | None = Body(None),
                            state: ServerState = Depends(get_state)):
    return await slot_action(state, slot_id, action, body)


@router.get("/props")
async def props_route(state: ServerState = Depends(get_state)):
    return props(state)


@router.post("/embedding")
@router.post("/embeddings")
async def embedding(body: EmbeddingRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_embedding(state, body, raw)


@router.post("/v1/rerank")
@router.post("/v1/reranking", include_in_schema=False)
@router.post("/rerank", include_in_schema=False)
@router.post("/reranking", include_in_schema=False)
async def rerank_route(body: RerankRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_rerank(state, body, raw)
