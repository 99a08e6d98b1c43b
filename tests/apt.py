"""Debian packages the tests need (etcd-server, redis-server, chromium),
installed when missing on a machine where the suite runs as root (CI on a
clean clone). One install at a time across the suite's worker processes:
apt refuses a second one while the first holds its lock."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "inferd-tests-apt.lock"


def find_or_install(binary: str, *packages: str) -> str | None:
    """`binary`'s path, installing `packages` first when it is missing and we are root."""
    found = shutil.which(binary)
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it right now
        if shutil.which(binary) is None:
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
            if subprocess.run(install, env=env, capture_output=True).returncode != 0:
                subprocess.run(["apt-get", "update"], env=env, capture_output=True)  # a clean machine has no lists yet
                subprocess.run(install, env=env, capture_output=True)
    return shutil.which(binary)
