"""Work that outlives a connection, driven by the official SDKs against one
real server: OpenAI files and batches (output and error files keyed by
custom_id, a bad input line, cancel mid-run with a partial output), Anthropic
message batches (results, cancel, delete), background responses (queued to
completed, cancel, stream refused), the job plane's own view, and each key
seeing only its own files and jobs while its items are charged to it."""

from __future__ import annotations

import hashlib
import json
import uuid

import anthropic
import httpx
import openai
import pytest

from conftest import TENANT_ADMIN
from polling import wait_for

ADMIN = {"Authorization": f"Bearer {TENANT_ADMIN}"}
ENDED = ("completed", "failed", "expired", "cancelled")
LONG = 60  # tokens: long enough on the tiny model that a cancel lands mid-run
RUN_ON = 400  # tokens: one request a cancel must find still running, whatever the host's speed
TOO_LONG = "word " * 700  # more than the server's 512-token context: refused when the item runs


def chat_line(custom_id: str, max_tokens: int = 4, **body) -> str:
    request = {"model": "tiny", "messages": [{"role": "user", "content": f"hello {custom_id}"}],
               "max_tokens": max_tokens, "temperature": 0, **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": request})


@pytest.fixture(scope="module")
def keys(tenant_server):
    """Two tenants, alice and bob: (name, secret) each."""
    made = {}
    with tenant_server.http() as http:
        for who in ("alice", "bob"):
            name = f"{who}-{uuid.uuid4().hex[:6]}"
            r = http.post("/api/keys", json={"name": name}, headers=ADMIN)
            assert r.status_code == 201, r.text
            made[who] = (name, r.json()["secret"])
    return made


def client(server, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=secret, max_retries=0, timeout=60.0)


def until_batch_ends(c: openai.OpenAI, id: str, timeout: float = 60.0):
    return wait_for(lambda: (b := c.batches.retrieve(id)).status in ENDED and b, timeout, interval=0.1)


def lines(c: openai.OpenAI, file_id: str | None) -> list[dict]:
    return [json.loads(x) for x in c.files.content(file_id).text.splitlines()] if file_id else []


def test_a_batch_runs_every_request_and_answers_by_custom_id(tenant_server, keys):
    alice_name, alice = keys["alice"]
    c = client(tenant_server, alice)
    good = [chat_line(f"req-{i}") for i in range(11)]
    bad = chat_line("req-bad", messages=[{"role": "user", "content": TOO_LONG}])
    uploaded = c.files.create(file=("input.jsonl", ("\n".join(good[:5] + [bad] + good[5:]) + "\n").encode()),
                              purpose="batch")
    assert (uploaded.purpose, uploaded.filename, uploaded.status) == ("batch", "input.jsonl", "processed")
    created = c.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h",
                               metadata={"run": "e2e"})
    assert created.status == "validating" and created.metadata == {"run": "e2e"}
    batch = until_batch_ends(c, created.id)
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (12, 11, 1)
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    output, errors = lines(c, batch.output_file_id), lines(c, batch.error_file_id)
    assert sorted(o["custom_id"] for o in output) == sorted(f"req-{i}" for i in range(11))
    for o in output:
        assert o["error"] is None and o["response"]["status_code"] == 200
        body = o["response"]["body"]
        assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] <= 4
    (e,) = errors
    assert e["custom_id"] == "req-bad" and e["response"]["status_code"] == 400
    assert "context" in e["response"]["body"]["error"]["message"]
    assert c.files.retrieve(batch.output_file_id).purpose == "batch_output"

    # Every item was charged to the key that created the batch.
    def alice_usage():
        r = httpx.get(f"{tenant_server.base_url}/api/usage", params={"key": alice_name}, headers=ADMIN)
        return r.json()["totals"]["requests"] >= 12 and r.json()["totals"]

    totals = wait_for(alice_usage, timeout=10.0, interval=0.2)
    assert totals and totals["completion_tokens"] >= 11 and totals["errors"] >= 1

    # Bob sees none of it.
    bob = client(tenant_server, keys["bob"][1])
    with pytest.raises(openai.NotFoundError):
        bob.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        bob.files.content(batch.output_file_id)
    assert all(f.id != uploaded.id for f in bob.files.list())
    assert batch.id not in [b.id for b in bob.batches.list()]
    assert batch.id in [b.id for b in c.batches.list(limit=100)]


def test_a_bad_input_line_fails_the_batch_with_its_line_number(tenant_server, keys):
    c = client(tenant_server, keys["alice"][1])
    text = "\n".join([chat_line("a"), chat_line("b"), chat_line("a")]) + "\n"
    f = c.files.create(file=("dup.jsonl", text.encode()), purpose="batch")
    batch = until_batch_ends(c, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                                 completion_window="24h").id)
    assert batch.status == "failed" and batch.failed_at
    (error,) = batch.errors.data
    assert (error.code, error.line, error.param) == ("duplicate_custom_id", 3, "custom_id")
    with pytest.raises(openai.BadRequestError, match="endpoint must be one of"):
        c.batches.create(input_file_id=f.id, endpoint="/v1/audio/speech", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        c.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")


def test_cancel_mid_run_leaves_a_partial_output_file(tenant_server, keys):
    c = client(tenant_server, keys["alice"][1])
    text = "\n".join(chat_line(f"long-{i}", max_tokens=LONG, ignore_eos=True) for i in range(24)) + "\n"
    f = c.files.create(file=("long.jsonl", text.encode()), purpose="batch")
    batch = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert wait_for(lambda: c.batches.retrieve(batch.id).request_counts.completed >= 1, timeout=30.0, interval=0.05)
    cancelling = c.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    ended = until_batch_ends(c, batch.id)
    assert ended.status == "cancelled" and ended.cancelled_at
    done = ended.request_counts.completed
    assert 1 <= done < 24
    output, errors = lines(c, ended.output_file_id), lines(c, ended.error_file_id)
    assert len(output) == done and len(output) + len(errors) == 24
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    assert sorted(x["custom_id"] for x in output + errors) == sorted(f"long-{i}" for i in range(24))
    with pytest.raises(openai.BadRequestError, match="already ended"):
        c.batches.cancel(batch.id)
    assert wait_for(lambda: tenant_server.http().get("/health").json().get("running", 0) == 0, timeout=10.0)


def test_anthropic_message_batches(tenant_server, keys):
    a = anthropic.Anthropic(base_url=tenant_server.base_url, api_key=keys["alice"][1], max_retries=0)
    requests = [{"custom_id": f"m{i}", "params": {"model": "tiny", "max_tokens": 4,
                                                   "messages": [{"role": "user", "content": f"hi {i}"}]}}
                for i in range(3)]
    requests.append({"custom_id": "m-bad", "params": {"model": "tiny", "max_tokens": 4,
                                                      "messages": [{"role": "user", "content": TOO_LONG}]}})
    batch = a.messages.batches.create(requests=requests)
    assert batch.id.startswith("msgbatch_") and batch.processing_status == "in_progress"
    assert batch.request_counts.processing == 4
    ended = wait_for(lambda: (b := a.messages.batches.retrieve(batch.id)).processing_status == "ended" and b, 60.0)
    assert ended and ended.request_counts.succeeded == 3 and ended.request_counts.errored == 1
    assert ended.ended_at >= ended.created_at and ended.results_url.endswith(f"/v1/messages/batches/{batch.id}/results")
    results = {r.custom_id: r.result for r in a.messages.batches.results(batch.id)}
    assert sorted(results) == ["m-bad", "m0", "m1", "m2"]
    assert all(results[f"m{i}"].type == "succeeded" and results[f"m{i}"].message.role == "assistant"
               for i in range(3))
    assert results["m-bad"].type == "errored" and results["m-bad"].error.error.type == "invalid_request_error"
    assert a.messages.batches.cancel(batch.id).processing_status == "ended"  # an ended batch stays so

    long = a.messages.batches.create(requests=[
        {"custom_id": f"l{i}", "params": {"model": "tiny", "max_tokens": LONG, "ignore_eos": True,
                                          "messages": [{"role": "user", "content": "go"}]}} for i in range(20)])
    with pytest.raises(anthropic.BadRequestError, match="still processing"):
        a.messages.batches.delete(long.id)
    assert a.messages.batches.cancel(long.id).processing_status in ("canceling", "ended")
    ended = wait_for(lambda: (b := a.messages.batches.retrieve(long.id)).processing_status == "ended" and b, 30.0)
    assert ended.cancel_initiated_at is not None and ended.request_counts.canceled >= 1
    kinds = {r.result.type for r in a.messages.batches.results(long.id)}
    assert "canceled" in kinds and kinds <= {"canceled", "succeeded"}
    assert a.messages.batches.delete(long.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        a.messages.batches.retrieve(long.id)

    with pytest.raises(anthropic.BadRequestError, match="already used by requests.0"):
        a.messages.batches.create(requests=[requests[0], requests[0]])
    bob = anthropic.Anthropic(base_url=tenant_server.base_url, api_key=keys["bob"][1], max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        bob.messages.batches.retrieve(batch.id)


def test_background_responses(tenant_server, keys):
    c = client(tenant_server, keys["alice"][1])
    queued = c.responses.create(model="tiny", input="Say hi", background=True, max_output_tokens=6)
    assert queued.status == "queued" and queued.background is True
    done = wait_for(lambda: (r := c.responses.retrieve(queued.id)).status not in ("queued", "in_progress") and r, 30.0)
    assert done.status in ("completed", "incomplete") and done.id == queued.id
    assert done.output_text and done.usage.output_tokens <= 6

    running = c.responses.create(model="tiny", input="Talk", background=True, max_output_tokens=RUN_ON,
                                 extra_body={"ignore_eos": True})
    assert wait_for(lambda: c.responses.retrieve(running.id).status == "in_progress", 30.0, interval=0.01)
    cancelled = c.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    assert c.responses.retrieve(running.id).status == "cancelled"
    job = c.get(f"/jobs/{running.id}", cast_to=object)
    assert job["state"] == "cancelled" and job["request_counts"]["canceled"] == 1

    with pytest.raises(openai.BadRequestError, match="stream and background"):
        c.responses.create(model="tiny", input="x", background=True, stream=True)
    with pytest.raises(openai.BadRequestError, match="background requires store"):
        c.responses.create(model="tiny", input="x", background=True, store=False)


def test_the_job_plane_lists_every_kind_with_events(tenant_server, keys):
    c = client(tenant_server, keys["alice"][1])
    r = c.responses.create(model="tiny", input="hi", background=True, max_output_tokens=2)
    wait_for(lambda: c.get(f"/jobs/{r.id}", cast_to=object)["state"] in ENDED, 30.0)
    page = c.get("/jobs", cast_to=object, options={"params": {"kind": "response", "limit": 1}})
    assert [j["id"] for j in page["data"]] == [r.id] and page["has_more"] is True
    events = c.get(f"/jobs/{r.id}/events", cast_to=object)["data"]
    types = [e["type"] for e in events]
    assert types == ["created", "started", "finalizing", "finished"]
    assert all(e["created_at"] >= events[0]["created_at"] for e in events)
    bob = client(tenant_server, keys["bob"][1])
    assert bob.get("/jobs", cast_to=object)["data"] == []
    with pytest.raises(openai.NotFoundError):
        bob.get(f"/jobs/{r.id}", cast_to=object)
    with pytest.raises(openai.BadRequestError, match="kind must be one of"):
        c.get("/jobs", cast_to=object, options={"params": {"kind": "nope"}})


def test_files_are_kept_with_their_sha256(tenant_server, keys):
    c = client(tenant_server, keys["alice"][1])
    data = b'{"x": 1}\n'
    f = c.files.create(file=("data.jsonl", data), purpose="user_data")
    assert f.bytes == len(data) and f.model_extra["sha256"] == hashlib.sha256(data).hexdigest()
    assert c.files.content(f.id).content == data
    with pytest.raises(openai.BadRequestError, match="purpose must be one of"):
        c.files.create(file=("x.jsonl", data), purpose="fine-tune")
    assert c.files.delete(f.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(f.id)


def test_files_expire_as_asked_and_batch_outputs_as_the_batch_asks(tenant_server, keys):
    c = client(tenant_server, keys["alice"][1])
    kept = c.files.create(file=("notes.txt", b"x"), purpose="user_data")
    brief = c.files.create(file=("notes.txt", b"x"), purpose="user_data",
                           expires_after={"anchor": "created_at", "seconds": 7200})
    batch_input = c.files.create(file=("in.jsonl", (chat_line("only", max_tokens=1) + "\n").encode()),
                                 purpose="batch")
    assert kept.expires_at is None and brief.expires_at == brief.created_at + 7200
    assert batch_input.expires_at == batch_input.created_at + 30 * 24 * 3600  # a batch input's default
    assert c.files.retrieve(brief.id).expires_at == brief.expires_at
    with pytest.raises(openai.BadRequestError, match=r"expires_after\[seconds\] must be .* 3600"):
        c.files.create(file=("n.txt", b"x"), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 60})
    with pytest.raises(openai.BadRequestError, match=r"expires_after\[anchor\] must be 'created_at'"):
        c.files.create(file=("n.txt", b"x"), purpose="user_data", expires_after={"anchor": "now", "seconds": 3600})

    batch = c.batches.create(input_file_id=batch_input.id, endpoint="/v1/chat/completions", completion_window="24h",
                             output_expires_after={"anchor": "created_at", "seconds": 3600})
    done = until_batch_ends(c, batch.id)
    assert done.status == "completed"
    output = c.files.retrieve(done.output_file_id)
    assert output.expires_at == output.created_at + 3600
    with pytest.raises(openai.BadRequestError, match=r"output_expires_after\[seconds\]"):
        c.batches.create(input_file_id=batch_input.id, endpoint="/v1/chat/completions", completion_window="24h",
                         output_expires_after={"anchor": "created_at", "seconds": 10**9})


def test_message_batches_page_both_ways(tenant_server, keys):
    a = anthropic.Anthropic(base_url=tenant_server.base_url, api_key=keys["bob"][1], max_retries=0)
    made = [a.messages.batches.create(requests=[{"custom_id": "p", "params": {
        "model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}}]).id for _ in range(3)]
    newest = list(reversed(made))
    first = a.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == newest[:2] and first.has_more is True
    older = a.messages.batches.list(limit=2, after_id=first.last_id)
    assert [b.id for b in older.data] == newest[2:3] and older.has_more is False
    back = a.messages.batches.list(limit=1, before_id=older.first_id)
    assert [b.id for b in back.data] == newest[1:2] and back.has_more is True
    with pytest.raises(anthropic.BadRequestError, match="not both"):
        a.messages.batches.list(after_id=made[0], before_id=made[1])
