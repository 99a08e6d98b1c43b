"""Expiry and paging on the job plane: a file gone at its expiry and its
bytes swept, a store made before files could expire opened and migrated,
paging backwards with `before`, and a batch whose window passed while the
server was down ending `expired` as soon as a runner starts."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from inferd.jobs.files import FileStore
from inferd.jobs.runner import JobKind, JobRunner
from inferd.jobs.store import ItemResult, JobStore

URL = "/v1/chat/completions"


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    s = JobStore(tmp_path / "jobs.sqlite3", clock=clock)
    yield s
    s.close()


def test_a_file_is_gone_at_its_expiry_and_the_sweep_deletes_its_bytes(store, clock, tmp_path):
    files = FileStore(tmp_path / "files", store)
    kept = files.save_bytes(b"kept", "alice", "user_data", "a.txt")
    brief = files.save_bytes(b"brief", "alice", "batch", "b.jsonl", expires_after=3600)
    assert brief.expires_at == clock.now + 3600 and kept.expires_at is None
    assert store.file(brief.id, "alice") == brief
    clock.now += 3599
    assert files.sweep() == 0 and [r.id for r in store.files("alice")] == [brief.id, kept.id]
    clock.now += 1
    assert store.file(brief.id, "alice") is None  # gone at once, before any sweep
    assert [r.id for r in store.files("alice")] == [kept.id]
    assert files.path(brief.id).exists()
    assert files.sweep() == 1
    assert not files.path(brief.id).exists() and files.path(kept.id).read_bytes() == b"kept"
    assert files.sweep() == 0


def test_a_store_made_before_files_could_expire_is_migrated(tmp_path, clock):
    path = tmp_path / "jobs.sqlite3"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE files (id TEXT PRIMARY KEY, owner TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT "
                "NOT NULL, bytes INTEGER NOT NULL, sha256 TEXT NOT NULL, created_at REAL NOT NULL)")
    old.execute("INSERT INTO files VALUES ('file-old', 'alice', 'batch', 'in.jsonl', 3, 'abc', 5.0)")
    old.commit()
    old.close()
    store = JobStore(path, clock=clock)
    try:
        record = store.file("file-old")
        assert (record.id, record.created_at, record.expires_at) == ("file-old", 5.0, None)
    finally:
        store.close()
    JobStore(path, clock=clock).close()  # opening it again adds nothing twice


def test_jobs_page_forwards_with_after_and_backwards_with_before(store):
    for i in range(6):
        store.create(f"j{i}", "message_batch", "alice", URL, {})

    def ids(jobs):
        return [j.id for j in jobs]

    assert ids(store.list("alice", limit=2)) == ["j5", "j4"]
    assert ids(store.list("alice", after="j4", limit=2)) == ["j3", "j2"]
    assert ids(store.list("alice", before="j2", limit=2)) == ["j4", "j3"]
    assert ids(store.list("alice", before="j4", limit=5)) == ["j5"]
    assert ids(store.list("bob", before="j2")) == []


def test_a_batch_whose_window_passed_while_no_server_ran_expires_when_one_starts(store, clock):
    store.create("b", "batch", "", URL, {}, state="in_progress", expires_at=clock.now + 10,
                 items=[(f"c{i}", {"i": i}) for i in range(3)])
    store.finish_item("b", 0, ItemResult("succeeded", 200, {"ok": True}))
    clock.now += 11
    ran = []

    async def dispatch(job, item):
        ran.append(item.idx)
        return ItemResult("succeeded", 200, {})

    async def go():
        runner = JobRunner(store, dispatch, {"batch": JobKind()}, concurrency=2, clock=clock)
        runner.start()
        deadline = time.monotonic() + 5
        while store.get("b").active:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await runner.stop()

    asyncio.run(go())
    job = store.get("b")
    assert job.state == "expired" and job.counts == {"succeeded": 1, "expired": 2} and ran == []
