"""A model served in process, put together the one way `inferd serve` does it
(`inferd.server.assemble`: `new_state`, `attach_model`, then `build_app`):

    with served(loaded) as server:
        async with server.client() as client:
            r = await client.post("/v1/chat/completions", json=...)
        server.state.engine.stats()

`served(None)` is a server whose model is still loading: every model route answers 503.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI

from inferd.chat.template import ChatTemplate
from inferd.config import ServeConfig
from inferd.models.loader import LoadedModel
from inferd.server.app import build_app
from inferd.server.assemble import attach_model, new_state
from inferd.serving.state import ServerState


def small_config(**options) -> ServeConfig:
    """What the in-process tests serve with unless they say otherwise: a
    128-token context, two requests at a time, 4-token KV blocks."""
    return ServeConfig(**{"ctx_size": 128, "parallel": 2, "block_size": 4, **options})


def client(app: FastAPI) -> httpx.AsyncClient:
    """An HTTP client over `app` in process; open it with `async with` inside a running loop."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inferd")


@dataclass(frozen=True)
class Served:
    state: ServerState
    app: FastAPI

    def client(self) -> httpx.AsyncClient:
        return client(self.app)


@contextmanager
def served(loaded: LoadedModel | None, config: ServeConfig | None = None, *, template: ChatTemplate | None = None,
           api_keys: frozenset[str] = frozenset(), model_name: str = "tiny") -> Iterator[Served]:
    """Serve `loaded` (None: still loading) under `config` (default `small_config()`);
    `template` replaces the model's chat template. The engine shuts down and the tenants close on leaving."""
    state = new_state(config or small_config(), model_name, api_keys)
    if loaded is not None:
        attach_model(state, loaded)
    if template is not None:
        state.template = template
    try:
        yield Served(state, build_app(state))
    finally:
        if state.engine is not None:
            state.engine.shutdown()
        state.tenants.close()  # usage still pending, the key store and its watcher
