"""Putting a server together, the one way `inferd serve` and the tests do it:
the state first (the socket can open while weights load), then the model."""

from __future__ import annotations

from inferd.audio.service import AudioService
from inferd.chat.reasoning import think_token_ids
from inferd.chat.template import chat_template_for
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.models.loader import LoadedModel
from inferd.server.pooled_models import serve_chat_model
from inferd.serving.chat_features import attach_chat_features
from inferd.serving.metrics import server_metrics
from inferd.serving.state import ServerState
from inferd.tenants.build import open_tenants


def new_state(config: ServeConfig, model_name: str, api_keys: frozenset[str] = frozenset(),
              key_store_dir=None) -> ServerState:
    """A server with no model yet: health answers "loading" until `attach_model`.
    Managed keys live in `key_store_dir` (None: in memory only); raises
    ValueError on a bad tenants option, TenantStoreError on a store that cannot be opened."""
    state = ServerState(config=config, model_name=model_name, api_keys=api_keys)
    state.audio = AudioService.from_config(config)  # loads nothing until an audio request comes
    if config.metrics:
        state.metrics = server_metrics(state)
    state.tenants = open_tenants(key_store_dir, api_keys, storage=config.rate_limit_storage,
                                 isolate_cache=config.isolate_cache,
                                 registry=state.metrics.registry if state.metrics is not None else None)
    return state


def attach_model(state: ServerState, loaded: LoadedModel) -> None:
    """Serve `loaded`: its chat template and chat features, then its engine (last: it marks the server ready)."""
    state.template = chat_template_for(loaded.tokenizer, state.config.chat_template)
    state.template.defaults = template_defaults(state.config)
    attach_chat_features(state, loaded)
    state.loaded = loaded
    state.engine = AsyncEngine(Engine(loaded, state.config, think_ids=think_token_ids(loaded.tokenizer)))
    serve_chat_model(state, loaded)
    state.served.loaded = True
