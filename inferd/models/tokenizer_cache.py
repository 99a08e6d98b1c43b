"""A disk cache of tokenizers rebuilt from GGUF files.

Rebuilding a large vocabulary takes seconds. The cache sits next to the model
as `<file>.tokenizer.json`, or, where that folder is read-only, under
`$XDG_CACHE_HOME/inferd` (default ~/.cache/inferd) named by a hash of the
model's path, size and modification time. A SentencePiece vocabulary also
gets its native tables beside it (`.tokenizer.npz`), which load in
milliseconds where the tokenizer.json takes 1.5 s; the tokenizer.json stays
for what reads that format (constrained decoding) and for where no native
code can be built. A small `.meta.json` records the model's size and
modification time, the conversion version and the cache files' sizes, so a
changed model, a changed conversion or a damaged file is rebuilt instead of reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import tokenizers

from inferd.cache_files import directory_accepts_writes, user_cache_dir, write_atomically
from inferd.models import sentencepiece_tables
from inferd.models.sentencepiece_bpe import NativeBPE, library
from inferd.models.tokenizer_backends import LibraryBackend, SentencePieceBackend, TokenizerBackend

log = logging.getLogger(__name__)

# Raise when the GGUF conversion changes what it builds; older caches are then ignored.
CONVERSION_VERSION = 2


def load_cached_tokenizer(model_file: Path) -> TokenizerBackend | None:
    """The cached tokenizer for `model_file`, or None when there is no valid one."""
    fingerprint = _fingerprint(model_file)
    for cache_file in cache_locations(model_file):
        meta_file = _meta_path(cache_file)
        try:
            meta = json.loads(meta_file.read_text())
            if {key: meta.get(key) for key in fingerprint} != fingerprint or meta.get("files") != _sizes(cache_file):
                continue  # another model, or a cache file changed since it was written
            if _tables_path(cache_file).exists() and (backend := _native_backend(cache_file)) is not None:
                return backend
            return LibraryBackend(tokenizers.Tokenizer.from_file(str(cache_file)))
        except FileNotFoundError:
            continue
        except Exception as error:  # a damaged cache is rebuilt, never fatal
            log.warning("ignoring unreadable tokenizer cache %s: %s", cache_file, error)
    return None


def store_tokenizer(model_file: Path, tokenizer: tokenizers.Tokenizer) -> TokenizerBackend:
    """Save `tokenizer` (and native tables where they give its ids) in the first writable cache
    location; the backend to use from now on."""
    data = json.loads(tokenizer.to_str())
    tables = _checked_tables(tokenizer, data)
    text = _compact_merges(data)
    for cache_file in cache_locations(model_file):
        if not directory_accepts_writes(cache_file.parent):
            continue
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            _meta_path(cache_file).unlink(missing_ok=True)
            _tables_path(cache_file).unlink(missing_ok=True)
            write_atomically(cache_file, text)
            if tables is not None:
                sentencepiece_tables.save_tables(_tables_path(cache_file), *tables[:2])
            # The meta file goes last: its presence vouches for complete cache files.
            write_atomically(_meta_path(cache_file), json.dumps({**_fingerprint(model_file), "files": _sizes(cache_file)}))
            if tables is not None:
                return SentencePieceBackend(*tables, json_file=cache_file)
            return LibraryBackend(tokenizer)
        except OSError as error:
            log.info("cannot write tokenizer cache %s (%s); trying the next place", cache_file, error)
    log.warning("no writable place for the tokenizer cache of %s; it will be rebuilt on every load", model_file)
    return LibraryBackend(tokenizer)


def _checked_tables(tokenizer: tokenizers.Tokenizer, data: dict):
    """(tables, facts, native) where native tables give the tokenizer's own ids and text; else None."""
    lib = library()
    read = sentencepiece_tables.read_tables(tokenizer, data) if lib is not None else None
    if read is None:
        return None
    native = NativeBPE(read[0], lib)
    difference = sentencepiece_tables.agrees(native, tokenizer, read[1])
    if difference is not None:
        log.warning("the native tokenizer differs from the tokenizers library on %s; using the library", difference)
        return None
    return (*read, native)


def _native_backend(cache_file: Path) -> SentencePieceBackend | None:
    lib = library()
    read = sentencepiece_tables.load_tables(_tables_path(cache_file)) if lib is not None else None
    if read is None:
        return None
    return SentencePieceBackend(*read, NativeBPE(read[0], lib), json_file=cache_file)


def cache_locations(model_file: Path) -> list[Path]:
    """Where a cache may be, in the order tried: next to the model, then the user cache folder."""
    beside_model = model_file.with_name(model_file.name + ".tokenizer.json")
    stat = model_file.stat()
    key = f"{model_file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return [beside_model, user_cache_dir() / f"{model_file.name}.{digest}.tokenizer.json"]


def _fingerprint(model_file: Path) -> dict[str, int]:
    stat = model_file.stat()
    return {"conversion": CONVERSION_VERSION, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _meta_path(cache_file: Path) -> Path:
    return cache_file.with_name(cache_file.name.removesuffix(".json") + ".meta.json")


def _sizes(cache_file: Path) -> dict[str, int]:
    """The size of each cache file there is, which the meta file records and a load compares."""
    files = (cache_file, _tables_path(cache_file))
    return {path.name: path.stat().st_size for path in files if path.exists()}


def _tables_path(cache_file: Path) -> Path:
    return cache_file.with_name(cache_file.name.removesuffix(".json") + ".npz")


def _compact_merges(data: dict) -> str:
    """tokenizer.json text, with merges as "left right" strings when no piece holds a space: that form loads faster."""
    merges = data.get("model", {}).get("merges")
    if merges and all(isinstance(m, list) and " " not in m[0] and " " not in m[1] for m in merges):
        data = {**data, "model": {**data["model"], "merges": [f"{left} {right}" for left, right in merges]}}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
