"""The one-model rule in a server (issue 21): any model name answers while one model
is served, and a model loaded on demand (a further --model, a stored one) is a
second model, so a name served nowhere is then a 404 naming both; the bundled
model every store lists is not."""

from __future__ import annotations

import asyncio

import pytest

from inferd.models.default import DEFAULT_MODEL_NAME
from inferd.models.loader import load_model
from inferd.serving.model_host import HostedModel, ModelHost
from served import client, served, small_config


def ask(app, model: str):
    async def main():
        async with client(app) as c:
            return await c.post("/v1/chat/completions",
                                json={"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})

    return asyncio.run(main())


def never_loaded(source: str):
    pytest.fail(f"{source} must not load: the request named another model")


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.mark.parametrize("default, status", [(None, 404), ("tiny", 200)])
def test_a_stored_model_beside_the_server_model_ends_the_any_name_rule(loaded, default, status):
    with served(loaded, small_config(default_model=default)) as server:
        assert ask(server.app, "gpt-4o").status_code == 200  # one model: any name answers
        stored = HostedModel("stored-one", "stored-one", 1)
        server.state.host = ModelHost(server.state.config, [stored], 2**30, never_loaded)
        r = ask(server.app, "gpt-4o")
        assert r.status_code == status, r.text
        if status == 404:  # --default-model brings the fallback back
            message = r.json()["error"]["message"]
            assert "'gpt-4o' is not served here" in message and "'tiny'" in message and "'stored-one'" in message
        assert ask(server.app, "tiny").status_code == 200  # the server's own name still answers


def test_the_bundled_model_every_store_lists_is_not_a_second_model(loaded):
    """Every store lists the bundled Gemma from its first use; nobody chose to serve it beside
    this model, so the one-model rule still holds."""
    with served(loaded, small_config()) as server:
        bundled = HostedModel(DEFAULT_MODEL_NAME, f"{DEFAULT_MODEL_NAME}:latest", 1, (f"{DEFAULT_MODEL_NAME}:latest",))
        server.state.host = ModelHost(server.state.config, [bundled], 2**30, never_loaded)
        r = ask(server.app, "gpt-4o")
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "tiny"
