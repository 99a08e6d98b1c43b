"""A throwaway Redis for tests: a free port, no persistence, stopped at the end.

    with RedisServer(tmp_path) as redis:
        ...  # `inferd router --rate-limit-storage redis.url`

Needs `redis-server` (Debian: redis-server). When it is missing and the tests
run as root (CI on a clean machine), it is installed with apt-get; otherwise
the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from apt import find_or_install
from etcd import free_port

HOST = "127.0.0.1"
PACKAGE = "redis-server"


class RedisStartError(RuntimeError):
    pass


def find_redis() -> str | None:
    """The redis-server binary's path, installing it as root when it is missing."""
    return find_or_install("redis-server", PACKAGE)


def redis_or_skip() -> str:
    found = find_redis()
    if found is None:
        how = "as root it is installed with apt-get" if os.geteuid() == 0 else f"install {PACKAGE} (apt) or run as root"
        pytest.skip(f"these tests need redis-server on PATH; {how}")
    return found


class RedisServer:
    def __init__(self, folder: str | os.PathLike, binary: str = "redis-server"):
        self.folder = Path(folder)
        self.binary = binary
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = self.folder / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}"

    def start(self, timeout: float = 15.0) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        args = [self.binary, "--bind", HOST, "--port", str(self.port), "--save", "", "--appendonly", "no",
                "--dir", str(self.folder)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._pong():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RedisStartError(f"redis-server did not come up on {self.url}:\n{self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def _pong(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
