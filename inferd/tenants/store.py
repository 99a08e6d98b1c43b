"""Keys and usage in one SQLite file (WAL) under the data dir. Keys are kept
by the hash of their secret, never the secret. Usage rows add up per key,
model and UTC day.

Calls are short and serialised by a lock; the server runs them on worker
threads. Faults are `TenantStoreError`s naming the file."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from inferd.tenants.keys import ApiKey, Limits

FILE_NAME = "tenants.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    name TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    scopes TEXT NOT NULL,
    admin INTEGER NOT NULL,
    rpm INTEGER NOT NULL, tpm INTEGER NOT NULL, daily_tokens INTEGER NOT NULL, max_concurrent INTEGER NOT NULL,
    expires_at REAL,
    disabled INTEGER NOT NULL,
    created_at REAL NOT NULL,
    last_used_at REAL
);
CREATE TABLE IF NOT EXISTS usage (
    key TEXT NOT NULL,
    model TEXT NOT NULL,
    day TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key, model, day)
);
"""
_KEY_COLUMNS = ("name, secret_hash, prefix, scopes, admin, rpm, tpm, daily_tokens, max_concurrent, expires_at, "
                "disabled, created_at, last_used_at")
USAGE_COUNTS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "errors")


class TenantStoreError(Exception):
    """The key store cannot be opened or written; the message names the file."""


class DuplicateKey(TenantStoreError):
    pass


@dataclass(frozen=True)
class UsageRow:
    key: str
    model: str
    day: str  # YYYY-MM-DD, UTC
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    errors: int = 0

    def as_dict(self) -> dict:
        return {"key": self.key, "model": self.model, "day": self.day,
                **{c: getattr(self, c) for c in USAGE_COUNTS}}


class KeyStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            reason = "it is a file, not a folder" if folder.is_file() else error.strerror or str(error)
            raise TenantStoreError(f"cannot use {folder} as the data dir ({reason}): "
                                   "pick another --data-dir, or move what is there away") from None
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
        except sqlite3.Error as error:
            raise TenantStoreError(f"cannot open the key store {self.path} ({error}): "
                                   "check its permissions or pick another --data-dir") from None
        self._lock = threading.Lock()
        try:
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
        except sqlite3.Error as error:
            self._db.close()
            raise TenantStoreError(f"the key store {self.path} is unreadable ({error}): move it away "
                                   "(stored keys and usage are lost) or pick another --data-dir") from None

    @classmethod
    def in_dir(cls, data_dir: str | Path) -> KeyStore:
        return cls(Path(data_dir) / FILE_NAME)

    def keys(self) -> list[ApiKey]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_KEY_COLUMNS} FROM keys ORDER BY name").fetchall()
        return [_key(row) for row in rows]

    def data_version(self) -> int:
        """Changes when another connection (another process: `inferd keys --data-dir`) commits to the file."""
        with self._lock:
            return self._db.execute("PRAGMA data_version").fetchone()[0]

    def insert(self, key: ApiKey) -> None:
        try:
            with self._lock, self._db:
                self._db.execute(f"INSERT INTO keys ({_KEY_COLUMNS}) VALUES ({', '.join('?' * 13)})", _row(key))
        except sqlite3.IntegrityError:
            raise DuplicateKey(f"a key named {key.name!r} already exists") from None

    def replace(self, key: ApiKey) -> None:
        with self._lock, self._db:
            self._db.execute(f"INSERT OR REPLACE INTO keys ({_KEY_COLUMNS}) VALUES ({', '.join('?' * 13)})", _row(key))

    def delete(self, name: str) -> bool:
        with self._lock, self._db:
            return self._db.execute("DELETE FROM keys WHERE name = ?", (name,)).rowcount > 0

    def touch(self, last_used: dict[str, float]) -> None:
        with self._lock, self._db:
            self._db.executemany("UPDATE keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE name = ?",
                                 [(t, name) for name, t in last_used.items()])

    def add_usage(self, rows: Iterable[UsageRow]) -> None:
        sets = ", ".join(f"{c} = {c} + excluded.{c}" for c in USAGE_COUNTS)
        with self._lock, self._db:
            self._db.executemany(
                f"INSERT INTO usage (key, model, day, {', '.join(USAGE_COUNTS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                f"ON CONFLICT (key, model, day) DO UPDATE SET {sets}",
                [(r.key, r.model, r.day, *(getattr(r, c) for c in USAGE_COUNTS)) for r in rows])

    def usage(self, key: str | None = None, model: str | None = None, since: str | None = None,
              until: str | None = None) -> list[UsageRow]:
        where, args = [], []
        for column, op, value in (("key", "=", key), ("model", "=", model), ("day", ">=", since), ("day", "<=", until)):
            if value is not None:
                where.append(f"{column} {op} ?")
                args.append(value)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            rows = self._db.execute(f"SELECT key, model, day, {', '.join(USAGE_COUNTS)} FROM usage {clause} "
                                    "ORDER BY day, key, model", args).fetchall()
        return [UsageRow(*row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _row(k: ApiKey) -> tuple:
    return (k.name, k.secret_hash, k.prefix, json.dumps(list(k.scopes)), int(k.admin), k.limits.rpm, k.limits.tpm,
            k.limits.daily_tokens, k.limits.max_concurrent, k.expires_at, int(k.disabled), k.created_at,
            k.last_used_at)


def _key(row: tuple) -> ApiKey:
    (name, secret_hash, prefix, scopes, admin, rpm, tpm, daily, concurrent, expires_at, disabled, created_at,
     last_used_at) = row
    return ApiKey(name=name, secret_hash=secret_hash, prefix=prefix, scopes=tuple(json.loads(scopes)),
                  admin=bool(admin), limits=Limits(rpm, tpm, daily, concurrent), expires_at=expires_at,
                  disabled=bool(disabled), created_at=created_at, last_used_at=last_used_at)
