"""OpenAI routes: HTTP concerns only; the work is in the modules beside this."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.openai import batches, files, jobs
from inferd.api.openai.chat import create_chat_completion
from inferd.api.openai.completions import create_completion
from inferd.api.openai.models import find_model, list_models
from inferd.api.openai.embeddings import EmbeddingRequest, create_embeddings
from inferd.api.openai.input_tokens import count_input_tokens
from inferd.api.openai.protocol import ChatCompletionResponse, CompletionRequest, CompletionResponse, ModelCard, ModelList
from inferd.serving.chat_request import ChatCompletionRequest
from inferd.serving.state import ServerState, get_state

router = APIRouter()
for _jobs_router in (files.router, batches.router, jobs.router):  # work kept by the job plane (`inferd.jobs`)
    router.include_router(_jobs_router)

_STREAM = {200: {"content": {"text/event-stream": {}}, "description": "JSON, or server-sent events when stream is true"}}


@router.post("/v1/chat/completions/input_tokens")
@router.post("/chat/completions/input_tokens", include_in_schema=False)
async def chat_input_tokens(body: ChatCompletionRequest, state: ServerState = Depends(get_state)):
    return await count_input_tokens(state, body)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=_STREAM)
@router.post("/chat/completions", response_model=ChatCompletionResponse, include_in_schema=False)
async def chat_completions(body: ChatCompletionRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_chat_completion(state, body, raw)


@router.post("/v1/completions", response_model=CompletionResponse, responses=_STREAM)
async def completions(body: CompletionRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_completion(state, body, raw)


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_embeddings(state, body, raw)


@router.get("/v1/models", response_model=ModelList)
@router.get("/models", response_model=ModelList, include_in_schema=False)
async def models(state: ServerState = Depends(get_state)):
    engine = state.engine if state.ready else state.require_engine()
    created = int(state.started)
    chat = [] if engine is None else [
        ModelCard(id=state.model_name, created=created, max_model_len=engine.engine.max_model_len)]  # aliases answer, unlisted
    pooled = [ModelCard(id=m.name, created=created, max_model_len=m.pooled.max_tokens)  # embedding and rerank models
              for m in state.served.models if m.pooled is not None and m.name not in {ch.id for ch in chat}]
    return await list_models(state, chat + pooled)


@router.get("/v1/models/{model_id:path}", response_model=ModelCard)
@router.get("/models/{model_id:path}", response_model=ModelCard, include_in_schema=False)
async def model(model_id: str, state: ServerState = Depends(get_state)):
    return find_model((await models(state)).data, model_id)
