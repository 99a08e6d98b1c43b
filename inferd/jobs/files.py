"""Uploaded and generated files under the data dir: the bytes in
`files/<id>`, the record (owner, purpose, name, size, sha256, expiry) in the
job store. Written to a temporary name and renamed, so a crash never leaves a
record pointing at half a file. An expired file is gone at once (the store
no longer finds it); `sweep` deletes its bytes. Blocking: call from a worker
thread."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import BinaryIO

from inferd.jobs.store import FileRecord, JobStore, new_id

CHUNK = 1 << 20


class FileTooLarge(ValueError):
    def __init__(self, limit: int):
        super().__init__(f"the file is larger than {limit} bytes")
        self.limit = limit


class FileStore:
    def __init__(self, folder: str | Path, store: JobStore):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.store = store

    @classmethod
    def in_dir(cls, data_dir: str | Path, store: JobStore) -> FileStore:
        return cls(Path(data_dir) / "files", store)

    def path(self, id: str) -> Path:
        return self.folder / id

    def save(self, source: BinaryIO, owner: str, purpose: str, filename: str, limit: int | None = None,
             expires_after: float | None = None) -> FileRecord:
        """Copies `source` in, hashing as it goes; raises FileTooLarge past `limit` bytes. With `expires_after`,
        the file is gone that many seconds after it was made."""
        id = new_id("file-")
        partial = self.folder / f".{id}.partial"
        digest, size = hashlib.sha256(), 0
        try:
            with open(partial, "wb") as out:
                while chunk := source.read(CHUNK):
                    size += len(chunk)
                    if limit is not None and size > limit:
                        raise FileTooLarge(limit)
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, self.path(id))
        finally:
            partial.unlink(missing_ok=True)
        now = self.store.clock()
        expires_at = now + expires_after if expires_after is not None else None
        record = FileRecord(id, owner, purpose, filename, size, digest.hexdigest(), now, expires_at)
        self.store.add_file(record)
        return record

    def save_bytes(self, data: bytes, owner: str, purpose: str, filename: str,
                   expires_after: float | None = None) -> FileRecord:
        return self.save(io.BytesIO(data), owner, purpose, filename, expires_after=expires_after)

    def read(self, id: str) -> bytes:
        return self.path(id).read_bytes()

    def delete(self, id: str) -> None:
        self.store.delete_file(id)
        self.path(id).unlink(missing_ok=True)

    def sweep(self) -> int:
        """Deletes every expired file; returns how many."""
        expired = self.store.expired_files()
        for id in expired:
            self.delete(id)
        return len(expired)
