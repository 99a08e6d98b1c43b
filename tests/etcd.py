"""A throwaway single-member etcd for tests: free ports, a temporary data
folder, stopped at the end.

    with EtcdServer(tmp_path) as etcd:
        aetcd.Client(etcd.host, etcd.port)  # or `inferd serve --register etcd.address`

Needs the `etcd` binary (Debian: etcd-server). When it is missing and the
tests run as root (CI on a clean machine), it is installed with apt-get;
otherwise the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from apt import find_or_install

HOST = "127.0.0.1"
PACKAGE = "etcd-server"


class EtcdStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def find_etcd() -> str | None:
    """The etcd binary's path, installing it as root when it is missing."""
    return find_or_install("etcd", PACKAGE)


def etcd_or_skip() -> str:
    found = find_etcd()
    if found is None:
        how = "as root it is installed with apt-get" if os.geteuid() == 0 else f"install {PACKAGE} (apt) or run as root"
        pytest.skip(f"these tests need an etcd binary on PATH; {how}")
    return found


class EtcdServer:
    def __init__(self, folder: str | os.PathLike, binary: str = "etcd", port: int = 0):
        self.folder = Path(folder)
        self.binary = binary
        self.host = HOST
        self.port = port  # 0: a free one, picked at start
        self.peer_port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = self.folder / "etcd.log"

    @property
    def address(self) -> str:
        return f"etcd://{self.host}:{self.port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def args(self) -> list[str]:
        peer = f"http://{self.host}:{self.peer_port}"
        return [
            self.binary, "--name", "default", "--data-dir", str(self.folder / "data"),
            "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}",
        ]

    def start(self, timeout: float = 30.0) -> "EtcdServer":
        self.folder.mkdir(parents=True, exist_ok=True)
        # Kept across restarts: the data folder remembers the member's peer URL.
        self.port, self.peer_port = self.port or free_port(), self.peer_port or free_port()
        with open(self.log_path, "ab") as log:  # a restart appends
            self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EtcdStartError(f"etcd did not come up on {self.client_url}:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def _healthy(self) -> bool:
        try:
            r = httpx.get(f"{self.client_url}/health", timeout=2.0)
        except httpx.TransportError:
            return False
        return r.status_code == 200 and r.json().get("health") == "true"

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

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def __enter__(self) -> "EtcdServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
