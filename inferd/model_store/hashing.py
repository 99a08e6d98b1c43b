"""Hashes of files: sha256 (the store's names), and the git blob id the hub
gives for files too small for LFS."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

CHUNK = 8 * 2**20


def sha256_of(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    return _hash(path, hashlib.sha256(), on_bytes)


def git_blob_sha1(path: Path) -> str:
    """The id git (and the hub, as `blobId`) gives a file's bytes."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    return _hash(path, h, None)


def _hash(path: Path, h, on_bytes) -> str:
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return h.hexdigest()
