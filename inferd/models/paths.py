"""Which model a `--model` argument names: the bundled default, a local GGUF
file or Hugging Face folder, or a name in the model store. Torch-free, for
the router's tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

from inferd.models.default import DEFAULT_MODEL_NAME, default_model_path


class ModelNotFoundError(FileNotFoundError):
    """The model argument names nothing inferd can load."""


def resolve_model_path(model: str | None, data_dir: str | os.PathLike | None = None) -> tuple[str, Path]:
    """(the name clients use, the path to load). A path that exists wins over
    a stored name; `data_dir` is the store's (default: `$INFERD_DATA_DIR`, then XDG's)."""
    if not model:
        return DEFAULT_MODEL_NAME, Path(default_model_path())
    path = Path(model).expanduser()
    if path.exists():
        name = path.stem if path.is_file() else path.name
        return name, path
    from inferd.model_store import BadModelName, ModelName, ModelNotStored, ModelStore, StoreError

    neither = f"model {model!r} is neither a local path (a .gguf file or a Hugging Face folder) nor"
    try:
        wanted = ModelName.parse(model)
        return wanted.short, ModelStore.open(data_dir).resolve(wanted)
    except ModelNotStored as error:
        stored = ", ".join(error.available) or "none yet"
        raise ModelNotFoundError(f"{neither} in the store (stored: {stored}); `inferd pull` fetches one from "
                                 "Hugging Face, `inferd import` adds a local file or folder") from None
    except (BadModelName, StoreError) as error:
        raise ModelNotFoundError(f"{neither} a stored model: {error}") from None
