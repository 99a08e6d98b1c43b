"""GET /api/tags, POST /api/show, GET /api/ps, GET /api/version."""

from __future__ import annotations

from datetime import datetime, timezone

from inferd import __version__
from inferd.api.ollama.model_card import details, modified_at, parameter_count, summary
from inferd.api.ollama.models import check_model
from inferd.api.ollama.protocol import ShowRequest
from inferd.http.errors import BadRequest
from inferd.serving.state import ServerState

# The model stays loaded for the server's life; Ollama shows that as a far-off expiry.
NEVER_EXPIRES = "9999-12-31T23:59:59Z"


def tags(state: ServerState) -> dict:
    if state.engine is None:
        return {"models": []}
    return {"models": [summary(state.model_name, state.engine.engine.loaded)]}


def running(state: ServerState) -> dict:
    """The server's own models (loaded for its life), then the models loaded on demand, most recently used first."""
    models = []
    if state.engine is not None:
        models.append(_running(state.model_name, state.engine, NEVER_EXPIRES))
    for model in state.served.models:  # embedding and rerank models loaded at start, for the server's life
        if model.encoder is not None:
            models.append(_running_encoder(model.name, model.encoder, model.pooled.max_tokens, NEVER_EXPIRES))
    if state.host is not None:
        for model in sorted(state.host.loaded(), key=lambda m: -m.last_used):
            expires = model.expires_at
            when = NEVER_EXPIRES if expires is None else _iso(expires)
            entry = _running(model.name, model.chat.engine, when) if model.chat is not None else \
                _running_encoder(model.name, model.encoder.loaded, model.encoder.pooled.max_tokens, when)
            models.append({**entry, "size": model.size})
    return {"models": models}


def _running_encoder(name: str, loaded, max_tokens: int, expires_at: str) -> dict:
    """An embedding or rerank model loaded on demand (a models.encoder_loader.LoadedEncoder)."""
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    return {**summary(name, loaded), "expires_at": expires_at,
            "size_vram": weights if loaded.device.type == "cuda" else 0, "context_length": max_tokens}


def _running(name: str, engine, expires_at: str) -> dict:
    loaded = engine.engine.loaded
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    return {**summary(name, loaded), "expires_at": expires_at,
            "size_vram": weights if loaded.device.type == "cuda" else 0,
            "context_length": engine.engine.max_model_len}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parameters(state: ServerState) -> str:
    """Modelfile PARAMETER lines: the stop strings of the template."""
    return "\n".join(f'stop "{s}"' for s in state.template.stop)


def show(state: ServerState, req: ShowRequest) -> dict:
    if not req.requested():
        raise BadRequest("model is required", param="model")
    check_model(state, req.requested())
    engine = state.require_engine()
    loaded = engine.engine.loaded
    config = loaded.config
    arch = config.model_type
    template = state.template.source if state.template is not None else ""
    capabilities = ["completion"]
    if state.tool_parser is not None:
        capabilities.append("tools")
    if state.think_markers is not None:
        capabilities.append("thinking")
    return {
        "modelfile": f"FROM {loaded.path}\nTEMPLATE \"\"\"{template}\"\"\"\n"
                     + "".join(f"PARAMETER {line}\n" for line in _parameters(state).splitlines()),
        "parameters": _parameters(state),
        "template": template,
        "details": details(loaded),
        "model_info": {
            "general.architecture": arch,
            "general.parameter_count": parameter_count(loaded),
            f"{arch}.context_length": engine.engine.max_model_len,
            f"{arch}.embedding_length": config.hidden_size,
            f"{arch}.feed_forward_length": config.intermediate_size,
            f"{arch}.block_count": config.num_layers,
            f"{arch}.attention.head_count": config.num_heads,
            f"{arch}.attention.head_count_kv": config.num_kv_heads,
            f"{arch}.vocab_size": config.vocab_size,
        },
        "capabilities": capabilities,
        "modified_at": modified_at(loaded),
    }


def version() -> dict:
    return {"version": __version__}
