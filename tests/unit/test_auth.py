"""API keys: with keys set, every route but health answers 401 unless the
request carries one, as a Bearer token or in x-api-key."""

from __future__ import annotations

import argparse
import asyncio

import httpx
import pytest

from inferd.cli_options import add_options, build
from inferd.commands.serve import read_api_keys
from inferd.config import ServeConfig
from inferd.http.auth import presented_keys
from inferd.models.loader import load_model
from inferd.tenants.build import open_tenants
from inferd.tenants.keyring import KeyRing
from served import Served, served

KEYS = frozenset({"sk-first", "sk-second"})
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
HOW_TO_SEND = "send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"


def unauthorized(message: str) -> dict:
    return {"error": {"message": message, "type": "authentication_error", "param": None, "code": "invalid_api_key"}}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture
def server(loaded):
    with served(loaded, api_keys=KEYS) as server:
        yield server


def send(server: Served, method: str, path: str, **kwargs) -> httpx.Response:
    async def go():
        async with server.client() as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


@pytest.mark.parametrize("method,path,body", [("POST", "/v1/chat/completions", CHAT), ("GET", "/v1/models", None)])
def test_no_key_is_refused_with_how_to_send_one(server, method, path, body):
    r = send(server, method, path, json=body)
    assert r.status_code == 401
    assert r.json() == unauthorized(f"this server needs an API key; {HOW_TO_SEND}")
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer sk-wrong"},
    {"x-api-key": "sk-wrong"},
    {"Authorization": "Bearer sk-firs"},  # a prefix of a key
    {"Authorization": "Bearer sk-first-and-more"},
    {"Authorization": "Bearer SK-FIRST"},
])
@pytest.mark.parametrize("method,path,body", [("POST", "/v1/chat/completions", CHAT), ("GET", "/v1/models", None)])
def test_a_wrong_key_is_refused(server, method, path, body, headers):
    r = send(server, method, path, json=body, headers=headers)
    assert r.status_code == 401
    assert r.json() == unauthorized(f"invalid API key; {HOW_TO_SEND}")
    assert r.headers["www-authenticate"] == "Bearer"


def test_a_key_under_another_scheme_counts_as_none(server):
    r = send(server, "GET", "/v1/models", headers={"Authorization": "Basic sk-first"})
    assert r.status_code == 401
    assert r.json() == unauthorized(f"this server needs an API key; {HOW_TO_SEND}")


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer sk-first"},
    {"Authorization": "Bearer sk-second"},
    {"Authorization": "bearer sk-first"},  # the scheme is case-insensitive
    {"x-api-key": "sk-second"},
    {"Authorization": "Bearer sk-wrong", "x-api-key": "sk-first"},
])
def test_a_valid_key_in_either_header_is_let_through(server, headers):
    models = send(server, "GET", "/v1/models", headers=headers)
    assert models.status_code == 200
    assert "tiny" in [m["id"] for m in models.json()["data"]]  # beside any stored models
    chat = send(server, "POST", "/v1/chat/completions", json=CHAT, headers=headers)
    assert chat.status_code == 200
    assert chat.json()["object"] == "chat.completion"


@pytest.mark.parametrize("path", ["/health", "/v1/health", "/"])
def test_health_needs_no_key(server, path):
    r = send(server, "GET", path)
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


def test_unknown_routes_are_refused_before_they_404(server):
    assert send(server, "GET", "/no/such/route").status_code == 401


def test_refused_before_the_body_is_judged(server):
    # An unauthenticated client learns nothing of body limits or content types.
    r = send(server, "POST", "/v1/chat/completions", content=b"x" * 64, headers={"Content-Type": "text/plain"})
    assert r.status_code == 401


def test_without_keys_everything_is_open(server):
    server.state.tenants = open_tenants(None)
    assert send(server, "GET", "/v1/models").status_code == 200
    assert send(server, "POST", "/v1/chat/completions", json=CHAT).status_code == 200


def test_presented_keys_reads_both_headers():
    headers = [(b"authorization", b"Bearer  sk-a "), (b"x-api-key", b"sk-b"), (b"x-other", b"sk-c")]
    assert presented_keys(headers) == [b"sk-a", b"sk-b"]
    assert presented_keys([(b"authorization", b"Bearer")]) == []
    assert presented_keys([(b"x-api-key", b"  ")]) == []


def test_keys_compare_as_utf8_bytes():
    ring = KeyRing(bootstrap=["clé-1"])
    assert ring.find("clé-1".encode()).admin
    assert ring.find("clé-2".encode()) is None
    assert ring.find(b"") is None


def parse_serve_options(argv: list[str]) -> ServeConfig:
    parser = argparse.ArgumentParser()
    add_options(parser, ServeConfig)
    return build(ServeConfig, parser.parse_args(argv))


def test_inferd_api_key_env_gives_comma_separated_keys(monkeypatch):
    monkeypatch.setenv("INFERD_API_KEY", "sk-a,sk-b")
    config = parse_serve_options([])
    assert config.api_key == ["sk-a", "sk-b"]
    assert read_api_keys(config) == frozenset({"sk-a", "sk-b"})


def test_api_key_flags_replace_the_env_keys(monkeypatch):
    monkeypatch.setenv("INFERD_API_KEY", "sk-a,sk-b")
    config = parse_serve_options(["--api-key", "sk-c", "--api-key", "sk-d"])
    assert read_api_keys(config) == frozenset({"sk-c", "sk-d"})


def test_no_env_no_flag_means_no_keys(monkeypatch):
    monkeypatch.delenv("INFERD_API_KEY", raising=False)
    assert read_api_keys(parse_serve_options([])) == frozenset()
