"""A server's models beside its own, in process (issue 17): `--model X --alias A`
pairs name each further model; /v1/models lists every model's other names
(aliases) and what it does (a stored cross-encoder reranks); Ollama's
keep_alive 0 unloads the server's own chat model too, which then loads on
demand like the others; a stored GGUF embedding model embeds on demand."""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager

import gguf
import numpy
import pytest

from inferd.cli import build_parser
from inferd.cli_llama import normalized
from inferd.cli_options import build
from inferd.config import ServeConfig
from inferd.model_store import ModelStore
from inferd.model_store.importing import import_model
from inferd.models.loader import load_model
from inferd.server.hosted_models import build_host, close_host
from gguf_models import hf_pieces, write_gguf
from served import client, served, small_config
from tiny_encoders import write_tiny_encoder
from tiny_models import write_tiny_model

PROMPT = [{"role": "user", "content": "Say something."}]


def parse(argv: list[str]) -> ServeConfig:
    return normalized(build(ServeConfig, build_parser().parse_args(["serve", *argv])))


def test_an_alias_after_a_further_model_names_that_model():
    config = parse(["-a", "own", "--model", "x", "--alias", "own2", "--model", "y", "--alias", "y1,y2",
                    "-m", "z", "-a", "z1", "--alias", "z2", "--alias", "z1"])
    assert (config.model, config.models, config.alias) == ("x", ["x", "y", "z"], ["own", "own2"])
    assert config.model_aliases == {"y": ["y1", "y2"], "z": ["z1", "z2"]}
    one = parse(["--model", "x", "--alias", "a,b"])  # llama-server's one model: its aliases, as before
    assert (one.alias, one.model_aliases) == (["a", "b"], {})


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data = tmp_path_factory.mktemp("hosted-names")
    store = ModelStore(data / "models")
    import_model(store, write_tiny_encoder(tmp_path_factory.mktemp("rerank"), labels=1, seed=4),
                 name="acme/Tiny-Rerank")
    return data


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory):
    return tmp_path_factory.mktemp("no-models-stored")


@pytest.fixture(scope="module")
def bee_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("bee"), arch="llama", seed=1)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@contextmanager
def hosting(loaded, config: ServeConfig):
    """A server as `inferd serve` puts it together: its own model, then the models it loads on demand."""
    with served(loaded, config) as server:
        server.state.host = build_host(server.state)
        try:
            yield server
        finally:
            asyncio.run(close_host(server.state))


def calls(app, *requests):
    """Each (method, path, body) in turn on one client, each in a task of its own as a server runs it
    (the model a request chose stays in its own context); their responses."""
    async def main():
        async with client(app) as c:
            return [await asyncio.create_task(c.request(method, path, json=body)) for method, path, body in requests]

    return asyncio.run(main())


def chat(model: str | None) -> tuple:
    body = {"messages": PROMPT, "max_tokens": 6, "temperature": 0}
    return "POST", "/v1/chat/completions", body if model is None else {**body, "model": model}


def test_alias_pairs_name_a_further_model_and_every_card_lists_its_aliases(loaded, tiny_model_dir, bee_dir,
                                                                          store_dir):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir), str(bee_dir)],
                          model_aliases={str(bee_dir): ["bee", "b2"]}, alias=["own", "t2"], dtype="float32",
                          data_dir=str(store_dir))
    with hosting(loaded, config) as server:
        by_alias, by_second, by_path, listing, card = calls(
            server.app, chat("bee"), chat("b2"), chat(bee_dir.name), ("GET", "/v1/models", None),
            ("GET", "/v1/models/b2", None))
        assert [r.status_code for r in (by_alias, by_second, by_path)] == [200, 200, 200], by_alias.text
        assert [r.json()["model"] for r in (by_alias, by_second)] == ["bee", "b2"]
        assert len({r.json()["choices"][0]["message"]["content"] for r in (by_alias, by_second, by_path)}) == 1
        cards = {c["id"]: c for c in listing.json()["data"]}
        assert cards["own"]["aliases"] == ["t2", "tiny"]
        assert cards["bee"]["aliases"] == ["b2", bee_dir.name] and cards["bee"]["loaded"] is True
        assert card.json()["id"] == "bee"
        # A stored cross-encoder reranks: not "embeddings"; its repository's short names are its aliases.
        rerank = cards["acme/Tiny-Rerank"]
        assert rerank["capabilities"] == ["rerank"] and rerank["loaded"] is False
        assert rerank["aliases"] == ["Tiny-Rerank", "tiny-rerank"]


def test_an_alias_that_names_another_model_ends_start_up(loaded, tiny_model_dir, bee_dir, store_dir):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir), str(bee_dir)],
                          model_aliases={str(bee_dir): ["acme/Tiny-Rerank"]}, data_dir=str(store_dir))
    with served(loaded, config) as server, pytest.raises(ValueError, match="--alias acme/Tiny-Rerank .* is already"):
        build_host(server.state)


def ps(app) -> list[str]:
    [r] = calls(app, ("GET", "/api/ps", None))
    return [m["name"] for m in r.json()["models"]]


def test_keep_alive_zero_unloads_the_servers_own_model_which_then_loads_on_demand(loaded, tiny_model_dir,
                                                                                  empty_store):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir)], dtype="float32",
                          data_dir=str(empty_store))
    with hosting(loaded, config) as server:
        [before] = calls(server.app, chat("tiny"))
        assert ps(server.app) == ["tiny"]
        [unloaded] = calls(server.app, ("POST", "/api/generate", {"model": "tiny", "keep_alive": 0}))
        assert unloaded.json()["done_reason"] == "unload"
        assert ps(server.app) == [] and server.state.engine is None
        [props] = calls(server.app, ("GET", "/props", None))  # outside any request's choice: it says why
        assert props.status_code == 503 and "is unloaded" in props.json()["error"]["message"]
        [card] = calls(server.app, ("GET", "/v1/models/tiny", None))
        assert (card.json()["loaded"], card.json()["capabilities"]) == (False, ["completion", "chat"])
        # Loaded again on demand: by its name, with no name, or by any name while it is the one model served.
        again, nameless, any_name = calls(server.app, chat("tiny"), chat(None), chat("gpt-4o"))
        answer = before.json()["choices"][0]["message"]["content"]
        assert [r.status_code for r in (again, nameless, any_name)] == [200] * 3, [r.text for r in (again, nameless, any_name)]
        assert [r.json()["choices"][0]["message"]["content"] for r in (again, nameless, any_name)] == [answer] * 3
        assert [r.json()["model"] for r in (again, nameless, any_name)] == ["tiny", "tiny", "tiny"]
        running = calls(server.app, ("GET", "/api/ps", None))[0].json()["models"]
        assert [(m["name"], m["expires_at"][:4]) for m in running] == [("tiny", "9999")]  # it stays, as at start
        # keep_alive 0 beside a prompt: unloaded once that request has its answer.
        [last] = calls(server.app, ("POST", "/api/generate", {"model": "tiny", "prompt": "Hi", "stream": False,
                                                               "keep_alive": 0, "options": {"num_predict": 2}}))
        assert last.status_code == 200 and last.json()["done"] is True
        assert ps(server.app) == [] and server.state.host.unloads == {"requested": 2}


async def held_stream(app, body: dict, gate: asyncio.Event):
    """A streamed chat completion sent straight to the app (an HTTP client here would read it whole), whose
    reader stops after the first chunk until `gate` opens: a request in flight for as long as a test likes.
    Returns (the task, an event set at the first chunk, what was sent)."""
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "headers": [(b"content-type", b"application/json"), (b"host", b"inferd")],
             "http_version": "1.1", "scheme": "http", "server": ("inferd", 80), "client": ("test", 1),
             "root_path": ""}
    messages = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    sent, first = [], asyncio.Event()

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # no disconnect: the reader stays

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            first.set()
            await gate.wait()

    return asyncio.create_task(app(scope, receive, send)), first, sent


def test_keep_alive_zero_waits_for_requests_running_on_the_own_model(loaded, tiny_model_dir, store_dir):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir)], dtype="float32",
                          data_dir=str(store_dir), ctx_size=256)

    async def main(app):
        gate = asyncio.Event()
        task, first, sent = await held_stream(app, {**chat("tiny")[2], "stream": True, "max_tokens": 20}, gate)
        await first.wait()
        async with client(app) as c:
            unload = await asyncio.create_task(c.post("/api/generate", json={"model": "tiny", "keep_alive": 0}))
            during = [m["name"] for m in (await c.get("/api/ps")).json()["models"]]
            gate.set()
            await task
            after = [m["name"] for m in (await c.get("/api/ps")).json()["models"]]
        text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
        return unload.json()["done_reason"], during, text, after

    with hosting(loaded, config) as server:
        reason, during, text, after = asyncio.run(main(server.app))
    assert reason == "unload" and during == ["tiny"]  # its stream still runs on it
    assert text.endswith("data: [DONE]\n\n") and '"finish_reason":"length"' in text
    assert after == []


def test_a_keep_alive_duration_unloads_the_own_model_once_idle_that_long(loaded, tiny_model_dir, empty_store):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir)], dtype="float32",
                          data_dir=str(empty_store))

    async def main(app):  # one event loop, as a server has: the host's sweep runs on it
        async with client(app) as c:
            async def names():
                return [m["name"] for m in (await asyncio.create_task(c.get("/api/ps"))).json()["models"]]

            await asyncio.create_task(c.post("/api/generate", json={"model": "tiny", "prompt": "Hi", "stream": False,
                                                                     "options": {"num_predict": 1}}))
            await asyncio.sleep(0.6)  # past two sweeps: without a keep_alive it stays
            kept = await names()
            loading = await asyncio.create_task(c.post("/api/generate", json={"model": "tiny", "keep_alive": "50ms"}))
            for _ in range(200):  # a sweep every 250 ms unloads it once idle 50 ms
                if not await names():
                    break
                await asyncio.sleep(0.05)
            return kept, loading.json()["done_reason"], await names()

    with hosting(loaded, config) as server:
        kept, reason, after = asyncio.run(main(server.app))
        assert (kept, reason, after) == (["tiny"], "load", [])
        assert server.state.host.unloads == {"expired": 1}


def test_a_name_served_nowhere_is_404_once_the_own_model_is_unloaded(loaded, tiny_model_dir, store_dir):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir)], data_dir=str(store_dir))
    with hosting(loaded, config) as server:
        unload, unknown = calls(server.app, ("POST", "/api/chat", {"model": "tiny", "keep_alive": 0}),
                                chat("gpt-4o"))  # two models here (a reranker is stored): a name must mean one
    assert unload.json()["done_reason"] == "unload" and unknown.status_code == 404
    assert "'tiny'" in unknown.json()["error"]["message"] and "'acme/Tiny-Rerank'" in unknown.json()["error"]["message"]


def test_the_own_model_pooled_for_embeddings_stays(tiny_model_dir, store_dir):
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir)], pooling="mean",
                          data_dir=str(store_dir))
    with hosting(load_model(str(tiny_model_dir), dtype="float32"), config) as server:
        [r] = calls(server.app, ("POST", "/api/generate", {"model": "tiny", "keep_alive": 0}))
        assert r.status_code == 400 and "--pooling" in r.json()["error"]
        assert ps(server.app) == ["tiny"]


@pytest.fixture(scope="module")
def gguf_embedders(tmp_path_factory):
    """Two tiny Qwen3 GGUF embedding models in a store: one pooled last (served), one pooled cls (not)."""
    cfg, _, _, state = hf_pieces("qwen3")
    folder = tmp_path_factory.mktemp("gguf-embedders")
    data = tmp_path_factory.mktemp("gguf-store")
    store = ModelStore(data / "models")
    for name, pooling in (("last", gguf.PoolingType.LAST), ("cls", gguf.PoolingType.CLS)):
        write_gguf(folder / f"{name}.gguf", "qwen3", cfg, state, pooling=pooling)
        import_model(store, folder / f"{name}.gguf", name=f"embed-{name}")
    return folder, data


def test_a_stored_gguf_embedding_model_embeds_on_demand_as_pooling_would(loaded, tiny_model_dir, gguf_embedders):
    folder, data = gguf_embedders
    ids = [[5, 10, 11, 12], [5, 20, 21]]  # token ids: the test file's vocabulary has no text
    config = small_config(model=str(tiny_model_dir), models=[str(tiny_model_dir)], dtype="float32",
                          data_dir=str(data))
    with hosting(loaded, config) as server:
        embedded, as_chat, unserved, listing, running = calls(
            server.app, ("POST", "/v1/embeddings", {"model": "embed-last", "input": ids}), chat("embed-last"),
            ("POST", "/v1/embeddings", {"model": "embed-cls", "input": ids}), ("GET", "/v1/models", None),
            ("GET", "/api/ps", None))
    assert embedded.status_code == 200, embedded.text
    vectors = numpy.array([d["embedding"] for d in embedded.json()["data"]])
    assert embedded.json()["model"] == "embed-last" and vectors.shape == (2, 64)
    assert numpy.allclose(numpy.linalg.norm(vectors, axis=1), 1.0) and not numpy.allclose(vectors[0], vectors[1])
    assert as_chat.status_code == 400 and "is an embedding model" in as_chat.json()["error"]["message"]
    # Pooled cls, a decoder cannot be served (no [CLS] token): listed as stored, answered with what is served.
    assert unserved.status_code == 404 and "'embed-last' (embed)" in unserved.json()["error"]["message"]
    cards = {c["id"]: c for c in listing.json()["data"]}
    assert (cards["embed-last"]["capabilities"], cards["embed-last"]["loaded"]) == (["embeddings"], True)
    [entry] = [m for m in running.json()["models"] if m["name"] == "embed-last"]
    assert entry["size"] > 0 and entry["details"]["format"] == "gguf"

    # The same file as a server's own model with --pooling last gives the same vectors.
    reference = small_config(model=str(folder / "last.gguf"), dtype="float32", pooling="last")
    with served(load_model(str(folder / "last.gguf"), dtype="float32"), reference, model_name="last") as own:
        [expected] = calls(own.app, ("POST", "/v1/embeddings", {"model": "last", "input": ids}))
    assert numpy.allclose(vectors, [d["embedding"] for d in expected.json()["data"]], atol=1e-6)

