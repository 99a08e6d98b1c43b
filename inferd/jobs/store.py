"""The job plane's durable state: jobs, their items and their events, in one
SQLite file (WAL) under the data dir.

A job is one thing a client asked to be done later: a batch (OpenAI's or
Anthropic's) or a background response. Its items are the requests it runs,
each with its position, its custom_id, its request body and, once finished,
its result. `finish_item` writes an item's result in the same transaction
that marks it done, so after a crash every item is either done with its
result or still pending (and run again), never done twice.

A job made on behalf of another (a router's caller, named by the router's
worker key) keeps both: its owner sees it, its caller's key runs its items.
Each such item's tokens are owed to the owner in the router's books: a row
of `charges`, written in the transaction that finishes the item, until a
router claims it (`claim_charges`), so each is charged once.

Job states: validating, queued, in_progress, finalizing, completed, failed,
expired, cancelling, cancelled. Item states: pending, succeeded, errored,
canceled, expired.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

FILE_NAME = "jobs.sqlite3"

ACTIVE = ("validating", "queued", "in_progress", "finalizing", "cancelling")
TERMINAL = ("completed", "failed", "expired", "cancelled")
ITEM_DONE = ("succeeded", "errored", "canceled", "expired")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    spec TEXT NOT NULL,
    times TEXT NOT NULL,
    result TEXT NOT NULL,
    total INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs (owner, created_at);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS items (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    request TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    status_code INTEGER,
    response TEXT,
    request_id TEXT,
    finished_at REAL,
    PRIMARY KEY (job_id, idx)
);
CREATE INDEX IF NOT EXISTS items_state ON items (job_id, state);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    at REAL NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, seq);
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, created_at);
CREATE TABLE IF NOT EXISTS charges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    day TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    error INTEGER NOT NULL,
    job_id TEXT NOT NULL
);
"""
# Columns added since a store was first made: (table, column, declaration), added when missing.
_ADDED_COLUMNS = (("files", "expires_at", "REAL"), ("jobs", "caller", "TEXT"), ("jobs", "scopes", "TEXT"),
                  ("jobs", "limits", "TEXT"))


class JobStoreError(Exception):
    """The store cannot be opened; the message names the file and what to do."""


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


@dataclass
class Job:
    id: str
    kind: str  # "batch" (OpenAI), "message_batch" (Anthropic), "response" (background)
    owner: str  # the key that created it ("" on a server without keys)
    state: str
    endpoint: str  # the path every item is sent to
    created_at: float
    expires_at: float | None
    cancel_requested: bool
    spec: dict  # what the dialect needs to answer for it (input file, window, metadata)
    times: dict  # when it reached each state: in_progress_at, finalizing_at, ...
    result: dict  # output_file_id, error_file_id, errors
    total: int
    counts: dict[str, int] = field(default_factory=dict)  # items by state
    caller: str = ""  # the key that made it and runs its items: the owner, unless it spoke for the owner
    scopes: tuple[str, ...] = ()  # the models its owner may use, when the caller spoke for it (none: any)
    limits: dict | None = None  # the owner's rate limits, when the caller spoke for it: its items are held to them

    @property
    def on_behalf(self) -> bool:
        return self.caller != self.owner

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


@dataclass
class Item:
    job_id: str
    idx: int
    custom_id: str
    request: dict
    state: str = "pending"
    status_code: int | None = None
    response: dict | None = None
    request_id: str | None = None
    finished_at: float | None = None


@dataclass(frozen=True)
class ItemUsage:
    """The tokens an item's generations used, and the model they ran on."""

    model: str
    prompt: int = 0
    completion: int = 0
    cached: int = 0


@dataclass(frozen=True)
class ItemResult:
    """What running an item produced: the answer's status and JSON body."""

    state: str  # succeeded | errored | canceled | expired
    status_code: int | None = None
    body: dict | None = None
    request_id: str | None = None
    usage: ItemUsage | None = None  # None: it never reached a model


@dataclass(frozen=True)
class Charge:
    """Tokens owed to a job's owner in a router's usage ledger (as `tenants.Ledger.record` takes them)."""

    seq: int
    owner: str
    model: str
    day: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    error: bool
    job_id: str


@dataclass(frozen=True)
class FileRecord:
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    sha256: str
    created_at: float
    expires_at: float | None = None  # gone from then on (and deleted by the next sweep)


_FILE_COLUMNS = "id, owner, purpose, filename, bytes, sha256, created_at, expires_at"
_UNEXPIRED = "(expires_at IS NULL OR expires_at > ?)"
_JOB_COLUMNS = ("id, kind, owner, state, endpoint, created_at, expires_at, cancel_requested, spec, times, result, total, "
                "caller, scopes, limits")
_CHARGE_COLUMNS = "seq, owner, model, day, prompt_tokens, completion_tokens, cached_tokens, error, job_id"


class JobStore:
    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise JobStoreError(f"cannot open the job store {self.path} ({error}): "
                                "check its permissions or pick another --data-dir") from None
        self._lock = threading.Lock()
        try:
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
                for table, column, declaration in _ADDED_COLUMNS:
                    if column not in {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}:
                        self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        except sqlite3.Error as error:
            self._db.close()
            raise JobStoreError(f"the job store {self.path} is unreadable ({error}): move it away "
                                "(a new, empty one is made; stored jobs and files are lost) or pick another --data-dir"
                                ) from None

    @classmethod
    def in_dir(cls, data_dir: str | Path) -> JobStore:
        return cls(Path(data_dir) / FILE_NAME)

    def _tx(self):
        return _Transaction(self._db, self._lock)

    # -- jobs ----------------------------------------------------------------
    def create(self, id: str, kind: str, owner: str, endpoint: str, spec: dict, *, state: str = "validating",
               expires_at: float | None = None, items: Iterable[tuple[str, dict]] = (),
               caller: str | None = None, scopes: tuple[str, ...] = (), limits: dict | None = None) -> Job:
        """`caller`: the key that asks, when it is not `owner` (it speaks for the owner, who may use only
        the models in `scopes`, when it names any, within `limits`, when given)."""
        now = self.clock()
        items = list(items)
        with self._tx() as db:
            times = {} if state == "validating" else {f"{state}_at": now}
            db.execute(f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, '{{}}', ?, ?, ?, ?)",
                       (id, kind, owner, state, endpoint, now, expires_at, json.dumps(spec), json.dumps(times),
                        len(items), owner if caller is None else caller, json.dumps(list(scopes)) if scopes else None,
                        json.dumps(limits) if limits is not None else None))
            self._insert_items(db, id, items)
            self._event(db, id, "created", {"kind": kind, "items": len(items)}, now)
        return self.get(id)

    def add_items(self, id: str, items: list[tuple[str, dict]], state: str) -> None:
        """Items of a job whose input was validated after it was created; it moves to `state` with them."""
        now = self.clock()
        with self._tx() as db:
            self._insert_items(db, id, items)
            times = self._times(db, id)
            times[f"{state}_at"] = now
            db.execute("UPDATE jobs SET total = ?, state = ?, times = ? WHERE id = ?",
                       (len(items), state, json.dumps(times), id))
            self._event(db, id, "started", {"items": len(items)}, now)

    @staticmethod
    def _insert_items(db, id: str, items: list[tuple[str, dict]]) -> None:
        db.executemany("INSERT INTO items (job_id, idx, custom_id, request) VALUES (?, ?, ?, ?)",
                       ((id, i, custom_id, json.dumps(body)) for i, (custom_id, body) in enumerate(items)))

    def get(self, id: str, owner: str | None = None) -> Job | None:
        """The job, with its item counts; None when absent or `owner` is given and not its owner."""
        with self._lock:
            row = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (id,)).fetchone()
            if row is None or (owner is not None and row[2] != owner):
                return None
            counts = dict(self._db.execute("SELECT state, COUNT(*) FROM items WHERE job_id = ? GROUP BY state",
                                           (id,)).fetchall())
        return _job(row, counts)

    def list(self, owner: str, *, kinds: tuple[str, ...] = (), state: str | None = None, after: str | None = None,
             before: str | None = None, limit: int = 20, created_before: float | None = None,
             created_from: float | None = None) -> list[Job]:
        """Newest first; `after`: the id of the last job of the previous page (older ones follow), `before`:
        the id of the first job of the next page (the `limit` newer ones just before it, still newest first).
        `created_before` (exclusive) and `created_from` (inclusive) bound the creation time (a router pages
        a listing merged from several workers by time)."""
        where, args = ["owner = ?"], [owner]
        _created_bounds(where, args, created_before, created_from)
        if kinds:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            args += kinds
        if state is not None:
            where.append("state = ?")
            args.append(state)
        if after is not None:
            where.append("rowid < (SELECT rowid FROM jobs WHERE id = ?)")
            args.append(after)
        if before is not None:
            where.append("rowid > (SELECT rowid FROM jobs WHERE id = ?)")
            args.append(before)
        order = "ASC" if before is not None else "DESC"
        with self._lock:
            ids = [r[0] for r in self._db.execute(
                f"SELECT id FROM jobs WHERE {' AND '.join(where)} ORDER BY rowid {order} LIMIT ?", (*args, limit))]
        if before is not None:
            ids.reverse()
        return [job for job in map(self.get, ids) if job is not None]

    def active(self) -> list[Job]:
        with self._lock:
            ids = [r[0] for r in self._db.execute(
                f"SELECT id FROM jobs WHERE state IN ({', '.join('?' * len(ACTIVE))}) ORDER BY rowid", ACTIVE)]
        return [job for job in map(self.get, ids) if job is not None]

    def set_state(self, id: str, state: str, *, result: dict | None = None, event: str | None = None,
                  data: dict | None = None) -> None:
        now = self.clock()
        with self._tx() as db:
            times = self._times(db, id)
            times.setdefault(f"{state}_at", now)
            if result is not None:
                old = json.loads(db.execute("SELECT result FROM jobs WHERE id = ?", (id,)).fetchone()[0])
                db.execute("UPDATE jobs SET result = ? WHERE id = ?", (json.dumps({**old, **result}), id))
            db.execute("UPDATE jobs SET state = ?, times = ? WHERE id = ?", (state, json.dumps(times), id))
            self._event(db, id, event or state, data or {}, now)

    def request_cancel(self, id: str) -> bool:
        """Marks an active job cancelling; False when it had already ended."""
        now = self.clock()
        with self._tx() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (id,)).fetchone()
            if row is None or row[0] not in ACTIVE:
                return False
            if row[0] != "cancelling":
                times = self._times(db, id)
                times["cancelling_at"] = now
                db.execute("UPDATE jobs SET state = 'cancelling', cancel_requested = 1, times = ? WHERE id = ?",
                           (json.dumps(times), id))
                self._event(db, id, "cancelling", {}, now)
        return True

    def delete(self, id: str) -> None:
        with self._tx() as db:
            for table in ("items", "events"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (id,))
            db.execute("DELETE FROM jobs WHERE id = ?", (id,))

    # -- items ---------------------------------------------------------------
    def pending_items(self, id: str) -> list[Item]:
        with self._lock:
            rows = self._db.execute("SELECT job_id, idx, custom_id, request FROM items "
                                    "WHERE job_id = ? AND state = 'pending' ORDER BY idx", (id,)).fetchall()
        return [Item(r[0], r[1], r[2], json.loads(r[3])) for r in rows]

    def items(self, id: str, states: tuple[str, ...] = ITEM_DONE) -> list[Item]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, idx, custom_id, request, state, status_code, response, request_id, finished_at "
                f"FROM items WHERE job_id = ? AND state IN ({', '.join('?' * len(states))}) ORDER BY idx",
                (id, *states)).fetchall()
        return [Item(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], json.loads(r[6]) if r[6] else None, r[7], r[8])
                for r in rows]

    def finish_item(self, id: str, idx: int, result: ItemResult) -> bool:
        """The item's result and its being done, in one transaction (with what its owner is owed, when the
        job was made on the owner's behalf); False when it was already done."""
        now = self.clock()
        with self._tx() as db:
            cursor = db.execute(
                "UPDATE items SET state = ?, status_code = ?, response = ?, request_id = ?, finished_at = ? "
                "WHERE job_id = ? AND idx = ? AND state = 'pending'",
                (result.state, result.status_code, json.dumps(result.body) if result.body is not None else None,
                 result.request_id, now, id, idx))
            done = cursor.rowcount == 1
            usage = result.usage
            if done and usage is not None:
                owner, caller = db.execute("SELECT owner, caller FROM jobs WHERE id = ?", (id,)).fetchone()
                if caller is not None and caller != owner:
                    db.execute(f"INSERT INTO charges ({_CHARGE_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (owner, usage.model, _utc_day(now), usage.prompt, usage.completion,
                                usage.cached, int(result.state != "succeeded"), id))
        return done

    # -- charges -------------------------------------------------------------
    def claim_charges(self, limit: int = 1000) -> list[Charge]:
        """The oldest charges not yet claimed, removed as they are handed out (each is claimed once)."""
        with self._tx() as db:
            rows = db.execute(f"SELECT {_CHARGE_COLUMNS} FROM charges ORDER BY seq LIMIT ?", (limit,)).fetchall()
            if rows:
                db.execute("DELETE FROM charges WHERE seq <= ?", (rows[-1][0],))
        return [Charge(*r[:7], bool(r[7]), r[8]) for r in rows]

    def end_pending(self, id: str, state: str) -> int:
        """Every item not run yet ends as `state` (canceled, expired)."""
        with self._tx() as db:
            cursor = db.execute("UPDATE items SET state = ?, finished_at = ? WHERE job_id = ? AND state = 'pending'",
                                (state, self.clock(), id))
        return cursor.rowcount

    # -- events --------------------------------------------------------------
    def add_event(self, id: str, type: str, data: dict) -> None:
        with self._tx() as db:
            self._event(db, id, type, data, self.clock())

    def events(self, id: str, after: int = 0, limit: int = 100) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT seq, at, type, data FROM events WHERE job_id = ? AND seq > ? "
                                    "ORDER BY seq LIMIT ?", (id, after, limit)).fetchall()
        return [{"id": r[0], "object": "job.event", "created_at": r[1], "type": r[2], "data": json.loads(r[3])}
                for r in rows]

    @staticmethod
    def _event(db, id: str, type: str, data: dict, at: float) -> None:
        db.execute("INSERT INTO events (job_id, at, type, data) VALUES (?, ?, ?, ?)", (id, at, type, json.dumps(data)))

    @staticmethod
    def _times(db, id: str) -> dict:
        return json.loads(db.execute("SELECT times FROM jobs WHERE id = ?", (id,)).fetchone()[0])

    # -- files ---------------------------------------------------------------
    def add_file(self, record: FileRecord) -> None:
        with self._tx() as db:
            db.execute(f"INSERT INTO files ({_FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (record.id, record.owner, record.purpose, record.filename, record.bytes, record.sha256,
                        record.created_at, record.expires_at))

    def file(self, id: str, owner: str | None = None) -> FileRecord | None:
        """The file's record; None when absent, expired, or `owner` is given and not its owner."""
        with self._lock:
            row = self._db.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE id = ? AND {_UNEXPIRED}",
                                   (id, self.clock())).fetchone()
        record = FileRecord(*row) if row is not None else None
        return record if record is not None and (owner is None or record.owner == owner) else None

    def expired_files(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT id FROM files WHERE expires_at <= ?", (self.clock(),))]

    def files(self, owner: str, purpose: str | None = None, after: str | None = None, limit: int = 10000,
              newest_first: bool = True, created_before: float | None = None,
              created_from: float | None = None) -> list[FileRecord]:
        where, args = ["owner = ?", _UNEXPIRED], [owner, self.clock()]
        _created_bounds(where, args, created_before, created_from)
        if purpose is not None:
            where.append("purpose = ?")
            args.append(purpose)
        if after is not None:
            where.append(f"rowid {'<' if newest_first else '>'} (SELECT rowid FROM files WHERE id = ?)")
            args.append(after)
        order = "DESC" if newest_first else "ASC"
        with self._lock:
            rows = self._db.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE {' AND '.join(where)} "
                                    f"ORDER BY rowid {order} LIMIT ?", (*args, limit)).fetchall()
        return [FileRecord(*r) for r in rows]

    def delete_file(self, id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM files WHERE id = ?", (id,))

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    """`with store._tx() as db`: the lock held, one BEGIN IMMEDIATE ... COMMIT (or ROLLBACK)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock):
        self.db, self.lock = db, lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, *_) -> None:
        try:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.lock.release()


def _job(row: tuple, counts: dict[str, int]) -> Job:
    return Job(row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), json.loads(row[8]),
               json.loads(row[9]), json.loads(row[10]), row[11], counts, row[2] if row[12] is None else row[12],
               tuple(json.loads(row[13])) if row[13] else (), json.loads(row[14]) if row[14] else None)


def _created_bounds(where: list[str], args: list, before: float | None, since: float | None) -> None:
    if before is not None:
        where.append("created_at < ?")
        args.append(before)
    if since is not None:
        where.append("created_at >= ?")
        args.append(since)


def _utc_day(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d")
