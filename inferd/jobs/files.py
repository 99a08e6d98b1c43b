"""Uploaded and generated files under the data dir: the bytes in
`files/<id>`, the record (owner, purpose, name, size, sha256) in the job
store. Written to a temporary name and renamed, so a crash never leaves a
record pointing at half a file. Blocking: call from a worker thread."""

from __future__ import annotations

import hashlib
import io
import os
import time
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

    def save(self, source: BinaryIO, owner: str, purpose: str, filename: str, limit: int | None = None) -> FileRecord:
        """Copies `source` in, hashing as it goes; raises FileTooLarge past `limit` bytes."""
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
        record = FileRecord(id, owner, purpose, filename, size, digest.hexdigest(), time.time())
        self.store.add_file(record)
        return record

    def save_bytes(self, data: bytes, owner: str, purpose: str, filename: str) -> FileRecord:
        return self.save(io.BytesIO(data), owner, purpose, filename)

    def read(self, id: str) -> bytes:
        return self.path(id).read_bytes()

    def delete(self, id: str) -> None:
        self.store.delete_file(id)
        self.path(id).unlink(missing_ok=True)
