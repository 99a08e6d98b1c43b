"""`inferd import`: a local .gguf file or Hugging Face folder (or a speech
model: a Whisper folder in CTranslate2 form, a Piper voice) into the store,
hard-linked (no bytes copied; the store and the original then share them) or,
with `copy`, copied."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from inferd.model_store.describe import describe, folder_file_wanted
from inferd.model_store.errors import NotEnoughSpace, StoreError
from inferd.model_store.hashing import sha256_of
from inferd.model_store.layout import free_bytes
from inferd.model_store.manifest import Manifest, StoredFile
from inferd.model_store.names import ModelName
from inferd.model_store.speech import speech_files
from inferd.model_store.store import ModelStore


def import_model(store: ModelStore, path: str | Path, name: str | None = None, copy: bool = False,
                 on_bytes: Callable[[int], None] | None = None) -> Manifest:
    source = Path(path).expanduser().resolve()
    files = _model_files(source)
    try:
        facts = describe(source)
    except (ValueError, OSError) as error:
        raise StoreError(f"cannot import {source}: {error}") from None
    wanted = ModelName.parse(name) if name else default_name(source)
    if copy:
        needed, free = sum(p.stat().st_size for p in files.values()), free_bytes(store.root)
        if needed > free:
            raise NotEnoughSpace(needed, free, str(store.root))
    hashes = {rel: sha256_of(p, on_bytes) for rel, p in files.items()}
    stored = [StoredFile(rel, p.stat().st_size, hashes[rel]) for rel, p in files.items()]
    with store.lock():
        for file in stored:
            store.blobs.adopt(files[file.name], file.sha256, "copy" if copy else "link")
        manifest = Manifest(name=wanted.name, tag=wanted.tag, files=stored,
                            source={"type": "import", "path": str(source), "copied": copy}, **facts.__dict__)
        store.write(manifest)
    return manifest


def default_name(source: Path) -> ModelName:
    base = source.stem if source.is_file() else source.name
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip(".-_") or "model"
    return ModelName.parse(cleaned)


def _model_files(source: Path) -> dict[str, Path]:
    speech = speech_files(source)
    if speech is not None:
        return speech
    if source.is_file():
        if source.suffix != ".gguf":
            raise StoreError(f"{source} is not a .gguf file; import a GGUF file or a Hugging Face model folder")
        return {source.name: source}
    if not source.is_dir():
        raise StoreError(f"{source} does not exist")
    files = {p.relative_to(source).as_posix(): p for p in sorted(source.rglob("*")) if p.is_file()}
    wanted = {rel: p for rel, p in files.items() if folder_file_wanted(rel)}
    if "config.json" not in wanted or not any(rel.endswith(".safetensors") for rel in wanted):
        raise StoreError(f"{source} is not a Hugging Face model folder (config.json and *.safetensors); "
                         "import a .gguf file or such a folder")
    return wanted
