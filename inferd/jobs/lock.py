"""One runner per data dir: two servers sharing a data dir must not both
run its jobs. The runner holds an exclusive lock on `jobs.lock` beside the
store for as long as it runs (the OS drops it when the process dies, even
by SIGKILL); another server's runner waits for it, and takes over then."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class RunnerLock:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None
