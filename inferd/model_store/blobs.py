"""Content-addressed blobs: `sha256-<hex>`, written whole or not at all
(a temporary name in the same folder, then a rename)."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

from inferd.model_store.errors import StoreError


class CrossDevice(StoreError):
    """A hard link was asked for across filesystems."""


class Blobs:
    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, sha256: str) -> Path:
        return self.folder / f"sha256-{sha256}"

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def adopt(self, source: Path, sha256: str, how: str) -> Path:
        """Make `source` (bytes already verified to hash to `sha256`) the blob:
        `move` renames it in, `link` hard-links it, `copy` copies the bytes.
        A blob already there is kept (shared bytes share blobs)."""
        target = self.path(sha256)
        if target.is_file():
            if how == "move":
                source.unlink(missing_ok=True)
            return target
        self.folder.mkdir(parents=True, exist_ok=True)
        if how == "move":
            os.replace(source, target)
            return target
        temporary = self.folder / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            if how == "link":
                try:
                    os.link(source, temporary)
                except OSError as error:
                    if error.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                        raise CrossDevice(f"{source} cannot be hard-linked into {self.folder} "
                                          f"({error.strerror}): import with --copy to copy its bytes") from None
                    raise
            else:
                shutil.copyfile(source, temporary)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
        return target

    def all(self) -> list[Path]:
        return sorted(self.folder.glob("sha256-*")) if self.folder.is_dir() else []
