"""The SQLite store of Responses objects: round trips, TTL expiry on an
injected clock, the row bound, and durability across reopening the file."""

from __future__ import annotations

import sqlite3
import threading

from inferd.store.responses import FILE_NAME, ResponseStore, default_data_dir


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_store(tmp_path, clock=None, ttl=100.0, max_rows=10) -> ResponseStore:
    return ResponseStore(tmp_path / FILE_NAME, ttl, max_rows, clock or Clock())


MESSAGES = [{"role": "user", "content": "hi"}]


def test_put_get_delete_round_trip(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock)
    store.put("resp_a", {"input": "hi"}, {"id": "resp_a", "output": []}, MESSAGES)
    got = store.get("resp_a")
    assert (got.id, got.created_at, got.expires_at) == ("resp_a", 1000.0, 1100.0)
    assert (got.request, got.response, got.messages) == ({"input": "hi"}, {"id": "resp_a", "output": []}, MESSAGES)
    assert store.get("resp_missing") is None
    assert store.delete("resp_a") is True
    assert store.delete("resp_a") is False
    assert store.get("resp_a") is None


def test_rows_expire_after_the_ttl(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock, ttl=100.0)
    store.put("resp_old", {}, {}, [])
    clock.now = 1050.0
    store.put("resp_new", {}, {}, [])
    clock.now = 1099.9
    assert store.get("resp_old") is not None
    clock.now = 1100.0
    assert store.get("resp_old") is None  # expired, though still in the file
    assert store.delete("resp_old") is False
    assert store.count() == 2
    assert store.purge_expired() == 1
    assert store.count() == 1 and store.get("resp_new") is not None


def test_the_row_bound_evicts_the_oldest_first(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock, max_rows=3)
    for i in range(5):
        clock.now = 1000.0 + i
        store.put(f"resp_{i}", {}, {"n": i}, [])
    assert store.count() == 3
    assert [store.get(f"resp_{i}") is not None for i in range(5)] == [False, False, True, True, True]


def test_rows_survive_reopening_the_file(tmp_path):
    store = open_store(tmp_path)
    store.put("resp_kept", {"input": "x"}, {"id": "resp_kept"}, MESSAGES)
    store.close()
    reopened = open_store(tmp_path)
    assert reopened.get("resp_kept").messages == MESSAGES
    mode = sqlite3.connect(tmp_path / FILE_NAME).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_concurrent_writers_all_land(tmp_path):
    store = open_store(tmp_path, max_rows=1000)

    def write(k):
        for i in range(25):
            store.put(f"resp_{k}_{i}", {}, {}, [])

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.count() == 100


def test_the_default_data_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "inferd"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".local" / "share" / "inferd"
