"""Ollama's API through the official `ollama` Python SDK, against a real
`inferd serve` process on the tiny random-weight model."""

from __future__ import annotations

import json

import pytest

ollama = pytest.importorskip("ollama")

HELLO = [{"role": "user", "content": "Hello"}]
GREEDY = {"temperature": 0, "num_predict": 6}


@pytest.fixture(scope="module")
def sdk(tiny_server):
    return ollama.Client(host=tiny_server.base_url)


def test_chat(sdk, tiny_server):
    response = sdk.chat(model=tiny_server.model_name, messages=HELLO, options=GREEDY)
    assert response.done is True
    assert response.model == tiny_server.model_name
    assert response.message.role == "assistant"
    assert response.done_reason in ("stop", "length")
    assert 1 <= response.eval_count <= GREEDY["num_predict"]
    assert response.done_reason == ("length" if response.eval_count == GREEDY["num_predict"] else "stop")
    assert response.prompt_eval_count > 0
    assert response.total_duration >= response.eval_duration > 0


def test_chat_stream_matches_the_whole_answer(sdk, tiny_server):
    whole = sdk.chat(model=tiny_server.model_name, messages=HELLO, options=GREEDY)
    parts = list(sdk.chat(model=tiny_server.model_name, messages=HELLO, options=GREEDY, stream=True))
    *pieces, final = parts
    assert all(p.done is False for p in pieces) and final.done is True
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert (final.eval_count, final.prompt_eval_count, final.done_reason) == (
        whole.eval_count, whole.prompt_eval_count, whole.done_reason)


def test_chat_format_schema(sdk, tiny_server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    response = sdk.chat(model=tiny_server.model_name, messages=HELLO, format=schema,
                        options={"temperature": 0, "num_predict": 20})
    assert json.loads(response.message.content) in ({"ok": True}, {"ok": False})


def test_generate(sdk, tiny_server):
    response = sdk.generate(model=tiny_server.model_name, prompt="Once upon", raw=True, options=GREEDY)
    assert response.done is True
    assert response.eval_count <= GREEDY["num_predict"]
    assert len(response.context) == response.prompt_eval_count + response.eval_count
    streamed = list(sdk.generate(model=tiny_server.model_name, prompt="Once upon", raw=True, options=GREEDY,
                                 stream=True))
    assert "".join(p.response for p in streamed) == response.response


def test_list_show_ps_and_version(sdk, tiny_server):
    listed = sdk.list().models  # the served model, then the stored ones (the bundled model at least)
    model = listed[0]
    assert model.model == tiny_server.model_name and "gemma-3-270m:latest" in {m.model for m in listed}
    assert model.size > 0 and model.details.format == "safetensors"
    shown = sdk.show(tiny_server.model_name)
    assert "completion" in shown.capabilities
    assert shown.modelinfo["general.architecture"] == model.details.family
    [running] = sdk.ps().models
    assert running.model == tiny_server.model_name


def test_errors_raise_response_error(sdk, tiny_server):
    with pytest.raises(ollama.ResponseError) as unknown:
        sdk.chat(model="llama3", messages=HELLO)
    assert unknown.value.status_code == 404
    assert unknown.value.error.startswith(f'model "llama3" not found; this server serves "{tiny_server.model_name}", "')
    with pytest.raises(ollama.ResponseError) as images:
        sdk.chat(model=tiny_server.model_name, messages=[{"role": "user", "content": "?", "images": [b"\x89PNG"]}])
    assert images.value.status_code == 400
