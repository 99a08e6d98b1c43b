"""One `inferd serve` for several models against a real process: the tiny model
as its own (--model), a tiny Llama named with a further --model and another
(other weights) and a tiny BERT embedding model only in its store, loaded on
demand with --max-loaded-models 1, so the on-demand models evict each other.
Driven by the OpenAI and Ollama SDKs (batches too) and by `inferd ps` / `inferd stop`."""

from __future__ import annotations

import io
import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy
import pytest
from polling import wait_for
from router_process import RouterProcess
from server import TINY_CTX, ServerProcess
from tiny_encoders import write_tiny_encoder
from tiny_models import write_tiny_model

from inferd.cli import main

openai = pytest.importorskip("openai")
ollama = pytest.importorskip("ollama")

PROMPT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def many(tiny_model_dir, server_logs, tmp_path_factory):
    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model

    data = tmp_path_factory.mktemp("many-models")
    store = ModelStore(data / "models")
    for name, seed in (("tiny-b", 1), ("tiny-c", 2)):
        import_model(store, write_tiny_model(tmp_path_factory.mktemp(name), arch="llama", seed=seed), name=name)
    import_model(store, write_tiny_encoder(tmp_path_factory.mktemp("tiny-embed")), name="acme/Tiny-Embed")
    server = ServerProcess(tiny_model_dir, port=0, parallel=2, ctx_size=TINY_CTX, metrics=True,
                           log_path=server_logs / "many-models.log",
                           extra_args=["--data-dir", str(data), "--model", "tiny-b", "--max-loaded-models", "1"])
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(many):
    with many.openai() as c:
        yield c


def answer(client, model: str) -> tuple[str, str]:
    r = client.chat.completions.create(model=model, messages=PROMPT, max_tokens=8, temperature=0)
    return r.model, r.choices[0].message.content


def unloads(many, reason: str) -> float:
    text = httpx.get(f"{many.base_url}/metrics").text
    return float(re.search(rf'inferd_model_unloads_total{{reason="{reason}"}} (\S+)', text)[1])


def ps_names(sdk) -> list[str]:
    return [m.model for m in sdk.ps().models]


def test_interleaved_requests_each_get_their_own_models_output(many, client):
    names = [many.model_name, "tiny-b", "tiny-c"]
    alone = {name: answer(client, name) for name in names}
    assert [model for model, _ in alone.values()] == names
    assert len({text for _, text in alone.values()}) == 3  # three different weights, three answers
    evicted = unloads(many, "evicted")
    order = names * 4  # the two on-demand models take turns in one slot: each waits for the other's requests
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda name: answer(client, name), order))
    assert together == [alone[name] for name in order]
    assert unloads(many, "evicted") > evicted


def test_an_unknown_model_is_404_naming_every_model_in_each_dialect(many, client):
    with pytest.raises(openai.NotFoundError) as error:
        client.chat.completions.create(model="nope", messages=PROMPT, max_tokens=2)
    message = error.value.body["message"]
    assert "'nope'" in message and all(f"'{n}'" in message for n in (many.model_name, "tiny-b", "tiny-c"))
    r = httpx.post(f"{many.base_url}/api/chat", json={"model": "nope", "messages": PROMPT})
    assert r.status_code == 404 and '"tiny-c"' in r.json()["error"]


def test_ollama_ps_keep_alive_zero_and_inferd_ps_stop(many, capsys):
    sdk = ollama.Client(host=many.base_url)
    sdk.generate(model="tiny-c", prompt="hi", options={"num_predict": 2})
    running = {m.model: m for m in sdk.ps().models}
    assert list(running) == [many.model_name, "tiny-c"]  # its own model first
    assert running["tiny-c"].context_length == TINY_CTX and running["tiny-c"].size > 0
    assert running["tiny-c"].expires_at.year < 9999 and running[many.model_name].expires_at.year == 9999

    sdk.generate(model="tiny-c", prompt="hi", options={"num_predict": 2}, keep_alive=0)
    assert ps_names(sdk) == [many.model_name]

    assert sdk.generate(model="tiny-b").done_reason == "load"  # no prompt: Ollama's way to load
    assert ps_names(sdk) == [many.model_name, "tiny-b"]
    assert main(["ps", "--url", many.base_url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "CONTEXT", "UNTIL"] and table[2].startswith("tiny-b ")
    assert table[1].endswith("Forever") and table[2].endswith("minutes from now")
    assert main(["stop", "tiny-b", "--url", many.base_url]) == 0
    assert ps_names(sdk) == [many.model_name]
    assert unloads(many, "requested") == 2


def test_keep_alive_zero_unloads_the_servers_own_model_too(many, client):
    """Ollama's semantics: `ps` is empty afterwards; the next request loads it again, with the same output."""
    sdk = ollama.Client(host=many.base_url)
    before = answer(client, many.model_name)
    for name in ps_names(sdk):
        sdk.generate(model=name, keep_alive=0)
    assert ps_names(sdk) == []
    assert answer(client, many.model_name) == before
    assert ps_names(sdk) == [many.model_name]
    expires = sdk.ps().models[0].expires_at
    assert expires.year == 9999  # loaded again, it stays, as it did from the start
    sdk.generate(model=many.model_name, prompt="hi", options={"num_predict": 2}, keep_alive=0)  # after this one
    assert ps_names(sdk) == []
    assert main(["stop", many.model_name, "--url", many.base_url]) == 0  # nothing loaded: nothing to do
    assert answer(client, many.model_name) == before


def test_a_stored_embedding_model_loads_on_demand_by_its_short_name_and_is_evicted_like_any(many, client):
    sdk = ollama.Client(host=many.base_url)
    texts = ["a cat", "a dog sat on the mat"]
    by_repo = client.embeddings.create(model="acme/Tiny-Embed", input=texts)
    assert by_repo.model == "acme/Tiny-Embed" and len(by_repo.data) == 2
    vectors = [d.embedding for d in by_repo.data]
    assert [len(v) for v in vectors] == [32, 32] and vectors[0] != vectors[1]
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-3 for v in vectors)  # mean pooled, then normalized
    short = client.embeddings.create(model="tiny-embed", input=texts)  # the repository's name, lowercased
    assert numpy.allclose([d.embedding for d in short.data], vectors, atol=1e-6)
    assert numpy.allclose(sdk.embed(model="tiny-embed", input=texts).embeddings, vectors, atol=1e-6)

    running = {m.model: m for m in sdk.ps().models}
    assert "acme/Tiny-Embed" in running and running["acme/Tiny-Embed"].context_length == 64
    assert running["acme/Tiny-Embed"].size > 0 and running["acme/Tiny-Embed"].expires_at.year < 9999
    card = client.models.retrieve("acme/Tiny-Embed")
    assert card.loaded is True and card.capabilities == ["embeddings"]

    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="tiny-embed", messages=PROMPT, max_tokens=2)
    assert "is an embedding model" in error.value.body["message"] and "'tiny-b'" in error.value.body["message"]
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model="tiny-b", input="x")
    assert "is a chat model" in error.value.body["message"] and "'acme/Tiny-Embed'" in error.value.body["message"]
    with pytest.raises(openai.NotFoundError) as error:
        client.embeddings.create(model="nope", input="x")
    assert "'acme/Tiny-Embed' (embed)" in error.value.body["message"]

    evicted = unloads(many, "evicted")
    answer(client, "tiny-b")  # --max-loaded-models 1: the embedding model makes room
    assert "acme/Tiny-Embed" not in ps_names(sdk) and unloads(many, "evicted") == evicted + 1


def test_batch_items_run_on_the_model_each_names(many, client):
    alone = {name: answer(client, name)[1] for name in ("tiny-b", many.model_name, "tiny-c")}
    requests = [{"custom_id": name, "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": name, "messages": PROMPT, "max_tokens": 8, "temperature": 0}}
                for name in reversed(alone)]  # the model loaded last goes first: one load fewer
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO("\n".join(map(json.dumps, requests)).encode())),
                                   purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    ended = wait_for(lambda: (b := client.batches.retrieve(batch.id)).status in ("completed", "failed") and b, 60.0)
    assert ended.status == "completed" and ended.request_counts.completed == len(requests), ended
    results = {r["custom_id"]: r["response"]["body"] for r in map(json.loads, client.files.content(
        ended.output_file_id).text.splitlines())}
    for request in requests:
        name = request["body"]["model"]
        body = results[request["custom_id"]]
        assert (body["model"], body["choices"][0]["message"]["content"]) == (name, alone[name])


def test_ps_lists_the_embedding_models_loaded_at_start(embedding_server):
    running = ollama.Client(host=embedding_server.base_url).ps().models
    assert [m.model for m in running] == [embedding_server.model_name, "all-minilm-l6-v2"]
    minilm = running[1]
    assert (minilm.context_length, minilm.expires_at.year, minilm.details.family) == (256, 9999, "bert")
    assert minilm.size > 80_000_000  # its safetensors file, about 90 MB


def test_the_router_routes_by_a_stored_models_short_names(many, tiny_server, server_logs):
    """The short names are aliases on the model's card in /v1/models, which the router learns: round-robin
    alone would send every other request to the tiny server, which has no such model (a 404 there)."""
    cards = {c.id: c for c in many.openai().models.list().data}
    assert cards["acme/Tiny-Embed"].aliases == ["Tiny-Embed", "tiny-embed"]
    with RouterProcess(workers=[tiny_server.base_url, many.base_url], policy="round-robin",
                       log_path=server_logs / "router-short-names.log") as router:
        worker = {w["url"].rstrip("/"): w["id"] for w in router.fleet()}[many.base_url]
        with router.openai() as client:
            for name in ("tiny-embed", "Tiny-Embed", "tiny-embed:latest", "tiny-embed"):
                raw = client.embeddings.with_raw_response.create(model=name, input="a cat")
                assert (raw.headers["x-inferd-worker"], len(raw.parse().data[0].embedding)) == (worker, 32)

