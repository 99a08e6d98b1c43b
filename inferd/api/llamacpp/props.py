"""GET /props: the server's global properties."""

from __future__ import annotations

from inferd import __version__
from inferd.api.llamacpp.protocol import GenerationFields
from inferd.api.llamacpp.sampling import generation_settings, sampling_params
from inferd.serving.state import ServerState


def default_generation_settings(state: ServerState) -> dict:
    """What a /completion request that sets nothing runs with."""
    defaults = GenerationFields()
    params = sampling_params(defaults, state.require_engine().tokenizer, state.config.default_max_tokens,
                             state.sampling_defaults)
    return generation_settings(defaults, params)


def props(state: ServerState) -> dict:
    engine = state.require_engine()
    tokenizer = engine.tokenizer
    template = state.template.source if state.template is not None else tokenizer.chat_template
    return {
        "default_generation_settings": {
            "n_ctx": engine.engine.max_model_len,
            "params": default_generation_settings(state),
        },
        "total_slots": engine.stats().max_running,
        "model_path": str(engine.engine.loaded.path),
        "chat_template": template or "",
        "bos_token": tokenizer.bos_token or "",
        "eos_token": tokenizer.eos_token or "",
        "modalities": {"vision": False},
        "build_info": f"inferd {__version__}",
    }
