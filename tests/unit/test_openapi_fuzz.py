"""Schema-driven fuzzing: requests generated from /openapi.json (valid and
invalid) never get a 5xx from the chat, completions or native routes."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from inferd.models.loader import load_model
from served import served, small_config


@pytest.fixture(scope="module")
def api_schema(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    with served(loaded, small_config(parallel=4, max_body_size=64 * 1024)) as server:
        yield schemathesis.openapi.from_asgi("/openapi.json", server.app)


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
