"""Stored Responses API objects in one SQLite table, so that clients can
retrieve a response or chain onto it with previous_response_id, across
server restarts.

Each row keeps the request, the response object and the conversation that
produced it (chat messages), which is what a later turn prepends. Rows expire
after a TTL, and the table keeps at most `max_rows`, dropping the oldest.

Faults are `StoreError`s naming the file: one that cannot be opened (a data
dir that is a file, a corrupted database) and a row that cannot be read back.
A StoreError is the server's fault, never a ValueError (a client's 400).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "responses.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    messages TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires_at);
"""


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "inferd"


class StoreError(Exception):
    """The store cannot be opened or read; the message names the file."""


class UnreadableResponse(StoreError):
    def __init__(self, id: str, path: Path, reason: str):
        super().__init__(f"stored response {id!r} in {path} is unreadable: {reason}")
        self.id, self.path = id, path


@dataclass
class StoredResponse:
    id: str
    created_at: float
    expires_at: float
    request: dict
    response: dict
    messages: list[dict]  # the chat messages in and out of this turn, for chaining


class ResponseStore:
    def __init__(self, path: str | os.PathLike, ttl: float, max_rows: int, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.ttl, self.max_rows, self.clock = ttl, max_rows, clock
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            reason = "it is a file, not a folder" if folder.is_file() else error.strerror or str(error)
            raise StoreError(f"cannot use {folder} as the data dir ({reason}): "
                             "pick another --data-dir, or move what is there away") from None
        # One connection shared by the server's threads; the lock serialises its use.
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the responses store {self.path} ({error}): "
                             "check its permissions or pick another --data-dir") from None
        self._lock = threading.Lock()
        try:
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
                self._db.execute("SELECT COUNT(*) FROM responses").fetchone()
        except sqlite3.Error as error:
            self._db.close()
            raise StoreError(f"the responses store {self.path} is unreadable ({error}): move the file away "
                             "(a new, empty store is made; stored responses are lost) or pick another --data-dir"
                             ) from None

    @classmethod
    def in_dir(cls, data_dir: str | os.PathLike, ttl: float, max_rows: int) -> "ResponseStore":
        return cls(Path(data_dir) / FILE_NAME, ttl, max_rows)

    def put(self, id: str, request: dict, response: dict, messages: list[dict]) -> None:
        now = self.clock()
        row = (id, now, now + self.ttl, json.dumps(request), json.dumps(response), json.dumps(messages))
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)
            self._db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
            self._db.execute(
                "DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created_at DESC, rowid DESC "
                "LIMIT -1 OFFSET ?)", (self.max_rows,),
            )

    def get(self, id: str) -> StoredResponse | None:
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT id, created_at, expires_at, request, response, messages FROM responses "
                    "WHERE id = ? AND expires_at > ?", (id, self.clock()),
                ).fetchone()
        except sqlite3.DatabaseError as error:
            raise UnreadableResponse(id, self.path, f"{type(error).__name__}: {error}") from None
        if row is None:
            return None
        try:
            request, response, messages = json.loads(row[3]), json.loads(row[4]), json.loads(row[5])
        except (ValueError, TypeError) as error:
            raise UnreadableResponse(id, self.path, f"{type(error).__name__}: {error}") from None
        if not (isinstance(request, dict) and isinstance(response, dict) and isinstance(messages, list)):
            raise UnreadableResponse(id, self.path, "its stored JSON does not have the stored shape")
        return StoredResponse(row[0], row[1], row[2], request, response, messages)

    def delete(self, id: str) -> bool:
        """True when a live row was there to delete."""
        with self._lock, self._db:
            cursor = self._db.execute("DELETE FROM responses WHERE id = ? AND expires_at > ?", (id, self.clock()))
        return cursor.rowcount > 0

    def purge_expired(self) -> int:
        with self._lock, self._db:
            cursor = self._db.execute("DELETE FROM responses WHERE expires_at <= ?", (self.clock(),))
        return cursor.rowcount

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
