"""The Responses API through the official OpenAI SDK, against a real
`inferd serve --data-dir` process on the tiny random-weight model, including
a restart: stored responses outlive the process that made them."""

from __future__ import annotations

import openai
import pytest

from server import ALIAS, TINY_CTX, ServerProcess

HELLO = "Hello"


def serving(tiny_model_dir, data_dir, log_path) -> ServerProcess:
    """A server keeping its responses in data_dir; not started yet."""
    server = ServerProcess(tiny_model_dir, port=0, parallel=2, ctx_size=TINY_CTX, alias=[ALIAS],
                           extra_args=["--data-dir", str(data_dir)], log_path=log_path)
    return server


@pytest.fixture(scope="module")
def data_dir(tiny_server):
    """Where the shared tiny-model server keeps its responses (tests/e2e/server.py)."""
    return tiny_server.log_path.parent / f"data-{tiny_server.log_path.stem}"


@pytest.fixture(scope="module")
def sdk(tiny_server):
    with tiny_server.openai() as c:
        yield c


def test_create_retrieve_and_delete(sdk, data_dir):
    created = sdk.responses.create(model=ALIAS, input=HELLO, max_output_tokens=6, temperature=0)
    assert created.id.startswith("resp_") and created.object == "response" and created.model == ALIAS
    assert created.status == "incomplete" and created.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in created.output] == ["message"]
    assert created.usage.output_tokens == 6
    chat = sdk.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": HELLO}],
                                       max_tokens=6, temperature=0)
    assert created.output_text == chat.choices[0].message.content
    assert created.usage.input_tokens == chat.usage.prompt_tokens

    assert sdk.responses.retrieve(created.id) == created
    assert (data_dir / "responses.sqlite3").exists()
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)


def test_a_stream_ends_with_the_whole_response(sdk):
    whole = sdk.responses.create(model=ALIAS, input=HELLO, max_output_tokens=6, temperature=0, store=False)
    stream = sdk.responses.create(model=ALIAS, input=HELLO, max_output_tokens=6, temperature=0, stream=True)
    events = list(stream)
    types = [e.type for e in events]
    deltas = types.count("response.output_text.delta")
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * deltas,
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.incomplete"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    final = events[-1].response
    assert final.output_text == whole.output_text
    assert sdk.responses.retrieve(final.id).output_text == whole.output_text


def test_an_unknown_previous_response_is_not_found(sdk):
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.create(model=ALIAS, input=HELLO, previous_response_id="resp_missing", max_output_tokens=2)
    assert caught.value.code == "previous_response_not_found"


def test_stored_responses_survive_a_restart_and_chain(tiny_model_dir, tmp_path, server_logs):
    first_server = serving(tiny_model_dir, tmp_path, server_logs / "responses-before.log").start()
    try:
        with first_server.openai() as sdk:
            first = sdk.responses.create(model=ALIAS, input=HELLO, max_output_tokens=4, temperature=0)
    finally:
        assert first_server.stop() == 0

    with serving(tiny_model_dir, tmp_path, server_logs / "responses-after.log") as second_server:
        with second_server.openai() as sdk:
            assert sdk.responses.retrieve(first.id) == first
            chained = sdk.responses.create(model=ALIAS, input="And?", previous_response_id=first.id,
                                           max_output_tokens=2, temperature=0)
            # The same conversation spelled out in full: the earlier turn, question and answer, then this one.
            spelled_out = sdk.responses.input_tokens.count(model=ALIAS, input=[
                {"role": "user", "content": HELLO},
                {"role": "assistant", "content": first.output_text},
                {"role": "user", "content": "And?"},
            ])
        with second_server.http() as http:
            counted = http.post("/v1/responses/input_tokens", json={
                "model": ALIAS, "input": "And?", "previous_response_id": first.id}).json()
    assert chained.previous_response_id == first.id
    assert chained.usage.input_tokens == counted["input_tokens"] == spelled_out.input_tokens
