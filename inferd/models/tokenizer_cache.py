"""A disk cache of tokenizers rebuilt from GGUF files.

Rebuilding a large vocabulary takes seconds; loading the saved tokenizer.json
takes under one. The cache sits next to the model as
`<file>.tokenizer.json`, or, where that folder is read-only, under
`$XDG_CACHE_HOME/inferd` (default ~/.cache/inferd) named by a hash of the
model's path, size and modification time. A small `.meta.json` beside it
records the model's size and modification time and the conversion version, so
a changed model or a changed conversion is rebuilt instead of reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from pathlib import Path

import tokenizers

log = logging.getLogger(__name__)

# Raise when the GGUF conversion changes what it builds; older caches are then ignored.
CONVERSION_VERSION = 1


def load_cached_tokenizer(model_file: Path) -> tokenizers.Tokenizer | None:
    """The cached tokenizer for `model_file`, or None when there is no valid one."""
    fingerprint = _fingerprint(model_file)
    for cache_file in cache_locations(model_file):
        meta_file = _meta_path(cache_file)
        try:
            if json.loads(meta_file.read_text()) != fingerprint:
                continue
            return tokenizers.Tokenizer.from_file(str(cache_file))
        except FileNotFoundError:
            continue
        except Exception as error:  # a damaged cache is rebuilt, never fatal
            log.warning("ignoring unreadable tokenizer cache %s: %s", cache_file, error)
    return None


def store_tokenizer(model_file: Path, tokenizer: tokenizers.Tokenizer) -> Path | None:
    """Save `tokenizer` in the first writable cache location; the path written, or None."""
    text = _compact_merges(tokenizer.to_str())
    meta = json.dumps(_fingerprint(model_file))
    for cache_file in cache_locations(model_file):
        if not directory_accepts_writes(cache_file.parent):
            continue
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            _meta_path(cache_file).unlink(missing_ok=True)
            write_atomically(cache_file, text)
            # The meta file goes last: its presence vouches for a complete cache file.
            write_atomically(_meta_path(cache_file), meta)
            return cache_file
        except OSError as error:
            log.info("cannot write tokenizer cache %s (%s); trying the next place", cache_file, error)
    log.warning("no writable place for the tokenizer cache of %s; it will be rebuilt on every load", model_file)
    return None


def cache_locations(model_file: Path) -> list[Path]:
    """Where a cache may be, in the order tried: next to the model, then the user cache folder."""
    beside_model = model_file.with_name(model_file.name + ".tokenizer.json")
    stat = model_file.stat()
    key = f"{model_file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return [beside_model, user_cache_dir() / f"{model_file.name}.{digest}.tokenizer.json"]


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inferd"


def directory_accepts_writes(directory: Path) -> bool:
    """Whether `directory` may be written, or created where it does not exist yet."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK)


def _fingerprint(model_file: Path) -> dict[str, int]:
    stat = model_file.stat()
    return {"conversion": CONVERSION_VERSION, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _meta_path(cache_file: Path) -> Path:
    return cache_file.with_name(cache_file.name.removesuffix(".json") + ".meta.json")


def _compact_merges(tokenizer_json: str) -> str:
    """Write merges as "left right" strings when no piece holds a space: that form loads faster."""
    data = json.loads(tokenizer_json)
    merges = data.get("model", {}).get("merges")
    if merges and all(isinstance(m, list) and " " not in m[0] and " " not in m[1] for m in merges):
        data["model"]["merges"] = [f"{left} {right}" for left, right in merges]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def write_atomically(path: Path, text: str) -> None:
    # A unique temporary name in the same folder, then a rename: readers never see half a file.
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
