"""Ollama's `POST /api/embed` (a batch, truncated by default) and the older
`POST /api/embeddings` (one prompt, one vector). Models stay loaded, so
`keep_alive` has nothing to change and is accepted as it comes."""

from __future__ import annotations

import time

from pydantic import Field
from starlette.requests import Request

from inferd.api.ollama.protocol import OllamaModel
from inferd.serving.embeddings import embed
from inferd.serving.served_models import EMBED


class EmbedRequest(OllamaModel):
    model: str
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = Field(None, ge=1)
    keep_alive: str | int | float | None = None
    options: dict | None = None


class EmbeddingsRequest(OllamaModel):
    model: str
    prompt: str
    keep_alive: str | int | float | None = None
    options: dict | None = None


async def create_embed(state, req: EmbedRequest, raw: Request | None = None) -> dict:
    started = time.monotonic_ns()
    inputs = [req.input] if isinstance(req.input, str) else req.input
    result = await embed(state, req.model, inputs, truncate=req.truncate, dimensions=req.dimensions, raw=raw)
    return {
        "model": req.model,
        "embeddings": [v.tolist() for v in result.vectors],
        "total_duration": time.monotonic_ns() - started,
        "load_duration": 0,
        "prompt_eval_count": result.prompt_tokens,
    }


async def create_embeddings(state, req: EmbeddingsRequest, raw: Request | None = None) -> dict:
    if not req.prompt:  # as Ollama answers an empty prompt
        state.served.pick(req.model, EMBED)
        return {"embedding": []}
    result = await embed(state, req.model, [req.prompt], truncate=True, param="prompt", raw=raw)
    return {"embedding": result.vectors[0].tolist()}
