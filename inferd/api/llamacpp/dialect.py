"""llama-server's native dialect: its routes at the root, OpenAI's error envelope."""

from __future__ import annotations

from inferd.api.openai.dialect import completion_text
from inferd.http.dialect import Dialect, Endpoint

PATHS = ("/completion", "/completions", "/infill", "/tokenize", "/detokenize", "/apply-template", "/slots", "/props")
EMBEDDING_PATHS = ("/embedding", "/embeddings")  # llama-server's own shapes, not /v1/embeddings
RERANK_PATHS = ("/v1/rerank", "/v1/reranking", "/rerank", "/reranking")

DIALECT = Dialect(
    name="llamacpp",
    routes="inferd.api.llamacpp.routes",
    path_prefixes=PATHS + EMBEDDING_PATHS + RERANK_PATHS,
    endpoints=(
        *(Endpoint(p, routing_text=completion_text, token_prompt=True) for p in ("/completion", "/completions")),
        *(Endpoint(p) for p in ("/infill", "/tokenize", "/detokenize", "/apply-template")),
        *(Endpoint(p) for p in EMBEDDING_PATHS + RERANK_PATHS),
    ),
)
