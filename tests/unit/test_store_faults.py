"""Storage faults (issue 15, item 7): a stored response that cannot be read is
the server's fault (a 500 naming the response, logged with the file's path),
never the client's "request body is not valid JSON"; a store that cannot be
opened (a corrupted SQLite file, a --data-dir that is a file) is a one-line
error naming the path and what to do."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest
from served import served, small_config

from inferd.models.loader import load_model
from inferd.store.responses import FILE_NAME, ResponseStore, StoreError

RESPONSE = {"id": "resp_bad", "object": "response", "created_at": 1, "status": "completed", "model": "tiny",
            "output": [], "usage": None}


def corrupt_row(path, id: str, column: str = "response", value: str = "{not json") -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(f"UPDATE responses SET {column} = ? WHERE id = ?", (value, id))
    db.close()


def store_with_bad_row(tmp_path, column: str = "response", value: str = "{not json") -> ResponseStore:
    store = ResponseStore.in_dir(tmp_path, ttl=3600, max_rows=10)
    store.put("resp_bad", {"input": "hi"}, RESPONSE, [{"role": "user", "content": "hi"}])
    corrupt_row(tmp_path / FILE_NAME, "resp_bad", column, value)
    return store


@pytest.mark.parametrize("column, value", [("response", "{not json"), ("messages", "[1, 2"),
                                           ("messages", '"a string"'), ("response", "[]")])
def test_an_unreadable_row_is_a_store_error_naming_the_id_and_the_path(tmp_path, column, value):
    store = store_with_bad_row(tmp_path, column, value)
    with pytest.raises(StoreError) as caught:
        store.get("resp_bad")
    assert not isinstance(caught.value, ValueError)  # a ValueError would answer as the client's fault (400)
    assert "resp_bad" in str(caught.value) and str(tmp_path / FILE_NAME) in str(caught.value)


def request(server, method, path, body=None):
    async def go():
        async with server.client() as c:
            return await c.request(method, path, json=body)

    return asyncio.run(go())


def test_retrieving_a_corrupted_stored_response_is_a_500_naming_it(tmp_path, caplog):
    with served(None) as server:
        server.state.responses_store = store_with_bad_row(tmp_path)
        with caplog.at_level(logging.ERROR):
            r = request(server, "GET", "/v1/responses/resp_bad")
    assert r.status_code == 500, r.text
    error = r.json()["error"]
    assert error["type"] == "server_error"
    assert "resp_bad" in error["message"] and "unreadable" in error["message"]
    assert "JSON" not in error["message"] and str(tmp_path) not in error["message"]  # no internals to the client
    assert str(tmp_path / FILE_NAME) in caplog.text  # the operator learns where


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.mark.parametrize("value", ["{not json", '{"id": "resp_bad"}'])  # not JSON; JSON with no output
def test_chaining_onto_a_corrupted_stored_response_is_a_500_not_a_400(tiny, tmp_path, value):
    with served(tiny, small_config(ctx_size=512)) as server:
        server.state.responses_store = store_with_bad_row(tmp_path, "response", value)
        r = request(server, "POST", "/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 2,
                                                      "previous_response_id": "resp_bad"})
    assert r.status_code == 500, r.text
    assert "resp_bad" in r.json()["error"]["message"] and "unreadable" in r.json()["error"]["message"]


def test_a_corrupted_database_file_is_a_store_error_naming_the_path(tmp_path):
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as caught:
        ResponseStore.in_dir(tmp_path, ttl=3600, max_rows=10)
    message = str(caught.value)
    assert str(tmp_path / FILE_NAME) in message and "--data-dir" in message and "\n" not in message


def test_a_data_dir_that_is_a_file_is_a_store_error_naming_the_path(tmp_path):
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("")
    with pytest.raises(StoreError) as caught:
        ResponseStore.in_dir(not_a_dir, ttl=3600, max_rows=10)
    message = str(caught.value)
    assert str(not_a_dir) in message and "--data-dir" in message and "\n" not in message
