"""What Ollama says about a model (name, size, digest, details), read from the loaded one."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

import torch

from inferd.models.loader import LoadedModel

_QUANTIZATION = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]


def size_bytes(loaded: LoadedModel) -> int:
    return sum(p.stat().st_size for p in _files(Path(loaded.path)))


def modified_at(loaded: LoadedModel) -> str:
    mtime = max((p.stat().st_mtime for p in _files(Path(loaded.path))), default=0.0)
    return datetime.fromtimestamp(mtime, timezone.utc).isoformat().replace("+00:00", "Z")


def digest(loaded: LoadedModel) -> str:
    """A stable identifier of the files as they are (path, size, time), not a
    content hash: hashing gigabytes of weights per request would cost seconds."""
    files = sorted(_files(Path(loaded.path)))
    key = "\n".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
    return hashlib.sha256(key.encode()).hexdigest()


def parameter_count(loaded: LoadedModel) -> int:
    return sum(p.numel() for p in loaded.model.parameters())


def parameter_size(count: int) -> str:
    """Ollama's short form: 268.1M, 7.2B."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(count)


def details(loaded: LoadedModel) -> dict:
    family = loaded.config.model_type
    return {
        "parent_model": "",
        "format": "gguf" if str(loaded.path).endswith(".gguf") else "safetensors",
        "family": family,
        "families": [family],
        "parameter_size": parameter_size(parameter_count(loaded)),
        "quantization_level": _QUANTIZATION.get(loaded.dtype, str(loaded.dtype).removeprefix("torch.").upper()),
    }


def summary(name: str, loaded: LoadedModel) -> dict:
    """One entry of /api/tags (and the base of one of /api/ps)."""
    return {"name": name, "model": name, "modified_at": modified_at(loaded), "size": size_bytes(loaded),
            "digest": digest(loaded), "details": details(loaded)}
