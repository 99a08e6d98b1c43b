"""Where inferd keeps what it builds once and reuses (tokenizers, weights, native code),
and how a file there is written so no reader sees half of it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inferd"


def directory_accepts_writes(directory: Path) -> bool:
    """Whether `directory` may be written, or created where it does not exist yet."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK)


def write_atomically(path: Path, content: str | bytes) -> None:
    # A unique temporary name in the same folder, then a rename: readers never see half a file.
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        if isinstance(content, bytes):
            with open(temporary, "xb") as file:
                file.write(content)
        else:
            with open(temporary, "x", encoding="utf-8") as file:
                file.write(content)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
