"""The job plane a server holds: the store, the files and the runner, and
what every route asks of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from inferd.jobs.files import FileStore
from inferd.jobs.runner import JobRunner
from inferd.jobs.store import JobStore


@dataclass
class JobPlane:
    store: JobStore
    files: FileStore
    max_file_size: int
    runner: JobRunner | None = None  # set once the server's app exists (its dispatch runs items through it)
    kinds: dict = field(default_factory=dict)

    @classmethod
    def in_dir(cls, data_dir: str | Path, max_file_size: int) -> JobPlane:
        store = JobStore.in_dir(data_dir)
        return cls(store, FileStore.in_dir(data_dir, store), max_file_size)

    def close(self) -> None:
        self.store.close()
