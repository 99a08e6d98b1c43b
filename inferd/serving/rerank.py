"""What the rerank routes share: score each document against the query, with
a cross-encoder (one forward per (query, document) pair, batched) when one is
served, else by the cosine similarity of an embedding model's vectors. The
ranking says which way it scored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from starlette.requests import Request

from inferd.engine.embedding.model import PooledInput, PooledModel
from inferd.http.errors import BadRequest
from inferd.models.encoder_tokenizer import truncated_pair
from inferd.serving.embeddings import run_pooled, tokenize_inputs
from inferd.serving.served_models import EMBED, RERANK
from inferd.serving.tokens import off_loop


@dataclass
class Ranking:
    model: str
    scoring: Literal["cross-encoder", "cosine"]
    scores: list[float]  # one per document, in the order given
    prompt_tokens: int

    def ranked(self, top_n: int | None = None) -> list[tuple[int, float]]:
        """(document index, score), best first; ties keep the documents' order."""
        order = sorted(range(len(self.scores)), key=lambda i: -self.scores[i])
        return [(i, self.scores[i]) for i in order[:top_n]]


async def rerank(state, requested: str | None, query: str, documents: Sequence[str], *,
                 truncate: bool = True, raw: Request | None = None) -> Ranking:
    """`raw`: the connection to watch (a client that leaves is `ClientDisconnected`)."""
    served = state.served.pick(requested, RERANK, EMBED)
    if not documents:
        raise BadRequest("documents is empty; send at least one document to rank", param="documents")
    pooled = served.pooled
    if pooled.kind == "rerank":
        pairs = await off_loop(_pairs, pooled, query, documents, truncate)
        scores = await run_pooled(pooled, [PooledInput(ids, types) for ids, types in pairs], raw)
        return Ranking(served.name, "cross-encoder", [float(s) for s in scores], sum(len(ids) for ids, _ in pairs))
    if pooled.pooling == "none":
        raise BadRequest(f"model {served.name!r} is served with --pooling none and has no vector to compare; "
                         "serve it with --pooling mean, cls or last", param="model", code="model_not_supported")
    ids = await off_loop(tokenize_inputs, pooled, [query], truncate, "query")
    ids += await off_loop(tokenize_inputs, pooled, documents, truncate, "documents")
    vectors = np.stack(await run_pooled(pooled, [PooledInput(i) for i in ids], raw))
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return Ranking(served.name, "cosine", (vectors[1:] @ vectors[0]).tolist(), sum(map(len, ids)))


def _pairs(pooled: PooledModel, query: str, documents: Sequence[str], truncate: bool) -> list[tuple[list[int], list[int]]]:
    pairs = []
    for i, (ids, types, sequences) in enumerate(pooled.encode_pairs(query, documents)):
        if len(ids) > pooled.max_tokens:
            cut = truncated_pair(ids, types, sequences, pooled.max_tokens) if truncate else None
            if cut is None:
                why = "the query alone fills it; shorten the query" if truncate else "shorten it, or set truncate"
                raise BadRequest(f"documents[{i}] with the query is {len(ids)} tokens, more than the "
                                 f"{pooled.max_tokens} model {pooled.name!r} takes: {why}", param="documents",
                                 code="context_length_exceeded")
            ids, types = cut
        pairs.append((ids, types))
    return pairs
