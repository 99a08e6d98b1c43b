"""Which model a `--model` argument names: the bundled default, or a local
GGUF file or Hugging Face folder. Torch-free, for the router's tokenizer."""

from __future__ import annotations

from pathlib import Path

from inferd.models.default import DEFAULT_MODEL_NAME, default_model_path


class ModelNotFoundError(FileNotFoundError):
    """The model argument names nothing inferd can load."""


def resolve_model_path(model: str | None) -> tuple[str, Path]:
    if not model:
        return DEFAULT_MODEL_NAME, Path(default_model_path())
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelNotFoundError(
            f"model {model!r} is not a local path; inferd does not download models at run time. "
            "Pass a .gguf file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json), "
            "or omit --model to serve the bundled default"
        )
    name = path.stem if path.is_file() else path.name
    return name, path
