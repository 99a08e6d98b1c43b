"""The model store through the official SDKs against a real `inferd serve`
with a store of its own: Ollama's pull (streamed progress), list, show,
copy and delete; OpenAI's model list and retrieval, stored beside served."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

Q4 = "acme/Tiny-GGUF:Q4_K_M"


@pytest.fixture(scope="module")
def sdk(store_server):
    return ollama.Client(host=store_server.base_url)


def test_pull_streams_progress_then_list_show_copy_delete(sdk, store_server, hub):
    data = hub.repos["acme/Tiny-GGUF"]["Tiny-Q4_K_M.gguf"]
    progress = list(sdk.pull(Q4, stream=True))
    assert progress[0].status == "pulling manifest" and progress[-1].status == "success"
    file_events = [p for p in progress if p.status == "pulling Tiny-Q4_K_M.gguf"]
    assert {p.digest for p in file_events} == {f"sha256:{hashlib.sha256(data).hexdigest()}"}
    assert {p.total for p in file_events} == {len(data)} and file_events[-1].completed == len(data)
    assert [p.completed for p in file_events] == sorted(p.completed for p in file_events)
    assert [p.status for p in progress[-3:]] == ["verifying sha256 digest", "writing manifest", "success"]

    listed = {m.model: m for m in sdk.list().models}
    assert store_server.model_name == "tiny-stored"  # served by its name in the store
    assert set(listed) == {"tiny-stored", "gemma-3-270m:latest", Q4}  # not again as tiny-stored:latest
    pulled = listed[Q4]
    assert pulled.size == len(data)
    assert (pulled.details.format, pulled.details.family, pulled.details.quantization_level) == ("gguf", "llama",
                                                                                                 "Q4_K_M")
    shown = sdk.show(Q4)
    assert shown.capabilities == ["completion", "tools"]
    assert shown.modelinfo["general.architecture"] == "llama" and shown.modelinfo["llama.context_length"] == 2048
    assert shown.license == "apache-2.0"

    sdk.copy(Q4, "tiny-q4")
    listed = {m.model: m for m in sdk.list().models}
    assert listed["tiny-q4:latest"].digest == listed[Q4].digest
    sdk.delete("tiny-q4")
    assert "tiny-q4:latest" not in {m.model for m in sdk.list().models}
    with pytest.raises(ollama.ResponseError) as gone:
        sdk.delete("tiny-q4")
    assert gone.value.status_code == 404 and "'tiny-q4' is not in the store" in gone.value.error


def test_openai_lists_served_and_stored_models(store_server, sdk):
    sdk.pull("acme/tiny", stream=False)
    with store_server.openai() as client:
        cards = {m.id: m for m in client.models.list().data}
        served = cards[store_server.model_name]
        assert served.loaded is True and served.capabilities[:2] == ["completion", "chat"]
        assert cards["acme/tiny"].loaded is False and cards["acme/tiny"].owned_by == "acme"
        assert cards["acme/tiny"].capabilities == ["completion", "chat"] and cards["acme/tiny"].max_model_len == 512
        assert cards["gemma-3-270m"].loaded is False
        one = client.models.retrieve("acme/tiny")
        assert one.id == "acme/tiny" and one.loaded is False
        assert client.models.retrieve(store_server.model_name).loaded is True
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve("acme/none")
    assert missing.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("name, status, message", [
    ("acme/Tiny-GGUF:Q5_K_M", 400, "acme/Tiny-GGUF has no GGUF file of quantization Q5_K_M; quantizations there: "
                                   "Q4_K_M, Q8_0"),
    ("acme/none", 404, "acme/none is not a model repository on http://127.0.0.1:"),
    ("bad name!", 400, "is not a model name"),
    ("llama3", 400, "inferd pulls from Hugging Face by repository"),
])
def test_pull_errors_answer_with_their_status(sdk, name, status, message):
    for stream in (True, False):
        with pytest.raises(ollama.ResponseError) as error:
            result = sdk.pull(name, stream=stream)
            list(result) if stream else None
        assert error.value.status_code == status and message in error.value.error


def test_the_bundled_model_cannot_be_deleted(sdk):
    with pytest.raises(ollama.ResponseError) as error:
        sdk.delete("gemma-3-270m")
    assert error.value.status_code == 400 and "is the bundled model" in error.value.error


def test_a_pull_runs_off_the_event_loop_and_a_client_that_leaves_cancels_it(store_server, hub, tmp_path):
    from hub_server import small_gguf

    data = small_gguf(tmp_path / "slow.gguf", rows=512)  # 2 MB, sent 16 KiB at a time
    hub.add_repo("acme/Slow-GGUF", {"Slow-Q4_K_M.gguf": data})
    hub.pace = 0.01
    try:
        with store_server.http() as http:
            with http.stream("POST", "/api/pull", json={"model": "acme/Slow-GGUF:Q4_K_M"}) as r:
                lines = r.iter_lines()
                assert json.loads(next(lines)) == {"status": "pulling manifest"}
                assert json.loads(next(lines))["status"] == "pulling Slow-Q4_K_M.gguf"
                for _ in range(3):  # the download goes on meanwhile; the server answers at once
                    started = time.monotonic()
                    assert http.get("/health").status_code == 200
                    assert time.monotonic() - started < 1.0
                assert hub.sent.get("Slow-Q4_K_M.gguf", 0) < len(data)
            # The client left mid-download: the pull stops and writes no manifest.
            deadline = time.monotonic() + 30
            while hub.sent.get("Slow-Q4_K_M.gguf", 0) < len(data) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            names = [m["name"] for m in http.get("/api/tags").json()["models"]]
            assert "acme/Slow-GGUF:Q4_K_M" not in names
    finally:
        hub.pace = 0.0


def test_an_embedding_model_pulled_while_serving_embeds_by_its_short_name(sdk, store_server):
    sdk.pull("acme/Tiny-Embed", stream=False)  # no restart: the server reads its store again
    with store_server.openai() as client:
        vectors = client.embeddings.create(model="tiny-embed", input=["one", "two"])
        assert vectors.model == "acme/Tiny-Embed" and [len(d.embedding) for d in vectors.data] == [32, 32]
        assert client.models.retrieve("acme/Tiny-Embed").loaded is True
    assert "acme/Tiny-Embed" in [m.model for m in sdk.ps().models]
    sdk.delete("acme/Tiny-Embed")
    with store_server.openai() as client, pytest.raises(openai.NotFoundError):  # gone, and unloaded as it was idle
        client.embeddings.create(model="acme/Tiny-Embed", input="one")
    assert "acme/Tiny-Embed" not in [m.model for m in sdk.ps().models]
