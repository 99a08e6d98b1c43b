"""What every dialect's embedding route shares: pick the model, tokenize off
the event loop, hold each input to the model's limit (truncated when the
request asks, refused with the numbers otherwise), run the inputs through
the model's batcher, and cut vectors to `dimensions`. A client that leaves
while its inputs wait takes them out of the batcher's queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from starlette.requests import Request

from inferd.engine.embedding.model import PooledInput, PooledModel
from inferd.engine.errors import EngineDeadError, QueueFullError
from inferd.http.errors import BadRequest
from inferd.models.encoder_tokenizer import truncated
from inferd.serving.admission import admit_inputs
from inferd.serving.generation import engine_unavailable, unless_disconnected
from inferd.serving.served_models import EMBED
from inferd.serving.tokens import off_loop

# One input: a text, or the token ids of one (used as given: special tokens are the client's).
EmbedInput = str | Sequence[int]


@dataclass
class Embeddings:
    model: str
    vectors: list[np.ndarray]  # float32 [dimensions] each; [tokens, dimensions] for per-token vectors
    prompt_tokens: int


async def embed(state, requested: str | None, inputs: Sequence[EmbedInput], *, truncate: bool = False,
                dimensions: int | None = None, per_token: bool = False, param: str = "input",
                raw: Request | None = None) -> Embeddings:
    """`per_token`: the caller accepts a model that pools nothing (--pooling none);
    `raw`: the connection to watch (a client that leaves is `ClientDisconnected`)."""
    served = state.served.pick(requested, EMBED)
    pooled = served.pooled
    if pooled.pooling == "none" and not per_token:
        raise BadRequest(f"model {served.name!r} is served with --pooling none, which gives a vector per token; "
                         "POST /embedding returns those, or serve it with --pooling mean, cls or last",
                         param="model", code="model_not_supported")
    if dimensions is not None and not 1 <= dimensions <= pooled.dimensions:
        raise BadRequest(f"dimensions must be between 1 and {pooled.dimensions} for model {served.name!r}, "
                         f"not {dimensions}", param="dimensions")
    if not inputs:
        raise BadRequest(f"{param} is empty; send at least one text", param=param)
    ids = await off_loop(tokenize_inputs, pooled, inputs, truncate, param)
    outputs = await run_pooled(pooled, [PooledInput(i) for i in ids], raw)
    vectors = [cut(v, dimensions, pooled.normalized) for v in outputs]
    return Embeddings(served.name, vectors, sum(map(len, ids)))


def tokenize_inputs(pooled: PooledModel, inputs: Sequence[EmbedInput], truncate: bool, param: str) -> list[list[int]]:
    """Each input's token ids within the model's limit (on a worker thread)."""
    texts = [(i, text) for i, text in enumerate(inputs) if isinstance(text, str)]
    encoded = dict(zip((i for i, _ in texts), pooled.encode([text for _, text in texts]))) if texts else {}
    result = []
    for i, item in enumerate(inputs):
        ids = encoded[i] if i in encoded else list(item)
        if i not in encoded:
            bad = next((t for t in ids if not 0 <= t < pooled.vocab_size), None)
            if bad is not None:
                raise BadRequest(f"{param}[{i}]: token id {bad} is outside the vocabulary of {pooled.name!r} "
                                 f"(0..{pooled.vocab_size - 1})", param=param)
        if not ids:
            raise BadRequest(f"{param}[{i}] is empty: it has no tokens; send some text", param=param)
        result.append(within_limit(pooled, ids, truncate, f"{param}[{i}]"))
    return result


def within_limit(pooled: PooledModel, ids: list[int], truncate: bool, where: str) -> list[int]:
    if len(ids) <= pooled.max_tokens:
        return ids
    if truncate:
        return truncated(ids, pooled.max_tokens, pooled.trailing_specials)
    raise BadRequest(f"{where} is {len(ids)} tokens, more than the {pooled.max_tokens} model {pooled.name!r} "
                     "takes; shorten it, or set truncate to cut it", param=where.split("[")[0],
                     code="context_length_exceeded")


async def run_pooled(pooled: PooledModel, inputs: list[PooledInput], raw: Request | None = None) -> list:
    """The inputs' results; with `raw`, unless its client leaves first: then
    what of them is not computing yet leaves the queue, and `ClientDisconnected`."""
    await admit_inputs(pooled.name, sum(map(len, inputs)))
    try:
        work = pooled.batcher.submit(inputs)
        return await (work if raw is None else unless_disconnected(raw, work))
    except (QueueFullError, EngineDeadError) as error:
        raise engine_unavailable(error) from None


def cut(vector: np.ndarray, dimensions: int | None, normalized: bool) -> np.ndarray:
    """The first `dimensions` values, made unit length again when the model's vectors are."""
    if dimensions is None or dimensions >= vector.shape[-1]:
        return vector
    part = vector[..., :dimensions]
    if not normalized:
        return part
    norm = np.linalg.norm(part, axis=-1, keepdims=True)
    return part / np.maximum(norm, 1e-12)
