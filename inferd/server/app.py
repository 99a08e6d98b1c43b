"""The FastAPI application: middleware, error handlers, routers."""

from __future__ import annotations

from fastapi import FastAPI

from inferd import __version__
from inferd.server.auth import ApiKeyAuth
from inferd.server.body_limits import BodyLimits
from inferd.server.errors import install_error_handlers
from inferd.server.metrics import RequestMetrics
from inferd.server.routes import anthropic as anthropic_routes
from inferd.server.routes import cache, health, kv_events, llamacpp, metrics, openai
from inferd.server.routes import ollama as ollama_routes
from inferd.server.routes import responses as responses_routes
from inferd.server.state import ServerState


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="inferd", version=__version__, docs_url=None, redoc_url=None)
    app.state.inferd = state
    install_error_handlers(app)
    app.add_middleware(BodyLimits, max_body_size=state.config.max_body_size)
    # Added last runs first: metrics count every answer, auth's 401s included.
    app.add_middleware(ApiKeyAuth, state=state)
    app.add_middleware(RequestMetrics, state=state)
    app.include_router(health.router)
    app.include_router(openai.router)
    app.include_router(anthropic_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(metrics.router)
    app.include_router(cache.router)
    app.include_router(kv_events.router)
    app.include_router(llamacpp.router)
    app.include_router(ollama_routes.router)
    return app
