"""Schema-driven fuzzing: requests generated from /openapi.json (valid and
invalid) never get a 5xx from the chat, completions or native routes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis")

from inferd.chat.template import chat_template_for  # noqa: E402
from inferd.config import ServeConfig  # noqa: E402
from inferd.engine.async_engine import AsyncEngine  # noqa: E402
from inferd.engine.engine import Engine  # noqa: E402
from inferd.models.loader import load_model  # noqa: E402
from inferd.server.app import build_app  # noqa: E402
from inferd.server.chat_features import attach_chat_features
from inferd.server.state import ServerState  # noqa: E402


@pytest.fixture(scope="module")
def api_schema(tiny_model_dir):
    config = ServeConfig(ctx_size=128, parallel=4, block_size=4, max_body_size=64 * 1024)
    state = ServerState(config=config, model_name="tiny")
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    state.template = chat_template_for(loaded.tokenizer)
    attach_chat_features(state, loaded)
    state.engine = AsyncEngine(Engine(loaded, config))
    yield schemathesis.openapi.from_asgi("/openapi.json", build_app(state))
    state.engine.shutdown()


def test_no_server_errors(api_schema):
    fuzzed = {"/v1/chat/completions", "/v1/completions", "/completion", "/tokenize", "/detokenize",
              "/apply-template", "/infill"}
    operations = [op for op in (r.ok() for r in api_schema.get_all_operations()) if op.path in fuzzed]
    assert {op.path for op in operations} == fuzzed
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case):
            response = case.call()
            assert response.status_code < 500, (
                f"{case.method} {case.path} -> {response.status_code}: {response.text[:500]}"
            )

        check()
