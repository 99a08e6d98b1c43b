"""OpenAI `POST /v1/embeddings`: texts or token ids in, vectors out as floats
or base64 (little-endian float32, what the official SDK asks for by default)."""

from __future__ import annotations

import base64
from typing import Literal

import numpy as np
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from inferd.http.wire import WireModel
from inferd.serving.embeddings import embed


class EmbeddingRequest(WireModel):
    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None
    # inferd's own: cut inputs longer than the model takes, instead of refusing them.
    truncate: bool = False

    def inputs(self) -> list[str | list[int]]:
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and all(isinstance(x, int) for x in value):
            return [list(value)]  # one input given as token ids
        return list(value)


def encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def create_embeddings(state, req: EmbeddingRequest, raw: Request | None = None) -> JSONResponse:
    result = await embed(state, req.model, req.inputs(), truncate=req.truncate, dimensions=req.dimensions, raw=raw)
    return JSONResponse({
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encoded(v, req.encoding_format)}
                 for i, v in enumerate(result.vectors)],
        "model": result.model,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    })
