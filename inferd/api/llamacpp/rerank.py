"""Reranking, as llama-server, Jina and Cohere shape it: `query`, `documents`
(texts, or {"text": ...}), `top_n`, `return_documents`; results sorted by
`relevance_score`, each with its document's `index`. `scoring` says how the
scores were made: a cross-encoder, or the cosine similarity of embeddings."""

from __future__ import annotations

from pydantic import BaseModel, Field
from starlette.requests import Request

from inferd.http.wire import WireModel
from inferd.serving.rerank import rerank


class Document(BaseModel):
    text: str


class RerankRequest(WireModel):
    model: str | None = None
    query: str
    documents: list[str | Document]
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False
    # Cut a document that with the query is longer than the model takes, instead of refusing it.
    truncate: bool = True

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


async def create_rerank(state, req: RerankRequest, raw: Request | None = None) -> dict:
    texts = req.texts()
    ranking = await rerank(state, req.model, req.query, texts, truncate=req.truncate, raw=raw)
    results = []
    for index, score in ranking.ranked(req.top_n):
        result = {"index": index, "relevance_score": score}
        if req.return_documents:
            result["document"] = {"text": texts[index]}
        results.append(result)
    return {
        "model": ranking.model,
        "object": "list",
        "scoring": ranking.scoring,
        "usage": {"prompt_tokens": ranking.prompt_tokens, "total_tokens": ranking.prompt_tokens},
        "results": results,
    }
