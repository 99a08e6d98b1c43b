"""Embeddings and rerank against a real `inferd serve` process (the tiny chat
model with --pooling mean, all-MiniLM-L6-v2 beside it), through the official
`openai` and `ollama` SDKs and plain HTTP."""

from __future__ import annotations

import numpy as np
import pytest

openai = pytest.importorskip("openai")
ollama = pytest.importorskip("ollama")

MINILM = "all-minilm-l6-v2"
TEXTS = ["The cat sat on the mat.", "A feline rested on the rug.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module")
def sdk(embedding_server):
    with embedding_server.openai() as client:
        yield client


def test_openai_sdk_embeddings_base64_and_float(sdk):
    default = sdk.embeddings.create(model=MINILM, input=TEXTS)  # the SDK asks for base64 and decodes it
    floats = sdk.embeddings.create(model=MINILM, input=TEXTS, encoding_format="float")
    a = np.array([d.embedding for d in default.data], dtype=np.float32)
    b = np.array([d.embedding for d in floats.data], dtype=np.float32)
    assert a.shape == (3, 384) and default.model == MINILM
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert default.usage.prompt_tokens == floats.usage.total_tokens > 3 * 2
    similar, unrelated = a[0] @ a[1], a[0] @ a[2]
    assert similar > 0.5 > unrelated
    short = sdk.embeddings.create(model=MINILM, input="hello", dimensions=32)
    assert len(short.data[0].embedding) == 32
    assert np.linalg.norm(short.data[0].embedding) == pytest.approx(1.0, abs=1e-5)


def test_openai_sdk_chat_model_pooled_and_unknown_model(sdk, embedding_server):
    pooled = sdk.embeddings.create(model=embedding_server.model_name, input=["Hello"])
    assert len(pooled.data[0].embedding) == 64
    with pytest.raises(openai.NotFoundError, match="is not served here"):
        sdk.embeddings.create(model="nope", input="x")


def test_ollama_sdk_embed_matches_openai(sdk, embedding_server):
    client = ollama.Client(host=embedding_server.base_url)
    got = client.embed(model="all-minilm", input=TEXTS)
    reference = np.array([d.embedding for d in sdk.embeddings.create(model=MINILM, input=TEXTS).data])
    np.testing.assert_allclose(np.array(got.embeddings), reference, atol=1e-6)
    assert got.prompt_eval_count > 0
    older = client.embeddings(model="all-minilm", prompt=TEXTS[0])
    np.testing.assert_allclose(older.embedding, reference[0], atol=1e-6)
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model="all-minilm", input="word " * 300, truncate=False)
    assert refused.value.status_code == 400 and "302 tokens" in refused.value.error


def test_rerank_over_http_orders_exactly(embedding_server):
    documents = ["Bananas are a yellow fruit.", "Paris is the capital of France.", "Berlin is the capital of Germany.",
                 "The Eiffel Tower stands in Paris.", "France is a country in Europe."]
    with embedding_server.http() as http:
        r = http.post("/v1/rerank", json={"model": MINILM, "query": "What is the capital of France?",
                                          "documents": documents, "top_n": 2})
    assert r.status_code == 200, r.text
    assert r.json()["scoring"] == "cosine"
    assert [x["index"] for x in r.json()["results"]] == [1, 4]  # 0.86, 0.71, then two near 0.40
