"""Which paths the model selection reads (server.model_select) and which
models it hands each: chat paths take chat models, embedding paths embedding
models, rerank paths either an encoder that reranks or one that embeds."""

from __future__ import annotations

import pytest

from inferd.server.model_select import _fits, _task, chat_paths, pooled_paths
from inferd.serving.model_host import HostedModel


def test_embedding_and_rerank_paths_are_read_beside_the_chat_paths():
    assert pooled_paths() == {"/v1/embeddings", "/api/embed", "/api/embeddings", "/embedding", "/embeddings",
                              "/v1/rerank", "/v1/reranking", "/rerank", "/reranking"}
    assert not pooled_paths() & chat_paths() and {"/v1/chat/completions", "/api/generate"} <= chat_paths()


@pytest.mark.parametrize(("kind", "path", "fits"), [
    ("chat", "/v1/chat/completions", True), ("embed", "/v1/chat/completions", False),
    ("chat", "/v1/embeddings", False), ("embed", "/api/embed", True), ("rerank", "/v1/embeddings", False),
    ("rerank", "/v1/rerank", True), ("embed", "/rerank", True), ("chat", "/v1/rerank", False),
])
def test_a_model_fits_a_path_by_what_it_does(kind, path, fits):
    assert _fits(HostedModel("m", "m", 1, kind=kind), _task(path)) is fits
