"""Embedding and rerank routes of every dialect, in process, on one server
that holds all three kinds of model: the tiny chat model with --pooling mean,
the bundled all-MiniLM-L6-v2, and a tiny random-weight cross-encoder."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest
import torch
from inferd.models.loader import load_model
from inferd.server.app import build_app
from inferd.server.assemble import attach_model, new_state
from inferd.server.pooled_models import load_encoder_model

from polling import async_wait_for
from served import client, small_config
from tiny_encoders import minilm_folder, tiny_encoder, write_tiny_encoder

QUERY = "What is the capital of France?"
DOCUMENTS = ["Bananas are a yellow fruit.", "Paris is the capital of France.", "Berlin is the capital of Germany.",
             "The Eiffel Tower stands in Paris.", "France is a country in Europe."]
MINILM = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"), labels=1, seed=4)


@pytest.fixture(scope="module")
def app(tiny_model_dir, cross_encoder_dir):
    # float32: the scores are compared with transformers' and sentence-transformers' float32 figures.
    config = small_config(pooling="mean", embedding_model=[MINILM, str(cross_encoder_dir)], embedding_dtype="float32")
    state = new_state(config, "tiny")
    for model in config.embedding_model:
        load_encoder_model(state, model)
    attach_model(state, load_model(str(tiny_model_dir), dtype="float32", weights="bf16"))
    yield build_app(state)
    state.engine.shutdown()
    state.served.close()


def post(app, path, body):
    async def go():
        async with client(app) as c:
            return await c.post(path, json=body)

    return asyncio.run(go())


def tokens(*texts: str) -> int:
    """How many tokens MiniLM's tokenizer makes of `texts`, [CLS] and [SEP] included."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm_folder() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return sum(len(tokenizer.encode(t).ids) for t in texts)


def vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


def test_openai_embeddings_float_base64_dimensions_and_usage(app):
    texts = ["hello world", "a second, longer sentence about embeddings"]
    r = post(app, "/v1/embeddings", {"model": MINILM, "input": texts})
    body = r.json()
    floats = vectors(r)
    assert (body["object"], body["model"], [d["index"] for d in body["data"]]) == ("list", MINILM, [0, 1])
    assert body["usage"] == {"prompt_tokens": tokens(*texts), "total_tokens": tokens(*texts)}
    assert floats.shape == (2, 384) and np.allclose(np.linalg.norm(floats, axis=1), 1, atol=1e-5)
    b64 = post(app, "/v1/embeddings", {"model": MINILM, "input": texts, "encoding_format": "base64"}).json()
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in b64["data"]])
    assert np.array_equal(decoded, floats)
    cut = vectors(post(app, "/v1/embeddings", {"model": MINILM, "input": texts, "dimensions": 64}))
    expected = floats[:, :64] / np.linalg.norm(floats[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expected, atol=1e-6)
    # Token ids are used as given: the same ids as the text give the same vector.
    ids = post(app, "/tokenize", {"content": "x"})  # the chat model's tokenizer: not MiniLM's
    assert ids.status_code == 200
    same = vectors(post(app, "/v1/embeddings", {"model": MINILM, "input": [101, 7592, 2088, 102]}))
    np.testing.assert_allclose(same[0], floats[0], atol=1e-6)


def test_the_chat_model_embeds_with_pooling_and_every_model_is_listed(app):
    r = post(app, "/v1/embeddings", {"model": "tiny", "input": ["Hello", "Hello there"]})
    got = vectors(r)
    assert got.shape == (2, 64) and np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    assert not np.allclose(got[0], got[1])

    async def models():
        async with client(app) as c:
            return (await c.get("/v1/models")).json()

    listed = [m["id"] for m in asyncio.run(models())["data"]]
    assert listed[0] == "tiny" and MINILM in listed and "tiny-cross-encoder0" in listed


def test_dialects_agree_on_the_vectors(app):
    openai = vectors(post(app, "/v1/embeddings", {"model": MINILM, "input": ["one", "two"]}))
    ollama = post(app, "/api/embed", {"model": "all-minilm", "input": ["one", "two"], "keep_alive": "5m"}).json()
    assert ollama["model"] == "all-minilm" and ollama["prompt_eval_count"] == 6
    # The same inputs in a batch of the same shape; the kernels' threads may still round differently.
    np.testing.assert_allclose(np.array(ollama["embeddings"], dtype=np.float32), openai, atol=1e-6)
    older = post(app, "/api/embeddings", {"model": MINILM, "prompt": "one"}).json()
    np.testing.assert_allclose(np.array(older["embedding"], dtype=np.float32), openai[0], atol=1e-6)
    assert post(app, "/api/embeddings", {"model": MINILM, "prompt": ""}).json() == {"embedding": []}
    native = post(app, "/embedding", {"model": MINILM, "content": ["one", "two"]}).json()
    assert [n["index"] for n in native] == [0, 1] and len(native[0]["embedding"]) == 1
    np.testing.assert_allclose(np.array([n["embedding"][0] for n in native], dtype=np.float32), openai, atol=1e-6)


def test_long_inputs_are_refused_with_the_numbers_or_truncated_where_asked(app):
    long = "word " * 300
    r = post(app, "/v1/embeddings", {"model": MINILM, "input": ["short", long]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("input[1] is 302 tokens, more than the 256 model 'all-minilm-l6-v2' "
                                            "takes; shorten it, or set truncate to cut it")
    assert r.json()["error"]["code"] == "context_length_exceeded"
    truncated = post(app, "/v1/embeddings", {"model": MINILM, "input": long, "truncate": True}).json()
    assert truncated["usage"]["prompt_tokens"] == 256
    assert post(app, "/api/embed", {"model": MINILM, "input": long}).status_code == 200  # Ollama truncates by default
    refused = post(app, "/api/embed", {"model": MINILM, "input": long, "truncate": False})
    assert refused.status_code == 400 and refused.json()["error"].startswith("input[0] is 302 tokens")


@pytest.mark.parametrize("path,body,status,message", [
    ("/v1/embeddings", {"model": "nope", "input": "x"}, 404,
     "model 'nope' is not served here; this server serves 'all-minilm-l6-v2' (embed), "
     "'tiny-cross-encoder0' (rerank), 'tiny' (chat, embed)"),
    ("/v1/embeddings", {"model": "tiny-cross-encoder0", "input": "x"}, 400,
     "model 'tiny-cross-encoder0' cannot compute embeddings: ask for 'all-minilm-l6-v2' (embed), 'tiny' (chat, embed)"),
    ("/v1/embeddings", {"model": MINILM, "input": []}, 400, "input is empty; send at least one text"),
    ("/v1/embeddings", {"model": MINILM, "input": [[1, 40000]]}, 400,
     "input[0]: token id 40000 is outside the vocabulary of 'all-minilm-l6-v2' (0..30521)"),
    ("/v1/embeddings", {"model": MINILM, "input": "x", "dimensions": 385}, 400,
     "dimensions must be between 1 and 384 for model 'all-minilm-l6-v2', not 385"),
    ("/v1/chat/completions", {"model": MINILM, "messages": [{"role": "user", "content": "hi"}]}, 400,
     "model 'all-minilm-l6-v2' cannot generate text: ask for 'tiny' (chat, embed)"),
    ("/v1/rerank", {"model": MINILM, "query": "q", "documents": []}, 400,
     "documents is empty; send at least one document to rank"),
])
def test_refusals_say_what_to_change_in_the_openai_envelope(app, path, body, status, message):
    r = post(app, path, body)
    assert (r.status_code, r.json()["error"]["message"]) == (status, message)


def test_ollama_refusals_use_its_envelope(app):
    r = post(app, "/api/embed", {"model": "nope", "input": "x"})
    assert r.status_code == 404 and set(r.json()) == {"error"}


def test_cross_encoder_rerank_orders_exactly_as_transformers_scores(app, cross_encoder_dir):
    from tokenizers import Tokenizer

    ref = tiny_encoder(labels=1, seed=4)
    tokenizer = Tokenizer.from_file(str(minilm_folder() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    expected = []
    for document in DOCUMENTS:
        e = tokenizer.encode(QUERY, document)
        with torch.no_grad():
            logit = ref(input_ids=torch.tensor([e.ids]), token_type_ids=torch.tensor([e.type_ids])).logits[0, 0]
        expected.append(torch.sigmoid(logit).item())
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -expected[i])
    body = post(app, "/v1/rerank", {"model": "tiny-cross-encoder0", "query": QUERY, "documents": DOCUMENTS}).json()
    assert body["scoring"] == "cross-encoder" and body["object"] == "list"
    assert [r["index"] for r in body["results"]] == order
    np.testing.assert_allclose([r["relevance_score"] for r in body["results"]], [expected[i] for i in order],
                               atol=1e-5)
    top = post(app, "/rerank", {"model": "tiny-cross-encoder0", "query": QUERY,
                                "documents": [{"text": d} for d in DOCUMENTS], "top_n": 2, "return_documents": True})
    assert [(r["index"], r["document"]["text"]) for r in top.json()["results"]] == [(i, DOCUMENTS[i]) for i in order[:2]]


def test_rerank_by_an_embedding_model_uses_cosine_and_says_so(app):
    body = post(app, "/v1/reranking", {"model": MINILM, "query": QUERY, "documents": DOCUMENTS}).json()
    assert body["scoring"] == "cosine"
    assert [r["index"] for r in body["results"]] == [1, 4, 2, 3, 0]
    assert body["results"][0]["relevance_score"] == pytest.approx(0.856, abs=1e-3)
    assert body["usage"]["prompt_tokens"] == tokens(QUERY, *DOCUMENTS)


def test_pooling_none_answers_per_token_vectors_at_embedding_only(tmp_path):
    state = new_state(small_config(model=MINILM, pooling="none", embedding_dtype="float32"), MINILM)
    load_encoder_model(state, MINILM, main=True)
    state.served.loaded = True
    app = build_app(state)
    try:
        native = post(app, "/embedding", {"content": "hello world"})
        assert native.status_code == 200
        assert np.array(native.json()[0]["embedding"]).shape == (4, 384)  # [CLS] hello world [SEP]
        r = post(app, "/v1/embeddings", {"input": "hello world"})
        assert r.status_code == 400
        assert r.json()["error"]["message"].startswith(f"model '{MINILM}' is served with --pooling none")
        health = asyncio.run(_get(app, "/health"))
        assert health.json()["status"] == "ok"
    finally:
        state.served.close()


async def _get(app, path):
    async with client(app) as c:
        return await c.get(path)


# (path, body, model, kind) of each embedding and rerank route.
LEAVING = {
    "openai": ("/v1/embeddings", {"model": MINILM, "input": ["one", "two"]}, MINILM, "embed"),
    "ollama-embed": ("/api/embed", {"model": MINILM, "input": "one"}, MINILM, "embed"),
    "ollama-embeddings": ("/api/embeddings", {"model": MINILM, "prompt": "one"}, MINILM, "embed"),
    "llama-server-embedding": ("/embedding", {"model": MINILM, "content": "one"}, MINILM, "embed"),
    "rerank-cross-encoder": ("/v1/rerank", {"model": "tiny-cross-encoder0", "query": QUERY, "documents": DOCUMENTS},
                             "tiny-cross-encoder0", "rerank"),
    "rerank-cosine": ("/rerank", {"model": MINILM, "query": QUERY, "documents": DOCUMENTS}, MINILM, "embed"),
}


@pytest.mark.parametrize("route", list(LEAVING))
def test_a_client_that_leaves_takes_its_queued_inputs_with_it(app, route):
    """While a staying client's batch computes, a second request queues and
    its client disconnects: its handler ends at once (499, which goes nowhere),
    its inputs leave the queue and are never computed; the first is answered."""
    path, body, model, kind = LEAVING[route]
    pooled = app.state.inferd.served.pick(model, kind).pooled
    batcher, run = pooled.batcher, pooled.batcher.run
    computed: list[int] = []  # inputs of each batch the forward ran
    release = asyncio.Event()

    async def held(batch):
        computed.append(len(batch))
        await release.wait()
        return await run(batch)

    async def scenario():
        raw = json.dumps(body).encode()
        queued_when_left: list[int] = []
        sent: list[dict] = []
        given = False

        async def receive():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": raw, "more_body": False}
            queued_when_left.append(batcher.waiting)  # asked again only once it watches the connection
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        async with client(app) as c:
            staying = asyncio.create_task(c.post(path, json=body))
            assert await async_wait_for(lambda: computed, timeout=30)
            await asyncio.wait_for(app(_scope(path, raw), receive, send), timeout=10)
            left = batcher.waiting
            release.set()
            answer = await staying
        return answer, sent, queued_when_left, left

    batcher.run = held
    try:
        answer, sent, queued_when_left, left = asyncio.run(scenario())
    finally:
        batcher.run = run
    assert answer.status_code == 200
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [499]
    assert queued_when_left == [1] and left == 0
    assert len(computed) == 1  # the staying request's batch only


def _scope(path: str, body: bytes) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 50000), "server": ("inferd", 80),
            "headers": [(b"host", b"inferd"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}
