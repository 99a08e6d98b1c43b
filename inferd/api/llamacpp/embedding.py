"""llama-server's native `POST /embedding` and `/embeddings` (not aliases of
/v1/embeddings): `content` (or `input`) as a text, token ids or a list of
either; the answer a list of {index, embedding}, where `embedding` is a list
of vectors: one pooled vector, or one per token under --pooling none."""

from __future__ import annotations

from pydantic import model_validator
from starlette.requests import Request

from inferd.http.wire import WireModel
from inferd.serving.embeddings import embed

EmbeddingInput = str | list[int] | list[str | list[int]]


class EmbeddingRequest(WireModel):
    model: str | None = None
    content: EmbeddingInput | None = None
    input: EmbeddingInput | None = None
    truncate: bool = False

    @model_validator(mode="after")
    def _one_input(self):
        if (self.content is None) == (self.input is None):
            raise ValueError("send the text to embed as content (or input), one of the two")
        return self

    def inputs(self) -> list[str | list[int]]:
        value = self.content if self.content is not None else self.input
        if isinstance(value, str):
            return [value]
        if value and all(isinstance(x, int) for x in value):
            return [list(value)]
        return list(value)


async def create_embedding(state, req: EmbeddingRequest, raw: Request | None = None) -> list[dict]:
    result = await embed(state, req.model, req.inputs(), truncate=req.truncate, per_token=True,
                         param="content" if req.content is not None else "input", raw=raw)
    return [{"index": i, "embedding": v.tolist() if v.ndim == 2 else [v.tolist()]}
            for i, v in enumerate(result.vectors)]
